"""Judging a point against its history (``judge_against = history``) instead of a baseline.

The same point (config, workload, C, hardware key) in the earlier runs of the history database
is the reference: the drift rule (``verdicts/drift.py``) judges this run's value of each metric
against the window of good runs before it. The result is the ``PointComparison`` a baseline
comparison gives, with the same validity rules (``check_level`` per sample; no valid sample is
``invalid``, whatever the history says) and the same verdict words: ``fail`` for a regression
(the second bad run in a row), ``inconclusive`` for a first bad run or insufficient data,
``pass`` otherwise. The run itself is appended after the session (``history`` setting), so the
history read here never holds it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import SecretStr

from pytest_llmperf.base.errors import InputError
from pytest_llmperf.base.metric_defs import METRICS, metric
from pytest_llmperf.base.results import LevelResult, Workload
from pytest_llmperf.base.values import reveal
from pytest_llmperf.history.records import PointKey, run_points
from pytest_llmperf.history.store import HistoryStore
from pytest_llmperf.verdicts.compare import DEFAULT_METRICS, MetricComparison, PointComparison
from pytest_llmperf.verdicts.drift import DriftDecision, DriftRule, RunPoint, judge_latest
from pytest_llmperf.verdicts.stats import Decision
from pytest_llmperf.verdicts.validity import ValidityPolicy, check_level
from pytest_llmperf.verdicts.verdict import Verdict, worst

__all__ = ["HistoryJudge", "history_judge"]

# Enough earlier runs that the window still fills when some of them were bad (bad runs stay out
# of it) and that the streak before this run is known; older runs cannot change this verdict.
_LOOKBACK = 5


def history_judge(
    judge_against: str, history: SecretStr | str | None, window: int, base: Path
) -> HistoryJudge | None:
    """The judge a point uses under ``judge_against = history``; None for the baseline."""
    if judge_against != "history":
        return None
    if history is None:
        raise InputError(
            "judge_against = history reads the history database the history setting names, "
            "and history is off: set it too (e.g. --llmperf-history default)"
        )
    min_runs = DriftRule().min_runs
    if window < min_runs:
        raise InputError(
            f"history_window = {window}: the window must hold at least {min_runs} runs, "
            "the fewest the drift rule judges on"
        )
    return HistoryJudge(history, base, DriftRule(window=window))


@dataclass(frozen=True)
class HistoryJudge:
    setting: SecretStr | str  # the ``history`` setting: "default", a path or a URL
    base: Path  # what "default" and a relative path are under (the rootdir)
    rule: DriftRule

    def compare(
        self,
        config: str,
        samples: Sequence[LevelResult],
        *,
        workload: Workload,
        hardware_key: str,
        metrics: Sequence[str] | None = None,
        policy: ValidityPolicy | None = None,
        attached: bool = False,
    ) -> PointComparison:
        """Validity as ``compare_point`` has it, then each metric's drift decision."""
        c = samples[0].max_concurrency
        point = PointComparison(
            config, c, workload.key(), Verdict.PASS, attached=attached, reference="history"
        )
        valid: list[LevelResult] = []
        for lv in samples:
            reasons = check_level(lv, workload, policy)
            point.invalid_reasons.extend(r for r in reasons if r not in point.invalid_reasons)
            if not reasons:
                valid.append(lv)
        if not valid:
            point.verdict = Verdict.INVALID
            point.messages.append(
                f"{config} at C={c}: invalid measurement: " + "; ".join(point.invalid_reasons)
            )
            return point
        key = PointKey(config, workload.key(), c, hardware_key)
        value = reveal(self.setting) or "default"
        limit = self.rule.window * _LOOKBACK
        names = list(metrics) if metrics is not None else list(DEFAULT_METRICS)
        with HistoryStore.open(None if value == "default" else value, base=self.base) as store:
            for name in names:
                if name not in METRICS:
                    metric(name)  # raises with the list of known names
                values = [v for lv in valid if (v := lv.judged_value(name)) is not None]
                if not values:
                    continue
                series = run_points(store.series(key, name, limit=limit))
                current = RunPoint("this run", statistics.median(values))
                d = judge_latest(
                    series,
                    current,
                    METRICS[name].direction,
                    self.rule,
                    subject=f"{config} {name} at C={c}",
                    unit=METRICS[name].unit,
                )
                mc = _comparison(name, d, len(values))
                point.metrics.append(mc)
                if mc.verdict != Verdict.PASS:
                    point.messages.append(mc.message)
        point.verdict = worst(m.verdict for m in point.metrics)
        return point


def _comparison(name: str, d: DriftDecision, n: int) -> MetricComparison:
    nan = math.nan
    decision = Decision(
        d.verdict,
        False,
        nan if d.deficit is None else d.deficit,
        nan if d.threshold is None else d.threshold,
        nan if d.spread_threshold is None else d.spread_threshold,
        0.0,
        "margin",
        n,
        d.window_runs,
    )
    mean = nan if d.mean is None else d.mean
    return MetricComparison(
        name, METRICS[name].unit, d.point.value, n, mean, decision, d.verdict, d.sentence
    )
