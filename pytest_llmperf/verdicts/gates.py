"""Cross-config gates as data: "mtp ≥ plain × 1.2 at C≤4", "mtp never below plain − 2 %".

A gate compares two configs measured in the same run, point by point over the concurrencies
its ``where`` clause selects. Both levels must be valid (``validity.check_level``) or the point
is INVALID. ``crossover_concurrency`` condenses a pair of sweeps to one number that can be kept
in a baseline like any other metric (higher is better).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from pytest_llmperf.base.errors import InputError
from pytest_llmperf.base.metric_defs import metric as metric_def
from pytest_llmperf.base.results import LevelResult, SweepResult
from pytest_llmperf.base.values import MetricName
from pytest_llmperf.verdicts.baseline_file import BaselineEntry
from pytest_llmperf.verdicts.compare import explain, fmt_num
from pytest_llmperf.verdicts.stats import LaunchNoise, NoiseRule, Side
from pytest_llmperf.verdicts.validity import ValidityPolicy, check_level
from pytest_llmperf.verdicts.verdict import Verdict, worst

__all__ = [
    "Gate",
    "GateError",
    "GatePoint",
    "GateResult",
    "NoisePrior",
    "WhereClause",
    "crossover_concurrency",
    "evaluate_gate",
    "evaluate_gates",
    "load_gates",
    "parse_where",
]

Op = Literal[">=", ">", "<=", "<"]
_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    ">": operator.gt,
    "<=": operator.le,
    "<": operator.lt,
    "==": operator.eq,
}
_WHERE_HELP = (
    "expected 'all', a comparison such as 'C<=4', 'C>=64', 'C==32', a list 'C in 1,4,16', "
    "or comparisons joined with 'and' ('C>=4 and C<=32')"
)
_CMP = re.compile(r"^C\s*(<=|>=|==|=|<|>)\s*(\d+)$", re.IGNORECASE)
_IN = re.compile(r"^C\s+in\s+\[?\s*([\d\s,]+?)\s*\]?$", re.IGNORECASE)


class GateError(InputError):
    """A gate definition is wrong; the message names the gate and the field."""


@dataclass(frozen=True)
class WhereClause:
    """A parsed ``where``: a conjunction of (op, value) tests and/or a set of allowed C."""

    text: str
    tests: tuple[tuple[str, int], ...] = ()
    allowed: frozenset[int] | None = None

    def matches(self, c: int) -> bool:
        if self.allowed is not None and c not in self.allowed:
            return False
        return all(_OPS[op](c, v) for op, v in self.tests)


def parse_where(text: str) -> WhereClause:
    """Parse ``all`` / ``C<=4`` / ``C in 1,4`` / ``C>=4 and C<=32``; errors say what is allowed."""
    s = text.strip()
    if s.lower() in ("", "all", "*"):
        return WhereClause(text="all")
    tests: list[tuple[str, int]] = []
    allowed: frozenset[int] | None = None
    for part in re.split(r"\s+and\s+", s, flags=re.IGNORECASE):
        part = part.strip()
        if m := _CMP.match(part):
            op = "==" if m.group(1) == "=" else m.group(1)
            tests.append((op, int(m.group(2))))
        elif m := _IN.match(part):
            items = [x.strip() for x in m.group(1).split(",") if x.strip()]
            if not items or not all(x.isdigit() for x in items):
                raise GateError(f"where clause {text!r}: bad list in {part!r}; {_WHERE_HELP}")
            vals = frozenset(int(x) for x in items)
            allowed = vals if allowed is None else allowed & vals
        else:
            raise GateError(f"where clause {text!r}: cannot parse {part!r}; {_WHERE_HELP}")
    return WhereClause(text=s, tests=tuple(tests), allowed=allowed)


class Gate(BaseModel):
    """``config`` ``op`` ``reference`` × ``factor`` on ``metric`` at every C matching ``where``.

    ``Gate(config="mtp", reference="plain", factor=0.98)`` reads "mtp's output throughput is
    never below plain − 2 % at any C".
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    config: str
    reference: str
    metric: MetricName = "output_throughput"
    op: Op = ">="
    factor: float = Field(default=1.0, gt=0.0)
    where: str = "all"
    name: str | None = None

    @field_validator("where")
    @classmethod
    def _valid_where(cls, v: str) -> str:
        parse_where(v)  # GateError is a ValueError, so pydantic reports it against `where`
        return v

    def applies(self, concurrency: int) -> bool:
        return parse_where(self.where).matches(concurrency)

    def describe(self) -> str:
        if self.name:
            return self.name
        where = "" if parse_where(self.where).text == "all" else f" at {self.where}"
        return f"{self.config} {self.op} {self.factor:g} × {self.reference} {self.metric}{where}"


