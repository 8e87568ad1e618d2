"""The crossover concurrency of a pair of sweeps, held to its baseline like any metric.

One verdict for the pytest check (``plugin/checks.py``'s ``CrossoverCheck``) and for
``llmperf compare``: the number fell below its baseline → FAIL, no baseline → MISSING, it rose
→ PASS but stale. The entry lives at concurrency ``SWEEP_LEVEL`` of the config's baseline file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pytest_llmperf.base.metric_defs import metric as metric_def
from pytest_llmperf.base.results import SweepResult
from pytest_llmperf.verdicts.baseline import BaselineStore
from pytest_llmperf.verdicts.baseline_file import SWEEP_LEVEL, BaselineEntry, EntryKey
from pytest_llmperf.verdicts.compare import Verdict
from pytest_llmperf.verdicts.gates import crossover_concurrency

__all__ = [
    "CrossoverRule",
    "SweepMetricResult",
    "compare_crossover",
    "crossover_why",
    "judge_sweep_metric",
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
        return f"{self.label}: C={self.value} (baseline {self.baseline}) {self.verdict.value}"


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
) -> list[SweepMetricResult]:
    """Judge ``rule`` once per workload measured for both of its configs in ``sweeps``.

    A pair that was not measured at all is INVALID: the run cannot say where the crossover is.
    """
    label = f"crossover {rule.label}"
    out: list[SweepMetricResult] = []
    for sweep in sweeps:
        if sweep.config != rule.config:
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
        value = crossover_concurrency(sweep, ref, rule.metric) or 0
        key = EntryKey(hardware, rule.config, sweep.workload.key(), SWEEP_LEVEL)
        verdict, base = judge_sweep_metric(value, store.get(key))
        if verdict == Verdict.MISSING:
            message = (
                f"{label}: {CROSSOVER_METRIC} C={value} has no baseline; record it with "
                "pytest --llmperf-update"
            )
        elif verdict == Verdict.FAIL:
            assert base is not None
            levels = sorted(lv.max_concurrency for lv in sweep.levels)
            message = crossover_why(rule, value, base, levels, sweep, ref)
        else:
            message = ""
        stale = base is not None and value > base
        out.append(SweepMetricResult(label, value, base, verdict, message, stale))
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
