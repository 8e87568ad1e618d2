"""Same-job A/B runs: two servers measured in interleaved rounds, judged on paired differences.

A ``[[compare]]`` entry names a candidate and a reference server. ``ABRun.measure`` runs
``rounds`` rounds; each round launches both servers afresh, one at a time (reference first in
even rounds, candidate first in odd ones, unless ``order = "fixed"``: alternating cancels an
order effect such as a warming box), and measures every level of the sweep on each launch.
Relaunching per round is what makes the rounds independent samples of per-launch noise; pairing
the two launches of a round cancels slow drift of the machine. ``verdicts/paired.py`` judges
each level on the paired log-ratios. All levels of a compare are measured once, on the first
check that asks, and shared by the checks of the other levels.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from pytest_llmperf.base.errors import LLMPerfError
from pytest_llmperf.base.results import LevelResult, Workload
from pytest_llmperf.report.ab_table import ABPoint
from pytest_llmperf.run.checks import Outcome, Properties
from pytest_llmperf.run.perfrun import PerfRun, PointError
from pytest_llmperf.run.suite import CompareSpec
from pytest_llmperf.verdicts.paired import PairedResult, judge_paired, remove_launch_factor


class ABError(LLMPerfError, RuntimeError):
    """An A/B run could not be completed (a server did not start, or a level had no value)."""


def round_order(spec: CompareSpec, index: int) -> tuple[str, str]:
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
    """The rounds of one ``[[compare]]`` over one sweep, measured once and judged per level."""

    spec: CompareSpec
    levels: tuple[int, ...]
    workload: Workload
    run: PerfRun
    # config -> C -> the metric per round (paired by position)
    values: dict[str, dict[int, list[float]]] = field(default_factory=dict)
    orders: list[tuple[str, str]] = field(default_factory=list)
    error: str | None = None
    measured: bool = False

    def measure(self) -> None:
        """Run every round (once); a failure is kept and raised again for every level."""
        if self.error is not None:
            raise ABError(self.error)
        if self.measured:
            return
        spec = self.spec
        try:
            for r in range(spec.rounds):
                order = round_order(spec, r)
                self.orders.append(order)
                for config in order:
                    self.run.stop(config)  # a fresh launch per round: independent launch noise
                    for c in self.levels:
                        level = self.run.measure(config, self.workload, c, keep=False)
                        where = f"compare {spec.label}: {config} at C={c}, round {r + 1}"
                        value = metric_of(level, spec.metric, where)
                        self.values.setdefault(config, {}).setdefault(c, []).append(value)
                    self.run.stop(config)
        except (PointError, ABError) as exc:
            self.error = f"compare {spec.label}: round {len(self.orders)}: {exc}"
            raise ABError(self.error) from None
        self.measured = True

    def log_ratios(self) -> dict[int, list[float]]:
        """ln(candidate / reference) per round, per level (after ``adjust``)."""
        cand, ref = self.values[self.spec.candidate], self.values[self.spec.reference]
        d = {c: [math.log(a / b) for a, b in zip(cand[c], ref[c], strict=True)] for c in cand}
        return remove_launch_factor(d) if self.spec.adjust == "launch" else d

    def result(self, concurrency: int) -> PairedResult:
        self.measure()
        spec = self.spec
        return judge_paired(
            self.log_ratios()[concurrency],
            candidate=spec.candidate,
            reference=spec.reference,
            metric_name=spec.metric,
            concurrency=concurrency,
            tolerance=spec.tolerance,
            confidence=spec.confidence,
            adjusted=spec.adjust == "launch",
        )


def ab_point(ab: ABRun, result: PairedResult) -> ABPoint:
    c = result.concurrency
    return ABPoint(
        compare=ab.spec.label,
        candidate=result.candidate,
        reference=result.reference,
        metric=result.metric,
        concurrency=c,
        rounds=result.rounds,
        order=[list(o) for o in ab.orders],
        candidate_values=ab.values[ab.spec.candidate][c],
        reference_values=ab.values[ab.spec.reference][c],
        change=result.change,
        ci_low=result.ci_low,
        ci_high=result.ci_high,
        confidence=result.confidence,
        tolerance=result.tolerance,
        adjust=ab.spec.adjust,
        verdict=result.verdict,
        message=result.message,
    )


@dataclass
class ABCheck:
    """One (compare, level) test: ``.evaluate()`` the paired result, ``.judge()`` its outcome."""

    ab: ABRun
    concurrency: int
    on_result: Callable[[ABPoint], None] | None = None
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
                        ("llmperf_ab_verdict", result.verdict),
                    ]
                )
        return self._point

    def judge(self) -> Outcome:
        point = self.evaluate()
        if point.verdict == "FAIL":
            return Outcome.fail(point.message)
        outcome = Outcome()
        if point.verdict == "INCONCLUSIVE":
            outcome.warnings.append(("inconclusive", point.message))
        return outcome