def load_gates(items: Sequence[Mapping[str, Any]], source: str = "gates") -> list[Gate]:
    """Gates from a list of dicts (a suite's TOML/YAML), errors naming index and field."""
    gates: list[Gate] = []
    problems: list[str] = []
    for i, item in enumerate(items):
        try:
            gates.append(Gate.model_validate(item))
        except ValidationError as exc:
            for e in exc.errors(include_url=False, include_input=False):
                loc = ".".join(str(p) for p in e["loc"]) or "<gate>"
                msg = str(e["msg"]).removeprefix("Value error, ")
                problems.append(f"  - {source}[{i}].{loc}: {msg}")
    if problems:
        raise GateError(f"{source}: {len(problems)} invalid gate field(s):\n" + "\n".join(problems))
    return gates


@dataclass(frozen=True)
class GatePoint:
    concurrency: int
    value: float | None
    reference_value: float | None
    threshold: float | None
    verdict: Verdict
    message: str
    margin: float | None = None  # relative noise margin the comparison had to clear


@dataclass
class GateResult:
    gate: Gate
    points: list[GatePoint] = field(default_factory=list)

    @property
    def verdict(self) -> Verdict:
        if not self.points:
            return Verdict.MISSING
        return worst(p.verdict for p in self.points)

    @property
    def failed(self) -> list[GatePoint]:
        return [p for p in self.points if p.verdict != Verdict.PASS]

    def message(self) -> str:
        if not self.points:
            return f"{self.gate.describe()}: no concurrency measured for both configs"
        return "\n".join(p.message for p in self.failed)


# (config, concurrency, metric) -> that config's recorded launch-to-launch spread, or None
NoisePrior = Callable[[str, int, str], LaunchNoise | None]


def gate_margin(
    a: Sequence[LevelResult],
    b: Sequence[LevelResult],
    name: str,
    rule: NoiseRule,
    priors: tuple[LaunchNoise | None, LaunchNoise | None] = (None, None),
) -> float:
    """z·se of the relative difference between two configs' means: each side's launch-to-
    launch spread, pooled with its prior (the spread its baseline recorded, over its launches)
    where there is one, since two launches alone can land close together by chance; a side
    with one launch and no prior takes ``rule.assumed_noise``. The two sides are separate
    launches, so both spreads count.

    The within-run error is left out on purpose: two configs differ in their steady-state
    shape (waves at a running cap, speculative bursts), and batch means over a window of one
    or two waves read that structure as noise (margins of 28-55 % were seen on the quiet
    simulator, so "mtp never loses" could not fail at a 17.8 % loss)."""
    var = 0.0
    for side, prior in zip((a, b), priors, strict=True):
        vals = [v for lv in side if (v := lv.judged_value(name)) is not None]
        got = Side.from_samples(
            vals, [lv.launch for lv in side if lv.judged_value(name) is not None]
        )
        if prior is not None:
            sd = prior.pooled_with(got.between_sd, got.launches)
        else:
            sd = got.between_sd if got.between_sd is not None else rule.assumed_noise
        var += max(sd, rule.noise_floor) ** 2 / got.launches
    return rule.z * var**0.5


def _mean(levels: Sequence[LevelResult], name: str) -> float | None:
    vals = [v for lv in levels if (v := lv.judged_value(name)) is not None]
    return sum(vals) / len(vals) if vals else None


def _by_name(sweeps: Mapping[str, SweepResult] | Sequence[SweepResult]) -> dict[str, SweepResult]:
    if isinstance(sweeps, Mapping):
        return dict(sweeps)
    return {s.config: s for s in sweeps}


