"""Whole-sweep checks: a number computed over a config's sweep (the crossover C, the largest
C within the SLO) and held to its baseline, with the same ``Outcome`` as a point's check."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pytest_llmperf.base.results import SweepResult, Workload
from pytest_llmperf.core.slo import Slo, level_meets, max_concurrency_within_slo
from pytest_llmperf.run.adjust import (
    launch_noise,
)
from pytest_llmperf.run.busy import BusyPoint, OnBusy, all_starved, busy_point, settle
from pytest_llmperf.run.checks import (
    OnJudgement,
    Outcome,
    Properties,
    SweepCheckResult,
    _busy,
    _judged,
)
from pytest_llmperf.run.perfrun import PerfRun, PointError
from pytest_llmperf.run.recording import run_provenance, valid_samples
from pytest_llmperf.run.suite import CrossoverSpec
from pytest_llmperf.verdicts.baseline import (
    SWEEP_LEVEL,
    BaselineEntry,
    BaselineStore,
    EntryKey,
    summarize,
)
from pytest_llmperf.verdicts.crossover import (
    CrossoverEstimate,
    CrossoverRule,
    crossover_message,
    crossover_why,
    estimate_crossover,
    judge_sweep_metric,
)
from pytest_llmperf.verdicts.validity import ValidityPolicy
from pytest_llmperf.verdicts.verdict import Verdict


@dataclass
class SweepMetricCheck:
    """A whole-sweep number (a concurrency) held to its baseline: lower is a regression.

    Subclasses say what is measured (``compute``) and why it moved (``why``). The entry lives at
    concurrency ``SWEEP_LEVEL`` of the config's baseline file.
    """

    levels: Sequence[int]
    workload: Workload
    run: PerfRun
    store: BaselineStore
    update: bool = False
    rerecord: bool = False
    nodeid: str = ""
    record_command: str = ""  # the session's own command narrowed to this test, updating
    on_properties: Properties | None = None
    on_result: Callable[[SweepCheckResult], None] | None = None
    policy: ValidityPolicy | None = None
    value: int | None = None
    on_judgement: OnJudgement | None = None
    max_reruns: int = 2  # crossover: re-runs of tied levels; all: of machine-starved levels
    on_busy: OnBusy | None = None

    metric_name = "crossover_concurrency"

    @property
    def config(self) -> str:
        raise NotImplementedError

    @property
    def label(self) -> str:
        raise NotImplementedError

    @property
    def configs(self) -> tuple[str, ...]:
        return (self.config,)

    @property
    def reference(self) -> str | None:
        return None

    def compute(self, sweeps: dict[str, SweepResult]) -> int | None:
        raise NotImplementedError

    def why(self, value: int, base: int) -> str:
        raise NotImplementedError

    def measure(self) -> int:
        """Measure every level of every config involved; 0 when even the smallest C misses."""
        sweeps: dict[str, SweepResult] = {}
        for name in self.configs:
            for c in self.levels:
                self.run.ensure(name, self.workload, c, 1)
                settle(self.run, name, self.workload, c, 1, self.max_reruns, self.policy)
            sweeps[name] = self.run.sweep(name, self.workload)
        self.value = self.compute(sweeps) or 0
        return self.value

    @property
    def key(self) -> EntryKey:
        return EntryKey(
            self.run.hardware_for(self.config), self.config, self.workload.key(), SWEEP_LEVEL
        )

    def judge(self) -> Outcome:
        """Fail when the number fell below its baseline; warn (stale) when it rose."""
        value = self.measure()
        entry = self.store.get(self.key)
        _, base = judge_sweep_metric(value, entry, self.metric_name)
        return self._judge_value(value, entry, base)

    def _properties(self, value: int, base: int | None) -> None:
        if self.on_properties is not None:
            self.on_properties(
                [
                    (f"llmperf.{self.metric_name}", str(value)),
                    (f"llmperf.{self.metric_name}.baseline", str(base)),
                ]
            )

    def _judge_value(self, value: int, entry: BaselineEntry | None, base: int | None) -> Outcome:
        """Record under update, MISSING without a baseline, else below fails / above is stale."""
        self._properties(value, base)
        if self.update:
            changed = base != value or self.rerecord
            if changed:
                self._record(value, entry)
            self._report(value, base, Verdict.RECORDED if changed else Verdict.PASS)
            return Outcome()
        if base is None:
            self._report(value, base, Verdict.MISSING)
            record = self.record_command or f"pytest '{self.nodeid}' --llmperf-update"
            return Outcome.fail(
                f"{self.label}: {self.metric_name} C={value} has no baseline; record it: {record}"
            )
        if value < base:
            self._report(value, base, Verdict.FAIL)
            return Outcome.fail(self.why(value, base))
        self._report(value, base, Verdict.PASS)
        return self._stale(value, base)

    def _stale(self, value: int, base: int) -> Outcome:
        """A pass, with a stale warning when the number rose above its baseline."""
        if value <= base:
            return Outcome()
        msg = f"{self.label}: {self.metric_name} rose from C={base} to C={value}; the baseline"
        return Outcome(warnings=[("stale", f"{msg} is stale (re-record with --llmperf-update)")])

    def _record(self, value: int, old: BaselineEntry | None) -> None:
        summary = summarize(self.metric_name, [float(value)], reference=self.reference)
        entry = BaselineEntry(metrics={self.metric_name: summary})
        if old is not None:
            entry = old.model_copy(update={"metrics": {**old.metrics, self.metric_name: summary}})
        self.store.queue_update(self.key, entry, run_provenance(self.run, self.config))

    def _report(self, value: int, base: int | None, verdict: Verdict) -> None:
        if self.on_result is not None:
            self.on_result(SweepCheckResult(self.metric_name, self.label, value, base, verdict))


@dataclass
class CrossoverCheck(SweepMetricCheck):
    """The largest C where ``config`` still beats ``reference``, held to its baseline."""

    spec: CrossoverSpec | None = None
    estimate: CrossoverEstimate | None = None

    metric_name = "crossover_concurrency"

    @property
    def _spec(self) -> CrossoverSpec:
        assert self.spec is not None
        return self.spec

    @property
    def config(self) -> str:
        return self._spec.config

    @property
    def reference(self) -> str | None:
        return self._spec.reference

    @property
    def configs(self) -> tuple[str, ...]:
        return (self._spec.config, self._spec.reference)

    @property
    def label(self) -> str:
        return f"crossover {self._spec.label}"

    def compute(self, sweeps: dict[str, SweepResult]) -> int | None:
        spec = self._spec
        self.estimate = estimate_crossover(
            sweeps[spec.config],
            sweeps[spec.reference],
            spec.metric,
            policy=self.policy,
            noise=launch_noise(self.store, self.run, self.workload),
        )
        return self.estimate.value

    def _rule(self) -> CrossoverRule:
        spec = self._spec
        return CrossoverRule(spec.config, spec.reference, spec.metric, spec.name)

    def judge(self) -> Outcome:
        """Fail only when the crossover fell below its baseline beyond the noise; a level
        inside the noise margin is re-measured on fresh launches (``max_reruns``) and, if the
        interval still straddles the baseline, the verdict is inconclusive (a warning); an
        invalid level it needs is INVALID, never a pass or a fail."""
        value = self.measure()
        entry = self.store.get(self.key)
        _, base = judge_sweep_metric(value, entry, self.metric_name)
        if self.update or base is None:
            return self._judge_value(value, entry, base)
        est = self.estimate
        assert est is not None
        verdict = est.judge(base)
        for _ in range(self.max_reruns):
            if verdict != Verdict.INCONCLUSIVE or not est.ties:
                break
            try:
                for name in self.configs:
                    for c in est.ties:
                        n = len(self.run.samples(name, self.workload, c))
                        self.run.ensure(name, self.workload, c, n + 1, independent=True)
            except PointError:
                break
            value = self.measure()
            est = self.estimate
            assert est is not None
            verdict = est.judge(base)
        self._properties(value, base)
        levels = sorted(self.levels)
        sweeps = [self.run.sweep(n, self.workload) for n in self.configs]
        msg = crossover_message(self._rule(), est, base, verdict, levels, *sweeps)
        self._report(value, base, verdict)
        if verdict == Verdict.FAIL:
            return Outcome.fail(msg)
        if verdict == Verdict.INVALID:
            busy = self._busy_levels()
            if busy:
                return _busy(self.on_busy, busy)
            return Outcome.fail(f"INVALID measurement (not a performance verdict): {msg}")
        if verdict == Verdict.INCONCLUSIVE:
            return Outcome(warnings=[("inconclusive", msg)])
        return self._stale(est.low, base)

    def _busy_levels(self) -> list[BusyPoint]:
        """The levels with no valid sample, when each is so only because the machine was busy
        (empty when one is invalid for another reason: the crossover is then truly INVALID)."""
        out: list[BusyPoint] = []
        for name in self.configs:
            for c in self.levels:
                samples = self.run.samples(name, self.workload, c)
                if not samples or valid_samples(samples, self.workload, self.policy)[0]:
                    continue
                if not all_starved(samples, self.workload, self.policy):
                    return []
                out.append(busy_point(name, samples))
        return out  # low: risen beyond the noise

    def _report(self, value: int, base: int | None, verdict: Verdict) -> None:
        super()._report(value, base, verdict)
        spec = self._spec
        _judged(self, "crossover", spec.config, verdict, reference=spec.reference,
                metric=spec.metric, name=spec.name)  # fmt: skip

    def why(self, value: int, base: int) -> str:
        spec = self._spec
        return crossover_why(
            self._rule(),
            value,
            base,
            self.levels,
            self.run.sweep(spec.config, self.workload),
            self.run.sweep(spec.reference, self.workload),
        )


@dataclass
class SloCheck(SweepMetricCheck):
    """The largest swept C whose level meets the suite's SLO, held to its baseline."""

    config_name: str = ""
    slo: Slo | None = None

    metric_name = "max_concurrency_within_slo"

    @property
    def config(self) -> str:
        return self.config_name

    @property
    def label(self) -> str:
        return f"{self.config_name} within SLO"

    def compute(self, sweeps: dict[str, SweepResult]) -> int | None:
        assert self.slo is not None
        return max_concurrency_within_slo(sweeps[self.config_name], self.slo)

    def why(self, value: int, base: int) -> str:
        assert self.slo is not None
        msg = (
            f"{self.config_name}: the largest concurrency meeting the SLO ({self.slo.describe()}) "
            f"fell from C={base} to C={value}"
        )
        first_miss = min((c for c in self.levels if c > value), default=None)
        level = self.run.sweep(self.config_name, self.workload).level(first_miss or 0)
        if level is not None:
            _, reasons = level_meets(level, self.slo)
            msg += f"; at C={first_miss}: " + "; ".join(reasons)
            cap = level.server_max_running_requests
            if cap is not None and level.max_concurrency > cap:
                msg += (
                    f"; server capped running requests at {cap} (C={level.max_concurrency} queues)"
                )
        return msg
