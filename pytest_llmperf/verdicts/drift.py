"""Drift: judging each run of a metric's history against the runs before it.

A baseline file catches a step between the recorded run and now; it misses a regression that
creeps in 2 % a week, because every run is re-recorded or compared against a baseline that is
itself already slower. This rule judges each run against a *window* of the runs before it, as
pytorch's HUD, Bencher and Conbench do:

* **window** the last ``window`` (10) earlier runs *not judged bad*. Bad runs stay out of later
  windows, so a slow drift cannot drag the mean and widen the spread along with it until it
  hides itself; to judge runs after a deliberate change against the runs since it, cut the
  series there (``llmperf history show --since RUN``).
* **insufficient data** fewer than ``min_runs`` (5) runs in the window: ``inconclusive``.
* **threshold** from the window's spread: the one-sided Student-t prediction band that one more
  run of the window's distribution stays inside with probability about ``1 - alpha`` (0.999),
  ``t(1 - alpha, n - 2) · s · sqrt(1 + 1/n)`` relative to the window's mean (4.7 s for a full
  window of 10, 11.2 s for 5 runs), never below ``floor`` (2 %): a window that happens to be
  flat must not flag a 0.1 % wobble. ``s``, one run's spread, comes from the differences of
  successive runs (``band``), which a drift inside the window does not widen.
* **bad** the run's deficit to the window's mean (oriented by the metric's direction, positive
  is worse; ``stats.deficit``) is above the threshold. Improvements are never bad.
* **regression** ``consecutive`` (2) bad runs in a row: ``fail``. A lone bad run is
  ``inconclusive`` (possibly noise: the next run settles it); anything else ``pass``.

The **change point** of a regression is the first bad run of its streak; ``git bisect``'s
range is the last good run's commit to the change point's.

Expected behaviour: a drift of ``r`` per run is bad from the first run whose deficit to the
window's mean (which follows the drift's earlier, still good runs a little) exceeds the
threshold, and declared ``consecutive - 1`` runs later (``predicted_detection``); noise moves
the crossing by a run or two. With no change (Gaussian noise, any σ) a run is bad with
probability about 0.1-0.2 % (``alpha``; the floor makes it smaller) and a regression, two bad
runs in a row, is declared at about 1e-4 per run: about 0.3 % over a 30-run history
(tests/verdicts/test_drift.py measures both on flat series).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache

from scipy.stats import t as _t

from pytest_llmperf.base.errors import InputError
from pytest_llmperf.base.metric_defs import Direction
from pytest_llmperf.verdicts.compare import fmt_num
from pytest_llmperf.verdicts.stats import deficit
from pytest_llmperf.verdicts.verdict import Verdict

__all__ = [
    "BisectRange",
    "band",
    "DriftDecision",
    "DriftRule",
    "RunPoint",
    "bisect_range",
    "change_points",
    "detect",
    "judge_latest",
    "predicted_detection",
]


def band(rule: DriftRule, values: Sequence[float]) -> float:
    """The relative distance below (or above) the window's mean that one more run of the same
    distribution passes with probability about ``1 - alpha``: the one-sided Student-t
    prediction interval ``t(1 - alpha, n - 2) · s · sqrt(1 + 1/n)``, relative to the mean,
    where ``s`` is the spread of one run estimated from the differences of successive runs
    (``stdev(diff) / sqrt(2)``, in run order). A slow drift inside the window shifts every
    difference alike and so leaves ``s`` alone, where the plain stdev of the values would grow
    with it and widen the band as fast as the drift moves: a 2 %-a-run drift would then never
    leave it."""
    n = len(values)
    mean = statistics.fmean(values)
    diffs = [b - a for a, b in zip(values, values[1:], strict=False)]
    s = statistics.stdev(diffs) / math.sqrt(2) / abs(mean)
    return _critical(rule.alpha, n - 2) * s * math.sqrt(1 + 1 / n)


@lru_cache(maxsize=256)
def _critical(alpha: float, dof: int) -> float:
    return float(_t.ppf(1 - alpha, dof))


@dataclass(frozen=True)
class DriftRule:
    window: int = 10
    min_runs: int = 5
    consecutive: int = 2
    alpha: float = 0.001
    floor: float = 0.02

    def __post_init__(self) -> None:
        if self.window < 3:
            raise InputError(f"history window must be at least 3 runs, got {self.window}")
        if not 3 <= self.min_runs <= self.window:
            raise InputError(
                f"history min_runs must be between 3 and the window ({self.window}), "
                f"got {self.min_runs}"
            )
        if self.consecutive < 1:
            raise InputError(f"history consecutive must be at least 1, got {self.consecutive}")
        if not (0 < self.alpha < 0.5 and 0 <= self.floor < 1):
            raise InputError(
                f"history alpha must be in (0, 0.5) and floor in [0, 1), "
                f"got {self.alpha}, {self.floor}"
            )


@dataclass(frozen=True)
class RunPoint:
    """One run's value of the metric, with what names it (run id, commit)."""

    label: str  # how the sentence names the run, e.g. "run #17"
    value: float
    commit: str | None = None
    samples: tuple[float, ...] = ()


