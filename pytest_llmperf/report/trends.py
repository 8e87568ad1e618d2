"""This session's points against their history: the trend each report draws and the sentence
the drift rule says of this run.

The history read here is what earlier runs appended (this run is appended after the reports),
so each series ends with "this run", judged by ``verdicts/drift.py`` as ``llmperf history show``
and ``judge_against = history`` judge it: one rule, three places that show it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import SecretStr

from pytest_llmperf.base.metric_defs import METRICS
from pytest_llmperf.base.results import SweepResult
from pytest_llmperf.base.values import reveal
from pytest_llmperf.history.records import PointKey, run_points
from pytest_llmperf.history.store import HistoryStore
from pytest_llmperf.report.html_plots import TrendSeries
from pytest_llmperf.verdicts.drift import DriftRule, RunPoint, change_points, detect

__all__ = ["Trends", "history_trends"]

# Runs a trend shows: enough for a window of 10 and what came before it, short enough to read.
TREND_RUNS = 30


@dataclass(frozen=True)
class Trends:
    series: list[TrendSeries] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)  # "plain C=64: <the drift sentence>"


def history_trends(
    setting: SecretStr | str,
    base: Path,
    sweeps: Sequence[SweepResult],
    hardware_of: Callable[[str], str],
    invalid: Mapping[tuple[str, str], set[int]],
    *,
    window: int = 10,
    metric: str = "output_throughput",
) -> Trends:
    """Each valid point of ``sweeps`` (``invalid``: (config, workload) -> the C left out): its
    earlier runs at the same (config, workload, C,
    hardware) plus this run, with the change points the drift rule finds. Raises
    ``HistoryError`` when the database cannot be read."""
    out = Trends()
    spec = METRICS[metric]
    rule = DriftRule(window=window)
    value = reveal(setting) or "default"
    with HistoryStore.open(None if value == "default" else value, base=base) as store:
        for sweep in sweeps:
            skip = invalid.get((sweep.config, sweep.workload.key()), set())
            for level in sweep.levels:
                c = level.max_concurrency
                now = level.judged_value(metric)
                if now is None or c in skip:
                    continue
                key = PointKey(sweep.config, sweep.workload.key(), c, hardware_of(sweep.config))
                points = run_points(store.series(key, metric, limit=TREND_RUNS - 1))
                if not points:
                    continue  # nothing to draw a trend from
                points.append(RunPoint("this run", now))
                subject = f"{sweep.config} {metric} at C={c}"
                decisions = detect(points, spec.direction, rule, subject=subject, unit=spec.unit)
                out.series.append(
                    TrendSeries(
                        f"{sweep.config} C={c} ({sweep.workload.key()}): {metric}",
                        [p.label for p in points],
                        [p.value for p in points],
                        change_points(decisions),
                        unit=spec.unit,
                    )
                )
                out.lines.append(decisions[-1].sentence)
    return out
