"""What a perf test holds: a measured point, a gate, a crossover, each with an assert method.

These objects turn verdicts from ``compare``/``gates`` into pytest outcomes (fail, skip,
warning) with messages a reviewer can paste into a PR. ``__tracebackhide__`` keeps the
traceback at the user's test line, not inside the plugin.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, NoReturn

import pytest

from pytest_llmperf.base.metric_defs import METRICS
from pytest_llmperf.base.results import LevelResult, SweepResult, Workload
from pytest_llmperf.core.slo import Slo, level_meets, max_concurrency_within_slo
from pytest_llmperf.report.tables import junit_properties, redact, redact_args
from pytest_llmperf.run.perfrun import PerfRun, PointError
from pytest_llmperf.run.suite import CrossoverSpec
from pytest_llmperf.verdicts.baseline import (
    SWEEP_LEVEL,
    BaselineEntry,
    BaselineFileError,
    BaselineStore,
    EntryKey,
    Provenance,
    entry_from_levels,
    summarize,
)
from pytest_llmperf.verdicts.compare import PointComparison, Verdict, compare_point
from pytest_llmperf.verdicts.gates import Gate, GateResult, crossover_concurrency, evaluate_gate
from pytest_llmperf.verdicts.validity import ValidityPolicy  # client

# Recorded in every new baseline entry (those measured: goodput only with an SLO); only
# ``metrics`` (or compare's defaults) are gated.
RECORDED_METRICS: tuple[str, ...] = tuple(
    m for m in METRICS if m not in ("crossover_concurrency", "max_concurrency_within_slo")
)


@cache
def git_commit() -> str | None:
    """The checkout's commit, for baseline provenance (None outside git)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _provenance(run: PerfRun, config: str) -> Provenance:
    facts = run.facts(config)
    if facts is None:
        return Provenance(git_commit=git_commit())
    return Provenance(
        sglang_version=facts.version,
        server_args=redact_args(dict(facts.server_args)),
        model_path=facts.model_path,
        sim_profile=facts.sim_profile,
        gpu=None if facts.mode == "simulated" else run.hardware_for(config),
        git_commit=git_commit(),
    )


def _fail(message: str) -> NoReturn:
    __tracebackhide__ = True
    pytest.fail(redact(message), pytrace=False)


def _ensure(
    run: PerfRun, config: str, workload: Workload, concurrency: int
) -> tuple[list[LevelResult], str | None]:
    """One sample of a point, or the reason it could not be measured."""
    try:
        return run.ensure(config, workload, concurrency, 1), None
    except PointError as exc:
        return [], str(exc)


