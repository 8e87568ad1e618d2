"""Same-job A/B runs: two servers measured in interleaved rounds, judged on paired differences.

A ``[[ab]]`` entry names a candidate and a reference server. ``ABRun.measure`` runs rounds:
all ``rounds`` of them, or (``sequential``, the default setting) one at a time until every level
is decided, ``rounds`` being the budget (``run/ab_rounds.py``). Each round launches both servers
afresh, one at a time (reference first in even rounds, candidate first in odd ones, unless
``order = "fixed"``: alternating cancels an order effect such as a warming box), and measures
every level of the sweep on each launch.
Relaunching per round is what makes the rounds independent samples of per-launch noise; pairing
the two launches of a round cancels slow drift of the machine. ``verdicts/paired.py`` judges
each level on the paired log-ratios (``verdicts/paired_sequential.py`` at each look, and the
``adjust = "auto"`` choice). All levels of an A/B are measured once, on the first
check that asks, and shared by the checks of the other levels.

An invalid level (``verdicts/validity.py``: failed requests, a starved load generator, prompts
served from cache ...) is not a sample of the server's speed, so it never decides a verdict: it
is measured once more on the same launch, and if still invalid that round is left out of the
level's pairs (and, with ``adjust = "launch"``, out of the round's launch factor when fewer
than three levels remain). A level with fewer than two valid pairs is INVALID, with the reasons.

Each launch also answers the greedy consistency probes after its levels (``run/probing.py``):
the candidate's launches against the reference's, probe by probe, beyond what the launches'
own spread explains (``verdicts/consistency.py``). A faster candidate that answers differently
is no win: a consistency FAIL (or INVALID: the probes went unanswered) is every level's verdict.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pytest_llmperf.base.errors import LLMPerfError
from pytest_llmperf.base.gpu_stats import GpuTelemetry, clock_note
from pytest_llmperf.base.probes import ProbeSet
from pytest_llmperf.base.results import LevelResult, Workload
from pytest_llmperf.core.probes import ProbeError
from pytest_llmperf.report.ab_table import ABPoint
from pytest_llmperf.run import accuracy
from pytest_llmperf.run.ab_rounds import round_budget, run_rounds
from pytest_llmperf.run.checks import Outcome, Properties
from pytest_llmperf.run.passes import AUTO, auto_passes
from pytest_llmperf.run.perfrun import PerfRun, PointError
from pytest_llmperf.run.probing import probe_launch
from pytest_llmperf.run.sequential import DEFAULT_LAUNCH_BUDGET
from pytest_llmperf.run.suite import ABSpec
from pytest_llmperf.verdicts.accuracy import AccuracyComparison
from pytest_llmperf.verdicts.consistency import Consistency, judge_consistency
from pytest_llmperf.verdicts.green import paired_green_means
from pytest_llmperf.verdicts.launch_adjust import (
    MIN_LEVELS,
    launch_centre,
    polish,
    pool_residuals,
    summarize_passes,
)
from pytest_llmperf.verdicts.paired import (
    PairedResult,
    aa_band,
    judge_paired,
    remove_launch_factor,
)
from pytest_llmperf.verdicts.paired_sequential import (
    choose_adjust,
    judge_paired_look,
    judge_with_backstop,
)
from pytest_llmperf.verdicts.sequential import Look
from pytest_llmperf.verdicts.stats import LaunchNoise
from pytest_llmperf.verdicts.validity import ValidityPolicy, check_level
from pytest_llmperf.verdicts.verdict import Verdict, worst


class ABError(LLMPerfError, RuntimeError):
    """An A/B run could not be completed (a server did not start, or a level had no value)."""


def round_order(spec: ABSpec, index: int) -> tuple[str, str]:
    """Which server runs first in round ``index``."""
    first_ref = spec.order == "fixed" or index % 2 == 0
    pair = (spec.reference, spec.candidate)
    return pair if first_ref else (pair[1], pair[0])


def metric_of(level: LevelResult, name: str, where: str) -> float:
    value = level.metric_value(name)
    if value is None or not math.isfinite(value) or value <= 0:
        raise ABError(f"{where}: no positive {name} was measured (got {value!r})")
    return float(value)


@dataclass
class ABRun:
    """The rounds of one ``[[ab]]`` over one sweep, measured once and judged per level."""

    spec: ABSpec
    levels: tuple[int, ...]
    workload: Workload
    run: PerfRun
    policy: ValidityPolicy | None = None  # validity thresholds from the settings
    # config -> C -> the metric per round (paired by position): the centre of the round's
    # passes (``launch_centre`` on the log scale); NaN: every pass invalid in that round
    values: dict[str, dict[int, list[float]]] = field(default_factory=dict)
    # config -> C -> per round, the metric of each pass (NaN: that pass invalid)
    pass_values: dict[str, dict[int, list[list[float]]]] = field(default_factory=dict)
    # (config, C) -> "round r: reasons" for each round whose level stayed invalid
    invalid: dict[tuple[str, int], list[str]] = field(default_factory=dict)
    # config -> C -> the GPU telemetry of each valid measurement (clocks of the two sides)
    gpu: dict[str, dict[int, list[GpuTelemetry | None]]] = field(default_factory=dict)
    orders: list[tuple[str, str]] = field(default_factory=list)
    # config -> each round's probe answers; the first probe failure, if any
    probes: dict[str, list[ProbeSet]] = field(default_factory=dict)
    probe_error: str | None = None
    error: str | None = None
    measured: bool = False
    accuracy_items: int = 0  # the accuracy probe's items (0: off), run/accuracy.py
    accuracy_drop: float = 0.05
    accuracy: AccuracyComparison | None = None
    # the sequential rule (settings ``sequential``, ``launch_budget``, ``time_budget``)
    sequential: bool = False
    launch_budget: int = DEFAULT_LAUNCH_BUDGET  # the most rounds when ``rounds`` is not given
    time_budget: float | None = None  # minutes of rounds
    # C -> (rounds, verdict) of the look that decided the level (sequential)
    decided: dict[int, tuple[int, PairedResult]] = field(default_factory=dict)
    out_of_time: bool = False  # the time budget stopped the rounds
    # passes = "auto": σ_W / σ_L as the first side's entries recorded it (None: assumed), and
    # the passes chosen at it after the first launch's first pass (run/passes.py)
    ratio: float | None = None
    _chosen: int | None = None
    _consistency: Consistency | None = None

    @property
    def budget(self) -> int:
        """The most rounds (``ab_rounds.round_budget``)."""
        return round_budget(self.spec.rounds, self.sequential, self.launch_budget)

    def measure(self) -> None:
        """Run the rounds (once): all of them, or, sequential, until every level is decided;
        a failure is kept and raised again for every level."""
        if self.error is not None:
            raise ABError(self.error)
        if self.measured:
            return
        spec = self.spec
        try:
            look = self._look if self.sequential else None
            _, self.out_of_time = run_rounds(self.budget, self._round, look, self.time_budget)
        except (PointError, ABError) as exc:
            self.error = f"ab {spec.label}: round {len(self.orders)}: {exc}"
            raise ABError(self.error) from None
        self.measured = True
        if self.accuracy_items:
            old = accuracy.probe(self.run, spec.reference, self.workload, self.accuracy_items)
            self.accuracy = accuracy.judge(
                self.run, spec.candidate, self.workload, self.accuracy_items, old[0],
                drop=self.accuracy_drop, new_label=spec.candidate, old_label=spec.reference,
            )  # fmt: skip

    @property
    def passes(self) -> int:
        """Passes of the sweep a launch measures: ``passes``, or with ``"auto"`` what
        ``run/passes.py`` chose from the first launch's start-up and first pass (1 until
        then)."""
        return self.spec.passes if isinstance(self.spec.passes, int) else self._chosen or 1

    def _round(self, r: int) -> None:
        order = round_order(self.spec, r)
        self.orders.append(order)
        for config in order:
            self.run.stop(config)  # a fresh launch per round: independent launch noise
            got: dict[int, list[float]] = {c: [] for c in self.levels}
            j = 0
            while j < self.passes:  # passes interleave: 1, 4, 16, 1, 4, 16, ...
                one = [self._measured(config, c, r, j) for c in self.levels]
                for c, (value, _) in zip(self.levels, one, strict=True):
                    got[c].append(value)
                if self.spec.passes == AUTO and self._chosen is None:
                    startup = one[0][1].startup_s if one[0][1] is not None else None
                    pass_s = sum(lv.duration for _, lv in one if lv is not None)
                    self._chosen = auto_passes(startup, pass_s, self.ratio)
                j += 1
            for c, passes in got.items():
                self.pass_values.setdefault(config, {}).setdefault(c, []).append(passes)
                self.values.setdefault(config, {}).setdefault(c, []).append(_centre(passes))
            self._probe(config, r)
            if r == 0 and self.accuracy_items:  # untimed, after the timed levels
                accuracy.probe(self.run, config, self.workload, self.accuracy_items)
            self.run.stop(config)

    def _look(self, n: int) -> bool:
        """Judge the undecided levels on the first ``n`` rounds; a decided one keeps its
        verdict. True when every level is decided."""
        for c in self.levels:
            if c not in self.decided:
                res = self._judge_speed(c, n)
                if res.verdict in (Verdict.PASS, Verdict.FAIL):
                    self.decided[c] = (n, res)
        return len(self.decided) == len(self.levels)

    def _probe(self, config: str, r: int) -> None:
        if self.probe_error is not None:
            return
        try:
            got = probe_launch(self.run, config, self.workload)
        except ProbeError as exc:
            self.probe_error = f"{config}, round {r + 1}: {exc}"
            return
        if got is not None:
            self.probes.setdefault(config, []).append(got)

    def consistency(self) -> Consistency | None:
        """Candidate vs reference answers, against reference's A/A; None with probes off."""
        if self._consistency is None:
            spec = self.spec
            if self.probe_error is not None:
                self._consistency = Consistency(
                    Verdict.INVALID,
                    f"consistency: probes not answered ({self.probe_error})",
                    0, 0, 0, 0, None, None, None,
                )  # fmt: skip
            elif self.probes:
                self._consistency = judge_consistency(
                    self.probes.get(spec.reference, []),
                    self.probes.get(spec.candidate, []),
                    old_label=spec.reference,
                    new_label=spec.candidate,
                )
        return self._consistency

    def _measured(self, config: str, c: int, r: int, j: int) -> tuple[float, LevelResult | None]:
        """The metric of one valid measurement of the level on this launch, else NaN; and the
        level measured (its start-up and duration choose ``"auto"`` passes)."""
        at = f"round {r + 1}" + (f", pass {j + 1}" if self.passes > 1 else "")
        where = f"ab {self.spec.label}: {config} at C={c}, {at}"
        reasons: list[str] = []
        level: LevelResult | None = None
        for _ in range(2):  # an invalid level is measured once more, with fresh prompts
            level = self.run.measure(config, self.workload, c, keep=False)
            reasons = check_level(level, self.workload, self.policy)
            if not reasons:
                self.gpu.setdefault(config, {}).setdefault(c, []).append(level.gpu)
                return metric_of(level, self.spec.metric, where), level
        self.invalid.setdefault((config, c), []).append(f"{at}: " + "; ".join(reasons))
        return math.nan, level

    def pass_ratios(self, adjust: bool) -> dict[int, list[list[float]]]:
        """ln(candidate / reference) per level, per round, per pass: pass ``j`` of the
        candidate's launch paired with pass ``j`` of the reference's (launch-adjusted per pass
        with ``adjust``: each pass's launch factor removed by ``polish`` over its round's
        passes, as a baseline's passes are); NaN where the pair (or, adjusted, the pass's
        launch factor) had no valid value."""
        cand = self.pass_values[self.spec.candidate]
        ref = self.pass_values[self.spec.reference]
        shape = [len(p) for p in next(iter(cand.values()))]  # passes per round
        flat = {
            c: [
                math.log(a / b) if math.isfinite(a) and math.isfinite(b) else math.nan
                for pc, pr in zip(cand[c], ref[c], strict=True)
                for a, b in zip(pc, pr, strict=True)
            ]
            for c in cand
        }
        out: dict[int, list[list[float]]] = {}
        for c, xs in flat.items():
            it = iter(xs)
            out[c] = [[next(it) for _ in range(k)] for k in shape]
        if adjust:  # every (round, pass) has a launch factor of its own, polished per round
            for r, k in enumerate(shape):
                got = polish([{c: out[c][r][j] for c in out} for j in range(k)])
                for j, res in enumerate(got):
                    for c in out:
                        out[c][r][j] = math.nan if res is None else res[c]
        return out

    def log_ratios(self, adjust: bool | None = None) -> dict[int, list[float]]:
        """ln(candidate / reference) per round, per level: the centre of the round's pass
        ratios (``pass_ratios``; with one pass, the round's ratio), launch-adjusted with
        ``adjust``, by default when ``adjust = "launch"``; NaN where a round had no valid
        pair (or, adjusted, no launch factor)."""
        adjust = self.spec.adjust == "launch" if adjust is None else adjust
        return {
            c: [_centre_log(p) for p in rounds] for c, rounds in self.pass_ratios(adjust).items()
        }

    def noise(self, n: int, adjusted: bool) -> LaunchNoise | None:
        """Adjusted, the spread of the levels' round ratios over the first ``n`` rounds by the
        baselines' rule (``launch_adjust.pool_residuals``): pooled over the levels (what is
        left of a round once its launch factor is removed hits every level alike) and, with
        passes, with the passes' own spread when an F-test finds no excess of the rounds over
        it; known to more degrees of freedom than a level's own ``n - 1``. None for the plain
        comparison: its noise is mostly the launch factor, which neither the other levels nor
        the passes of one launch can tell apart from a level's own. None with one pass: pooled
        over three levels the spread is scaled by ``outlier_inflation`` (2.15 in variance), which
        costs an unchanged level's pass more than the degrees of freedom gain (simulated: 12 %
        more undecided levels, no more regressions caught); with passes the gain is larger."""
        if not adjusted or self.passes < 2:
            return None
        spreads = [
            summarize_passes([[x for x in p if math.isfinite(x)] for p in rounds[:n]])
            for rounds in self.pass_ratios(adjust=True).values()
        ]
        return pool_residuals([s for s in spreads if s is not None])

    def _judge_speed(self, c: int, n: int) -> PairedResult:
        """Level ``c`` on the first ``n`` rounds: the sequential rule at look ``n - 1`` of
        ``budget - 1``, or the fixed CI rule; plain, launch-adjusted, or (``auto``) adjusted
        with a plain backstop where ``choose_adjust`` says the common factor is the larger
        noise."""
        spec = self.spec
        plain = {k: v[:n] for k, v in self.log_ratios(adjust=False).items()}
        look = Look(n - 1, self.budget - 1) if self.sequential else None
        kw: dict[str, Any] = {
            "candidate": spec.candidate, "reference": spec.reference, "metric_name": spec.metric,
            "concurrency": c, "tolerance": spec.tolerance,
        }  # fmt: skip

        def judge(d: Sequence[float], share: float, adjusted: bool) -> PairedResult:
            finite = [x for x in d if math.isfinite(x)]
            if look is None:
                conf = spec.confidence if share == 1 else 1 - (1 - spec.confidence) * share
                return judge_paired(finite, confidence=conf, adjusted=adjusted, **kw)
            return judge_paired_look(finite, look.share(share), confidence=spec.confidence,
                                     adjusted=adjusted, noise=self.noise(n, adjusted),
                                     passes=self.passes, **kw)  # fmt: skip

        if spec.adjust == "none" or (spec.adjust == "auto" and len(plain) < MIN_LEVELS):
            return judge(plain[c], 1.0, False)
        adjusted = remove_launch_factor(plain)[c]
        if spec.adjust == "launch":
            return judge(adjusted, 1.0, True)
        choice = choose_adjust(plain)
        if choice.adjusted:
            return judge_with_backstop(plain[c], adjusted, judge, choice.why)
        res = judge(plain[c], 1.0, False)
        return replace(res, message=f"{res.message}; plain comparison: {choice.why}")

    def result(self, concurrency: int) -> PairedResult:
        res = self._speed(concurrency)
        cons = self.consistency()
        if cons is None:
            return res
        if cons.verdict in (Verdict.FAIL, Verdict.INVALID):
            # Changed answers fail whatever the speed said, an invalid speed sample included.
            verdict = (
                Verdict.FAIL if cons.verdict == Verdict.FAIL else worst([res.verdict, cons.verdict])
            )
            return replace(
                res,
                verdict=verdict,
                message=f"{cons.message}; speed: {res.message}",
            )
        return replace(res, message=f"{res.message}; {cons.message}")

    def judged_rounds(self, concurrency: int) -> int:
        """The rounds the level's verdict rests on: those of the look that decided it, else
        all rounds run."""
        got = self.decided.get(concurrency)
        return got[0] if got is not None else len(self.orders)

    def _speed(self, concurrency: int) -> PairedResult:
        self.measure()
        spec = self.spec
        n = self.judged_rounds(concurrency)
        got = self.decided.get(concurrency)
        res = got[1] if got is not None else self._judge_speed(concurrency, n)
        if self.out_of_time and got is None and res.verdict == Verdict.INCONCLUSIVE:
            res = replace(
                res, message=f"{res.message}; the time budget ({self.time_budget:g} min) is spent"
            )
        sides = (spec.reference, spec.candidate)
        note = clock_note({s: self.gpu.get(s, {}).get(concurrency, []) for s in sides})
        if note:
            res = replace(res, message=f"{res.message}; {note}")
        ratios = self.log_ratios(adjust=res.adjusted)[concurrency][:n]
        left_out = sum(not math.isfinite(x) for x in ratios)
        if not left_out:
            return res
        why = [
            f"{config}: {reason}"
            for config in (spec.reference, spec.candidate)
            for reason in self.invalid.get((config, concurrency), [])
            if (r := int(reason.split(":")[0].split()[1].rstrip(","))) <= n
            and not math.isfinite(ratios[r - 1])  # a round left out, not one invalid pass
        ] or ["other levels of those rounds were invalid, so their launch factor is unknown"]
        left = f"{left_out} of {len(ratios)} rounds left out as invalid ({'; '.join(why)})"
        if len(ratios) - left_out < 2:
            return replace(
                res,
                verdict=Verdict.INVALID,
                message=(
                    f"{spec.candidate} vs {spec.reference} at C={concurrency}: {left}; fewer "
                    "than 2 valid paired rounds remain, so this is not a performance verdict"
                ),
            )
        return replace(res, message=f"{res.message}; {left}")