@dataclass(frozen=True)
class DriftDecision:
    index: int
    point: RunPoint
    verdict: Verdict
    bad: bool
    sentence: str
    mean: float | None = None
    deficit: float | None = None  # relative to the mean, positive is worse
    threshold: float | None = None
    spread_threshold: float | None = None  # the window's prediction band before the floor
    window_runs: int = 0
    streak: int = 0  # bad runs in a row ending here
    change_point: int | None = None  # index of the streak's first run, once declared
    window_labels: tuple[str, ...] = field(default=(), repr=False)


def _ordinal(n: int) -> str:
    words = {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth"}
    return words.get(n, f"{n}th")


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _commit(point: RunPoint) -> str:
    return f" (commit {point.commit[:12]})" if point.commit else ""


def _judge(
    index: int,
    points: Sequence[RunPoint],
    window: list[int],
    streak_before: int,
    direction: Direction,
    rule: DriftRule,
    subject: str,
    unit: str,
) -> DriftDecision:
    point = points[index]
    head = f"{subject}: {fmt_num(point.value)}{' ' + unit if unit else ''}"
    labels = tuple(points[i].label for i in window)
    if len(window) < rule.min_runs:
        return DriftDecision(
            index,
            point,
            Verdict.INCONCLUSIVE,
            False,
            f"{head}; insufficient data: {len(window)} earlier good run"
            f"{'' if len(window) == 1 else 's'} in the window, {rule.min_runs} needed → "
            "inconclusive",
            window_runs=len(window),
            window_labels=labels,
        )
    values = [points[i].value for i in window]
    mean = statistics.fmean(values)
    if mean == 0:
        return DriftDecision(
            index,
            point,
            Verdict.INCONCLUSIVE,
            False,
            f"{head}; the window's mean is 0, nothing to measure a change against → inconclusive",
            window_runs=len(window),
            window_labels=labels,
        )
    spread = band(rule, values)
    threshold = max(spread, rule.floor)
    d = deficit(point.value, mean, direction)
    bad = d > threshold
    side = "below" if point.value < mean else "above"
    why = (
        f"threshold {_pct(threshold)} from their spread"
        if spread >= rule.floor
        else f"threshold {_pct(threshold)}, the floor; their spread gives {_pct(spread)}"
    )
    body = (
        f"{head} is {_pct(abs(point.value - mean) / abs(mean))} {side} the mean of the "
        f"last {len(window)} runs ({why})"
    )
    streak = streak_before + 1 if bad else 0
    judged = DriftDecision(
        index,
        point,
        Verdict.PASS,
        bad,
        f"{body} → pass",
        mean=mean,
        deficit=d,
        threshold=threshold,
        spread_threshold=spread,
        window_runs=len(window),
        streak=streak,
        window_labels=labels,
    )
    if not bad:
        return judged
    if streak < rule.consecutive:
        left = rule.consecutive - streak
        return replace(
            judged,
            verdict=Verdict.INCONCLUSIVE,
            sentence=f"{body}; {_ordinal(streak)} bad run in a row, {left} more declare"
            f"{'s' if left == 1 else ''} a regression → inconclusive",
        )
    first = index - streak + 1
    return replace(
        judged,
        verdict=Verdict.FAIL,
        sentence=f"{body}; {_ordinal(streak)} bad run in a row → regression since "
        f"{points[first].label}{_commit(points[first])}",
        change_point=first,
    )


def detect(
    points: Sequence[RunPoint],
    direction: Direction,
    rule: DriftRule | None = None,
    *,
    subject: str = "",
    unit: str = "",
) -> list[DriftDecision]:
    """Each run of ``points`` (oldest first) judged against the window of good runs before it."""
    rule = rule or DriftRule()
    decisions: list[DriftDecision] = []
    good: list[int] = []
    streak = 0
    for i in range(len(points)):
        d = _judge(i, points, good[-rule.window :], streak, direction, rule, subject, unit)
        decisions.append(d)
        streak = d.streak
        if not d.bad:
            good.append(i)
    return decisions


def judge_latest(
    history: Sequence[RunPoint],
    current: RunPoint,
    direction: Direction,
    rule: DriftRule | None = None,
    *,
    subject: str = "",
    unit: str = "",
) -> DriftDecision:
    """The current run judged against its history (oldest first), as ``detect`` judges it."""
    return detect([*history, current], direction, rule, subject=subject, unit=unit)[-1]


def change_points(decisions: Sequence[DriftDecision]) -> list[int]:
    """The first bad run of each declared regression, in order."""
    seen: list[int] = []
    for d in decisions:
        if d.change_point is not None and d.change_point not in seen:
            seen.append(d.change_point)
    return seen


@dataclass(frozen=True)
class BisectRange:
    """``git bisect start <bad> <good>``: the regression entered after ``good``, by ``bad``."""

    good: RunPoint | None  # the last run before the change point judged not bad
    bad: RunPoint  # the change point: the streak's first bad run
    between: tuple[RunPoint, ...]  # runs after ``good`` up to and including ``bad``

    def command(self) -> str | None:
        if self.good is None or not self.good.commit or not self.bad.commit:
            return None
        return f"git bisect start {self.bad.commit} {self.good.commit}"


def bisect_range(
    points: Sequence[RunPoint], decisions: Sequence[DriftDecision]
) -> BisectRange | None:
    """The range to bisect for the latest declared regression, or None when there is none."""
    cps = change_points(decisions)
    if not cps:
        return None
    cp = cps[-1]
    good = next((i for i in range(cp - 1, -1, -1) if not decisions[i].bad), None)
    start = 0 if good is None else good + 1
    return BisectRange(
        None if good is None else points[good], points[cp], tuple(points[start : cp + 1])
    )


def predicted_detection(
    start: int, drift_per_run: float, threshold: float, consecutive: int = 2, window: int = 10
) -> int:
    """The run at which a drift of ``drift_per_run`` (relative, > 0) from run ``start`` (its
    first drifted run) is declared, noise aside. The j-th drifted run is ``r·j`` below the
    undrifted level, and the window's mean has followed the drifted runs before it that were
    not bad: ``d_j = r·j - r·j(j-1)/(2·window)`` while they fit in the window. The first ``j``
    with ``d_j > threshold`` is the first bad run; from it on the window keeps its runs (bad
    runs stay out), and the regression is declared ``consecutive - 1`` runs later."""
    if drift_per_run <= 0:
        raise ValueError("drift_per_run must be > 0")
    r = drift_per_run
    for j in range(1, window + 1):
        if r * j - r * j * (j - 1) / (2 * window) > threshold:
            return start + j - 1 + consecutive - 1
    raise ValueError(
        f"a drift of {100 * r:g} % a run never leaves a {100 * threshold:g} % threshold "
        f"while the {window}-run window follows it"
    )