@dataclass
class Point:
    """One (config, concurrency) point: its samples and the baseline assertion."""

    config: str
    concurrency: int
    workload: Workload
    run: PerfRun
    store: BaselineStore
    repeat: int = 1
    max_reruns: int = 2
    metrics: Sequence[str] | None = None
    tolerances: dict[str, float] = field(default_factory=dict)
    update: bool = False
    invalid_policy: str = "fail"
    policy: ValidityPolicy | None = None  # client: validity thresholds from the settings
    node: Any = None
    on_compared: Callable[[PointComparison], None] | None = None
    on_invalid: Callable[[str], None] | None = None
    samples: list[LevelResult] = field(default_factory=list)
    comparison: PointComparison | None = None

    def measure(self) -> None:
        """Measure (or reuse) ``repeat`` samples of this point."""
        __tracebackhide__ = True
        error = None
        try:
            self.samples = self.run.ensure(
                self.config, self.workload, self.concurrency, self.repeat
            )
        except PointError as exc:
            error = str(exc)
        if error is not None:
            _fail(error)  # outside the except block: no chained traceback in the report

    @property
    def result(self) -> LevelResult:
        """The first sample: the numbers the summary table shows."""
        return self.samples[0]

    @property
    def key(self) -> EntryKey:
        return EntryKey(
            self.run.hardware_for(self.config), self.config, self.workload.key(), self.concurrency
        )

    def compare(self) -> PointComparison:
        """Compare with the baseline, re-measuring an inconclusive point up to ``max_reruns``."""
        entry = self.store.get(self.key)
        tol = self.tolerances or None
        pc = compare_point(
            self.config,
            self.samples,
            entry,
            workload=self.workload,
            metrics=self.metrics,
            tolerances=tol,
            policy=self.policy,  # client: validity thresholds from the settings
        )
        for _ in range(self.max_reruns):
            if pc.verdict != Verdict.INCONCLUSIVE or self.update:
                break
            try:
                self.run.measure(self.config, self.workload, self.concurrency)
            except PointError:
                break
            self.samples = self.run.samples(self.config, self.workload, self.concurrency)
            pc = compare_point(
                self.config,
                self.samples,
                entry,
                workload=self.workload,
                metrics=self.metrics,
                tolerances=tol,
                policy=self.policy,  # client
            )
        self.comparison = pc
        return pc

    def assert_baseline(self) -> None:
        """Fail when a gated metric regressed beyond tolerance and beyond noise.

        Missing baseline: fail with the command that records it. ``--llmperf-update``: record
        new or changed entries and pass. Invalid measurement: skip (or fail, by setting).
        """
        __tracebackhide__ = True
        error = None
        try:
            pc = self.compare()
        except BaselineFileError as exc:
            error = str(exc)
        if error is not None:
            _fail(error)
        if self.node is not None:
            self.node.user_properties.extend(junit_properties(point=pc))
        if self.on_compared is not None:
            self.on_compared(pc)
        if pc.verdict == Verdict.INVALID:
            message = pc.message()
            if self.on_invalid is not None:
                self.on_invalid(message)
            if self.update or self.invalid_policy == "fail":
                _fail(f"INVALID measurement (not a performance verdict, not recorded): {message}")
            pytest.skip(f"llmperf INVALID measurement: {redact(message)}")
        if self.update:
            if pc.verdict != Verdict.PASS or pc.stale:
                self._record()
                pc.verdict, pc.messages = Verdict.RECORDED, []
            return
        if pc.verdict == Verdict.MISSING:
            nodeid = self.node.nodeid if self.node is not None else ""
            _fail(f"{pc.message()}\n  record it: pytest '{nodeid}' --llmperf-update")
        if pc.verdict == Verdict.FAIL:
            _fail(pc.message())
        from pytest_llmperf.plugin import warn_inconclusive, warn_stale

        if pc.verdict == Verdict.INCONCLUSIVE:
            warn_inconclusive(pc.message())
        for m in pc.stale:
            warn_stale(m.message)

    def _record(self) -> None:
        facts = self.run.facts(self.config)
        entry = entry_from_levels(
            self.samples,
            RECORDED_METRICS,
            sglang_version=facts.version if facts else None,
            git_commit=git_commit(),
        )
        old = self.store.get(self.key)
        if old is not None and old.tolerance is not None:
            entry = entry.model_copy(update={"tolerance": old.tolerance})  # hand-set, keep it
        self.store.queue_update(self.key, entry, _provenance(self.run, self.config))