def _centre_log(logs: Sequence[float]) -> float:
    """A round's log value: the centre of its valid passes (NaN: none valid)."""
    finite = [x for x in logs if math.isfinite(x)]
    return launch_centre(finite) if finite else math.nan


def _centre(values: Sequence[float]) -> float:
    """A round's value of one side: its valid passes' centre on the log scale (the middle
    pass, or the geometric mean of the middle two: ``launch_centre`` of the logs, exactly)."""
    ok = sorted(v for v in values if math.isfinite(v) and v > 0)
    if not ok:
        return math.nan
    k = len(ok) // 2
    return ok[k] if len(ok) % 2 else math.sqrt(ok[k - 1] * ok[k])


def _or_none(values: list[float]) -> list[float | None]:
    return [v if math.isfinite(v) else None for v in values]


def ab_point(ab: ABRun, result: PairedResult) -> ABPoint:
    c = result.concurrency
    cons = ab.consistency()
    got = ab.decided.get(c)
    decided = got[0] if got is not None and result.verdict == got[1].verdict else None
    return ABPoint(
        ab=ab.spec.label,
        candidate=result.candidate,
        reference=result.reference,
        metric=result.metric,
        concurrency=c,
        rounds=result.rounds,
        order=[list(o) for o in ab.orders],
        candidate_values=_or_none(ab.values[ab.spec.candidate][c]),
        reference_values=_or_none(ab.values[ab.spec.reference][c]),
        change=result.change,
        ci_low=result.ci_low,
        ci_high=result.ci_high,
        confidence=result.confidence,
        tolerance=result.tolerance,
        adjust=ab.spec.adjust,
        verdict=result.verdict,
        message=result.message,
        **_aa(ab, c, result.confidence),
        accuracy=ab.accuracy,
        consistency=None if cons is None else cons.verdict,
        probes_differing=None if cons is None else cons.differing,
        probes_compared=None if cons is None else cons.compared,
        probes_aa_differing=None if cons is None else cons.aa_differing,
        probes_aa_compared=None if cons is None else cons.aa_compared,
        budget=ab.budget if ab.sequential else None,
        rounds_run=len(ab.orders),
        decided_after=decided,
        adjusted=result.adjusted,
        green_means=paired_green_means(result, decided),
        missable=result.missable,
        **_passes(ab, c),
    )