def evaluate_gate(
    gate: Gate,
    sweeps: Mapping[str, SweepResult] | Sequence[SweepResult],
    *,
    policy: ValidityPolicy | None = None,
    rule: NoiseRule | None = None,
    noise: NoisePrior | None = None,
    baseline: Callable[[str, int], BaselineEntry | None] | None = None,
) -> GateResult:
    """One verdict and sentence per concurrency measured by both configs and selected.

    Each side is judged on all its valid samples (``SweepResult.samples``); a point whose
    distance from the threshold is inside the noise margin (``gate_margin``) is INCONCLUSIVE,
    and a side with no valid sample makes it INVALID, never a pass or a fail."""
    by = _by_name(sweeps)
    result = GateResult(gate)
    cfg, ref = by.get(gate.config), by.get(gate.reference)
    if cfg is None or ref is None:
        return result
    d = metric_def(gate.metric)
    unit = f" {d.unit}" if d.unit else ""
    label = "" if gate.metric == "output_throughput" else f"{gate.metric} "
    common = sorted(
        {lv.max_concurrency for lv in cfg.levels} & {lv.max_concurrency for lv in ref.levels}
    )
    for c in common:
        if not gate.applies(c):
            continue
        head = f"{gate.config} at C={c}: "
        sa, sb = cfg.samples(c), ref.samples(c)
        va_all = [lv for lv in sa if not check_level(lv, cfg.workload, policy)]
        vb_all = [lv for lv in sb if not check_level(lv, ref.workload, policy)]
        if not va_all or not vb_all:
            # An invalid level never decides a gate: no valid sample, no verdict.
            reasons = (
                []
                if va_all
                else [f"{gate.config}: {r}" for r in check_level(sa[0], cfg.workload, policy)]
            )
            reasons += (
                []
                if vb_all
                else [f"{gate.reference}: {r}" for r in check_level(sb[0], ref.workload, policy)]
            )
            msg = head + "invalid measurement: " + "; ".join(reasons)
            result.points.append(GatePoint(c, None, None, None, Verdict.INVALID, msg))
            continue
        va, vb = _mean(va_all, gate.metric), _mean(vb_all, gate.metric)
        if va is None or vb is None:
            msg = head + f"{gate.metric} was not measured for both configs"
            result.points.append(GatePoint(c, va, vb, None, Verdict.MISSING, msg))
            continue
        thr = vb * gate.factor
        ok = _OPS[gate.op](va, thr)
        priors = (
            (noise(gate.config, c, gate.metric), noise(gate.reference, c, gate.metric))
            if noise
            else (None, None)
        )
        margin = gate_margin(va_all, vb_all, gate.metric, rule or NoiseRule(), priors)
        close = gate.op != "==" and thr != 0 and abs(va - thr) / abs(thr) <= margin
        ch = (va - vb) / vb if vb else 0.0
        side = "below" if ch < 0 else "above"
        n = f" (mean of {len(va_all)}/{len(vb_all)})" if len(va_all) + len(vb_all) > 2 else ""
        msg = (
            f"{head}{label}{fmt_num(va)}{unit}{n}, {100 * abs(ch):.1f} % {side} {gate.reference} "
            f"({fmt_num(vb)}), needs {gate.op} {gate.factor:g} × {gate.reference} "
            f"({fmt_num(thr)})"
        )
        if close:
            verdict = Verdict.INCONCLUSIVE
            msg += (
                f"; inconclusive: {100 * abs(va - thr) / abs(thr):.1f} % from the threshold is "
                f"inside the noise margin {100 * margin:.1f} %"
            )
        else:
            verdict = Verdict.PASS if ok else Verdict.FAIL
        if verdict != Verdict.PASS:
            # with the config's own baseline, explain can tell an accept length that fell
            why = explain(va_all[-1], baseline(gate.config, c) if baseline else None)
            if why:
                msg += "; " + "; ".join(why)
        result.points.append(GatePoint(c, va, vb, thr, verdict, msg, margin))
    return result


def evaluate_gates(
    gates: Sequence[Gate],
    sweeps: Mapping[str, SweepResult] | Sequence[SweepResult],
    *,
    policy: ValidityPolicy | None = None,
    noise: NoisePrior | None = None,
) -> list[GateResult]:
    return [evaluate_gate(g, sweeps, policy=policy, noise=noise) for g in gates]


def crossover_concurrency(
    config_sweep: SweepResult,
    reference_sweep: SweepResult,
    metric: str = "output_throughput",
) -> int | None:
    """The largest C of the leading run of concurrencies where ``config`` beats ``reference``.

    Scanning the common levels upward, the crossover is the last C before the first loss
    (strictly better counts as a win, direction-aware). None when it already loses at the
    smallest C; the largest C when it never loses. A later lucky win after a loss does not move
    it, so the number means "safe up to here".
    """
    d = metric_def(metric)
    better = operator.gt if d.direction == "higher" else operator.lt
    common = sorted(
        {lv.max_concurrency for lv in config_sweep.levels}
        & {lv.max_concurrency for lv in reference_sweep.levels}
    )
    last: int | None = None
    for c in common:
        a, b = config_sweep.level(c), reference_sweep.level(c)
        va = a.metric_value(metric) if a else None
        vb = b.metric_value(metric) if b else None
        if va is None or vb is None:
            continue
        if not better(va, vb):
            break
        last = c
    return last