@dataclass
class GateCheck:
    """One cross-config gate at one concurrency."""

    gate: Gate
    concurrency: int
    workload: Workload
    run: PerfRun
    node: Any = None
    on_result: Callable[[GateResult], None] | None = None
    result: GateResult | None = None
    invalid_policy: str = "fail"

    def evaluate(self) -> GateResult:
        __tracebackhide__ = True
        sweeps: dict[str, SweepResult] = {}
        for name in (self.gate.config, self.gate.reference):
            samples, error = _ensure(self.run, name, self.workload, self.concurrency)
            if error is not None:
                _fail(error)
            sweep = self.run.sweep(name, self.workload)
            sweeps[name] = sweep.model_copy(update={"levels": [samples[0]]})
        self.result = evaluate_gate(self.gate, sweeps)
        return self.result

    def check(self) -> None:
        """Fail with a sentence saying where, by how much and why the gate is not met."""
        __tracebackhide__ = True
        res = self.evaluate()
        if self.node is not None:
            self.node.user_properties.extend(junit_properties(gate=res))
        if self.on_result is not None:
            self.on_result(res)
        if res.verdict == Verdict.INVALID:
            if self.invalid_policy == "fail":
                _fail(res.message())
            pytest.skip(f"llmperf INVALID measurement: {redact(res.message())}")
        if res.verdict != Verdict.PASS:
            _fail(res.message())


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
    node: Any = None
    on_result: Callable[[tuple[str, int | None, int | None, str]], None] | None = None
    value: int | None = None

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
        __tracebackhide__ = True
        sweeps: dict[str, SweepResult] = {}
        for name in self.configs:
            for c in self.levels:
                _, error = _ensure(self.run, name, self.workload, c)
                if error is not None:
                    _fail(error)
            sweeps[name] = self.run.sweep(name, self.workload)
        self.value = self.compute(sweeps) or 0
        return self.value

    @property
    def key(self) -> EntryKey:
        return EntryKey(
            self.run.hardware_for(self.config), self.config, self.workload.key(), SWEEP_LEVEL
        )

    def assert_baseline(self) -> None:
        """Fail when the number fell below its baseline; warn (stale) when it rose."""
        __tracebackhide__ = True
        value = self.measure()
        error, entry = None, None
        try:
            entry = self.store.get(self.key)
        except BaselineFileError as exc:
            error = str(exc)
        if error is not None:
            _fail(error)
        summary = entry.metrics.get(self.metric_name) if entry else None
        base = None if summary is None else int(summary.mean)
        if self.node is not None:
            self.node.user_properties.extend(
                [
                    (f"llmperf.{self.metric_name}", str(value)),
                    (f"llmperf.{self.metric_name}.baseline", str(base)),
                ]
            )
        if self.update:
            if base != value:
                self._record(value, entry)
            self._report(value, base, "recorded" if base != value else "pass")
            return
        if base is None:
            self._report(value, base, "missing")
            nodeid = self.node.nodeid if self.node is not None else ""
            _fail(
                f"{self.label}: {self.metric_name} C={value} has no baseline; record it: "
                f"pytest '{nodeid}' --llmperf-update"
            )
        if value < base:
            self._report(value, base, "fail")
            _fail(self.why(value, base))
        if value > base:
            from pytest_llmperf.plugin import warn_stale

            warn_stale(
                f"{self.label}: {self.metric_name} rose from C={base} to C={value}; the baseline "
                "is stale (re-record with --llmperf-update)"
            )
        self._report(value, base, "pass")

    def _record(self, value: int, old: BaselineEntry | None) -> None:
        summary = summarize(self.metric_name, [float(value)], reference=self.reference)
        entry = BaselineEntry(metrics={self.metric_name: summary})
        if old is not None:
            entry = old.model_copy(update={"metrics": {**old.metrics, self.metric_name: summary}})
        self.store.queue_update(self.key, entry, _provenance(self.run, self.config))

    def _report(self, value: int, base: int | None, verdict: str) -> None:
        if self.on_result is not None:
            self.on_result((self.label, value, base, verdict))


@dataclass
class CrossoverCheck(SweepMetricCheck):
    """The largest C where ``config`` still beats ``reference``, held to its baseline."""

    spec: CrossoverSpec | None = None

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
        return crossover_concurrency(
            sweeps[self._spec.config], sweeps[self._spec.reference], self._spec.metric
        )

    def why(self, value: int, base: int) -> str:
        cfg, ref, metric = self._spec.config, self._spec.reference, self._spec.metric
        first_loss = min((c for c in self.levels if c > value), default=None)
        msg = (
            f"{self._spec.label}: crossover concurrency fell from C={base} to C={value}: "
            f"{cfg} no longer beats {ref} on {metric}"
        )
        if first_loss is not None:
            a = self.run.sweep(cfg, self.workload).level(first_loss)
            b = self.run.sweep(ref, self.workload).level(first_loss)
            if a is not None and b is not None:
                va, vb = a.metric_value(metric), b.metric_value(metric)
                if va is not None and vb:
                    msg += (
                        f" at C={first_loss} ({va:.1f} vs {vb:.1f}, {100 * (va - vb) / vb:+.1f} %)"
                    )
                cap = a.server_max_running_requests
                if cap is not None and first_loss > cap:
                    msg += (
                        f"; {cfg}'s server caps running requests at {cap} (C={first_loss} queues)"
                    )
        return msg


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