def _passes(ab: ABRun, c: int) -> dict[str, Any]:
    if ab.passes < 2:
        return {}
    side = {s: [_or_none(p) for p in ab.pass_values[s][c]] for s in ab.pass_values}
    return {
        "passes": ab.passes,
        "candidate_passes": side[ab.spec.candidate],
        "reference_passes": side[ab.spec.reference],
    }


def _aa(ab: ABRun, c: int, confidence: float) -> dict[str, Any]:
    """The A/A band of level ``c`` from the same rounds (each side against itself)."""
    band = aa_band([ab.values[n][c] for n in (ab.spec.reference, ab.spec.candidate)], confidence)
    if band is None:
        return {}
    lo, hi, pairs = band
    return {"aa_low": lo, "aa_high": hi, "aa_pairs": pairs}


@dataclass
class ABCheck:
    """One (A/B, level) test: ``.evaluate()`` the paired result, ``.judge()`` its outcome."""

    ab: ABRun
    concurrency: int
    invalid_policy: str = "fail"  # or "skip": what an INVALID point does to the test
    on_result: Callable[[ABPoint], None] | None = None
    on_invalid: Callable[[str], None] | None = None  # the session's list (summary, bisect 125)
    on_properties: Properties | None = None
    _point: ABPoint | None = None

    def evaluate(self) -> ABPoint:
        if self._point is None:
            result = self.ab.result(self.concurrency)
            self._point = ab_point(self.ab, result)
            if self.on_result is not None:
                self.on_result(self._point)
            if self.on_properties is not None:
                self.on_properties(
                    [
                        ("llmperf_ab_change", f"{result.change:.5f}"),
                        ("llmperf_ab_verdict", result.verdict.value),
                    ]
                    + ([("llmperf.green_means", g)] if (g := self._point.green_means) else [])
                )
        return self._point

    def judge(self) -> Outcome:
        point = self.evaluate()
        acc = point.accuracy
        if point.verdict == Verdict.FAIL:
            return Outcome.fail(point.message + (f"\n{acc.message}" if acc is not None else ""))
        if acc is not None and acc.verdict == Verdict.FAIL:
            return Outcome.fail(acc.message)
        if acc is not None and acc.verdict == Verdict.INVALID:
            point = point.model_copy(update={"verdict": acc.verdict, "message": acc.message})
        if point.verdict == Verdict.INVALID:
            if self.on_invalid is not None:
                self.on_invalid(point.message)
            if self.invalid_policy == "fail":
                return Outcome.fail(
                    f"INVALID measurement (not a performance verdict): {point.message}"
                )
            return Outcome("skip", f"llmperf INVALID measurement: {point.message}")
        outcome = Outcome()
        if point.verdict == Verdict.INCONCLUSIVE:
            outcome.warnings.append(("inconclusive", point.message))
        if acc is not None and acc.verdict == Verdict.INCONCLUSIVE:
            outcome.warnings.append(("inconclusive", acc.message))
        return outcome
