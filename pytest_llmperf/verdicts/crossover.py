"""The crossover concurrency of a pair of sweeps, held to its baseline like any metric.

One verdict for the pytest check (``run/checks.py``'s ``CrossoverCheck``) and for
``llmperf compare``. The crossover is read with its noise (``estimate_crossover``): a level
where the two configs differ by less than the gates' noise margin is a tie, so the crossover is
an interval [low, high]; it FAILs only when even high is below the baseline, PASSes when low
reaches it, and is INCONCLUSIVE in between; an invalid level it needs makes it INVALID. No
baseline → MISSING; a rise → PASS but stale. The entry lives at concurrency ``SWEEP_LEVEL`` of
the config's baseline file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pytest_llmperf.base.metric_defs import metric as metric_def
from pytest_llmperf.base.results import LevelResult, SweepResult
from pytest_llmperf.verdicts.baseline import BaselineStore
from pytest_llmperf.verdicts.baseline_file import SWEEP_LEVEL, BaselineEntry, EntryKey
from pytest_llmperf.verdicts.gates import NoisePrior, gate_margin
from pytest_llmperf.verdicts.stats import LaunchNoise, NoiseRule
from pytest_llmperf.verdicts.validity import ValidityPolicy, check_level
from pytest_llmperf.verdicts.verdict import Verdict

__all__ = [
    "CrossoverEstimate",
    "CrossoverRule",
    "SweepMetricResult",
    "compare_crossover",
    "crossover_why",
    "estimate_crossover",
    "judge_sweep_metric",
    "sweep_line",
]

CROSSOVER_METRIC = "crossover_concurrency"


@dataclass(frozen=True)
class CrossoverRule:
    """A ``[[crossover]]`` of the suite file as plain values (``run/`` converts it)."""

    config: str
    reference: str
    metric: str = "output_throughput"
    name: str | None = None

    def __post_init__(self) -> None:
        metric_def(self.metric)  # raises with the list of known names

    @property
    def label(self) -> str:
        return self.name or f"{self.config}-vs-{self.reference}"


@dataclass(frozen=True)
class SweepMetricResult:
    """A whole-sweep number against its baseline; ``line()`` is the summary line pytest prints."""

    label: str
    value: int | None
    baseline: int | None
    verdict: Verdict
    message: str = ""
    stale: bool = False

    def line(self) -> str:
        return sweep_line(self.label, self.value, self.baseline, self.verdict)


def sweep_line(label: str, value: int | None, baseline: int | None, verdict: Verdict) -> str:
    """``mtp-vs-plain: C=32 (baseline 32) pass``; before a baseline is recorded, it says so."""
    base = "no baseline" if baseline is None else f"baseline {baseline}"
    return f"{label}: C={value} ({base}) {verdict.value}"


@dataclass(frozen=True)
class CrossoverEstimate:
    """Where ``config`` stops beating ``reference``, with its uncertainty.

    ``value`` reads the means as they are (ties broken by a hair); ``low`` counts a level
    inside the noise margin as a loss and ``high`` as a win, so the true crossover lies in
    [low, high]. 0 means "loses already at the smallest C". ``invalid`` names a level the walk
    needed but could not judge; ``complete`` is False when that happened before a clear loss.
    """

    value: int
    low: int
    high: int
    complete: bool = True
    ties: tuple[int, ...] = ()
    invalid: tuple[str, ...] = ()
    margins: dict[int, float] = field(default_factory=dict)
    # The config never certainly lost up to the largest level walked: the true crossover may
    # lie above it (a sweep narrowed below the recorded crossover cannot show it fell).
    open_ended: bool = False

    def judge(self, base: int) -> Verdict:
        """FAIL only when certainly below ``base``, PASS when certainly at or above it."""
        if self.low >= base:
            return Verdict.PASS
        if self.open_ended:
            return Verdict.INCONCLUSIVE
        if self.complete and self.high < base:
            return Verdict.FAIL
        return Verdict.INCONCLUSIVE if self.complete else Verdict.INVALID

    def note(self) -> str:
        """What made the verdict uncertain, for the message."""
        parts = []
        if self.ties:
            levels = ", ".join(f"C={c} (margin {100 * self.margins[c]:.1f} %)" for c in self.ties)
            parts.append(f"inside the noise at {levels}: the crossover lies in C={self.low}..")
            parts[-1] += f"C={self.high}"
        parts.extend(self.invalid)
        if self.open_ended:
            parts.append(
                f"the sweep stops at C={self.high} with no certain loss, so it cannot show "
                "where the config stops winning (sweep higher levels to judge the crossover)"
            )
        return "; ".join(parts)


def _valid(
    levels: Sequence[LevelResult], sweep: SweepResult, policy: ValidityPolicy | None
) -> list[LevelResult]:
    return [lv for lv in levels if not check_level(lv, sweep.workload, policy)]


def estimate_crossover(
    config_sweep: SweepResult,
    reference_sweep: SweepResult,
    metric: str = "output_throughput",
    *,
    policy: ValidityPolicy | None = None,
    rule: NoiseRule | None = None,
    noise: NoisePrior | None = None,
) -> CrossoverEstimate:
    """Walk the common levels upward on every valid sample's judged value (their mean), with
    the gates' launch-noise margin (``gates.gate_margin``) deciding what is a tie.

    A level with no valid sample on a side ends the walk: above it nothing is known."""
    rule = rule or NoiseRule()
    higher = metric_def(metric).direction == "higher"
    common = sorted(
        {lv.max_concurrency for lv in config_sweep.levels}
        & {lv.max_concurrency for lv in reference_sweep.levels}
    )
    value = low = high = 0
    done_value = done_low = done_high = False
    ties: list[int] = []
    margins: dict[int, float] = {}
    invalid: list[str] = []
    for c in common:
        sa, sb = config_sweep.samples(c), reference_sweep.samples(c)
        va_all, vb_all = _valid(sa, config_sweep, policy), _valid(sb, reference_sweep, policy)
        if not va_all or not vb_all:
            bad = [(config_sweep, sa)] if not va_all else []
            bad += [(reference_sweep, sb)] if not vb_all else []
            reasons = [
                f"{sw.config}: {r}" for sw, s in bad for r in check_level(s[0], sw.workload, policy)
            ] or ["no valid sample"]
            invalid.append(f"C={c} is invalid ({'; '.join(reasons)})")
            break
        va = _mean(va_all, metric)
        vb = _mean(vb_all, metric)
        if va is None or vb is None or not vb:
            continue
        diff = (va - vb) / vb if higher else (vb - va) / vb  # > 0: config is better
        cfg, ref = config_sweep.config, reference_sweep.config
        priors = (noise(cfg, c, metric), noise(ref, c, metric)) if noise else (None, None)
        m = gate_margin(va_all, vb_all, metric, rule, priors)
        margins[c] = m
        if abs(diff) <= m and not done_high:
            ties.append(c)
        if not done_value:
            done_value = diff <= 0
            value = value if done_value else c
        if not done_low:
            done_low = diff <= m
            low = low if done_low else c
        if not done_high:
            done_high = diff < -m
            high = high if done_high else c
    complete = done_high or not invalid
    open_ended = bool(common) and not done_high and not invalid
    return CrossoverEstimate(
        value, low, high, complete, tuple(ties), tuple(invalid), margins, open_ended
    )


def _mean(levels: Sequence[LevelResult], name: str) -> float | None:
    vals = [v for lv in levels if (v := lv.judged_value(name)) is not None]
    return sum(vals) / len(vals) if vals else None


def judge_sweep_metric(
    value: int, entry: BaselineEntry | None, metric: str = CROSSOVER_METRIC
) -> tuple[Verdict, int | None]:
    """(verdict, baseline value): lower than the baseline fails, no baseline is MISSING."""
    summary = entry.metrics.get(metric) if entry is not None else None
    if summary is None:
        return Verdict.MISSING, None
    base = int(summary.mean)
    return (Verdict.FAIL if value < base else Verdict.PASS), base


def crossover_why(
    rule: CrossoverRule,
    value: int,
    base: int,
    levels: Sequence[int],
    config_sweep: SweepResult,
    reference_sweep: SweepResult,
) -> str:
    """The sentence for a fallen crossover: where the config first lost, by how much, and why."""
    cfg, ref, metric = rule.config, rule.reference, rule.metric
    first_loss = min((c for c in levels if c > value), default=None)
    msg = (
        f"{rule.label}: crossover concurrency fell from C={base} to C={value}: "
        f"{cfg} no longer beats {ref} on {metric}"
    )
    if first_loss is not None:
        a, b = config_sweep.level(first_loss), reference_sweep.level(first_loss)
        if a is not None and b is not None:
            va, vb = a.metric_value(metric), b.metric_value(metric)
            if va is not None and vb:
                msg += f" at C={first_loss} ({va:.1f} vs {vb:.1f}, {100 * (va - vb) / vb:+.1f} %)"
            cap = a.server_max_running_requests
            if cap is not None and first_loss > cap:
                msg += f"; {cfg}'s server caps running requests at {cap} (C={first_loss} queues)"
    return msg


def compare_crossover(
    rule: CrossoverRule,
    sweeps: Sequence[SweepResult],
    store: BaselineStore,
    hardware: str,
    *,
    policy: ValidityPolicy | None = None,
    workload: str | None = None,
) -> list[SweepMetricResult]:
    """Judge ``rule`` once per workload measured for both of its configs in ``sweeps`` (only
    ``workload``, a workload key, when given), with the noise and validity of
    ``estimate_crossover``.

    A pair that was not measured at all is INVALID: the run cannot say where the crossover is.
    """
    label = f"crossover {rule.label}"
    out: list[SweepMetricResult] = []
    for sweep in sweeps:
        if sweep.config != rule.config or workload not in (None, sweep.workload.key()):
            continue
        ref = next(
            (
                s
                for s in sweeps
                if s.config == rule.reference and s.workload.key() == sweep.workload.key()
            ),
            None,
        )
        if ref is None:
            continue
        wl = sweep.workload.key()

        def noise(cfg: str, c: int, metric: str, wl: str = wl) -> LaunchNoise | None:
            return store.launch_noise(EntryKey(hardware, cfg, wl, c), metric)

        est = estimate_crossover(sweep, ref, rule.metric, policy=policy, noise=noise)
        key = EntryKey(hardware, rule.config, wl, SWEEP_LEVEL)
        verdict, base = judge_sweep_metric(est.value, store.get(key))
        if base is not None:
            verdict = est.judge(base)
        levels = sorted(lv.max_concurrency for lv in sweep.levels)
        message = crossover_message(rule, est, base, verdict, levels, sweep, ref)
        stale = base is not None and est.low > base
        out.append(SweepMetricResult(label, est.value, base, verdict, message, stale))
    if not out:
        out.append(
            SweepMetricResult(
                label,
                None,
                None,
                Verdict.INVALID,
                f"{label}: the results hold no sweep of both {rule.config} and {rule.reference} "
                "with one workload",
            )
        )
    return out


def crossover_message(
    rule: CrossoverRule,
    est: CrossoverEstimate,
    base: int | None,
    verdict: Verdict,
    levels: Sequence[int],
    config_sweep: SweepResult,
    reference_sweep: SweepResult,
) -> str:
    """The sentence for a crossover verdict that is not a plain pass ("" for a pass)."""
    label = f"crossover {rule.label}"
    if verdict == Verdict.MISSING or base is None:
        return (
            f"{label}: {CROSSOVER_METRIC} C={est.value} has no baseline; record it with "
            "pytest --llmperf-update"
        )
    if verdict == Verdict.FAIL:
        msg = crossover_why(rule, est.value, base, levels, config_sweep, reference_sweep)
        return msg + (f"; {est.note()}" if est.ties else "")
    if verdict == Verdict.INCONCLUSIVE:
        return (
            f"{label}: crossover C={est.value} against baseline C={base} is inconclusive: "
            + est.note()
        )
    if verdict == Verdict.INVALID:
        return f"{label}: cannot place the crossover (baseline C={base}): {est.note()}"
    return ""
