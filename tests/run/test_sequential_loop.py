"""The sequential launch loop (``run/sequential.py``): one more launch of a config measures only
its undecided points, stops when all are decided, and never exceeds the budget.

The stand-in run records which levels each launch measured; the judge is scripted: a point is
decided once it has the samples its script says, and the loop must not look further.
"""

from __future__ import annotations

from typing import Any, cast

import pytest

from pytest_llmperf.base.results import LevelResult, Workload
from pytest_llmperf.run.perfrun import PerfRun
from pytest_llmperf.run.plan_time import planned_launches
from pytest_llmperf.run.sequential import settle_config
from pytest_llmperf.verdicts.compare import PointComparison
from pytest_llmperf.verdicts.verdict import Verdict

from ..verdicts import WORKLOAD, make_level

LEVELS = [1, 4, 16]


class LaunchLog:
    """What ``settle_config`` uses of a ``PerfRun``: every launch 60 s of measuring."""

    def __init__(self) -> None:
        self.launches: list[list[int]] = []
        self.got: dict[int, list[LevelResult]] = {c: [] for c in LEVELS}

    def samples(self, config: str, workload: Workload, c: int) -> list[LevelResult]:
        return list(self.got[c])

    def can_relaunch(self, config: str) -> bool:
        return True

    def measure(self, config: str, workload: Workload, c: int, fresh_launch: bool = False) -> None:
        if fresh_launch or not self.launches:
            self.launches.append([])
        self.launches[-1].append(c)
        lv = make_level(c, 100.0)
        lv.launch = f"L{len(self.launches)}"
        lv.duration = 60.0 / len(LEVELS)
        self.got[c].append(lv)

    def by_launch(self, config: str, workload: Workload) -> dict[str, dict[int, list[LevelResult]]]:
        out: dict[str, dict[int, list[LevelResult]]] = {}
        for c, lvs in self.got.items():
            for lv in lvs:
                out.setdefault(lv.launch or "", {}).setdefault(c, []).append(lv)
        return out


def _settle(log: LaunchLog, decided_after: dict[int, int], **kw: Any) -> dict[int, Verdict]:
    def judge(c: int) -> PointComparison:
        n = len(log.got[c])
        verdict = Verdict.PASS if n >= decided_after[c] else Verdict.INCONCLUSIVE
        return PointComparison("engine", c, WORKLOAD.key(), verdict)

    pcs = settle_config(cast(PerfRun, log), "engine", WORKLOAD, LEVELS, judge, **kw)
    return {c: pc.verdict for c, pc in pcs.items()}


def test_only_undecided_points_are_measured_again_until_decided():
    log = LaunchLog()
    got = _settle(log, {1: 1, 4: 2, 16: 3}, adjusting=False, launch_budget=6)
    assert got == dict.fromkeys(LEVELS, Verdict.PASS)
    # launch 1 the sweep; 2: C=4 and C=16 (C=1 decided); 3: C=16 only; then all decided
    assert log.launches == [[1, 4, 16], [4, 16], [16]]


def test_an_added_launch_measures_its_levels_in_interleaved_passes_when_adjusting():
    log = LaunchLog()
    got = _settle(log, {1: 1, 4: 1, 16: 4}, adjusting=True, launch_budget=6, passes=3)
    assert got == dict.fromkeys(LEVELS, Verdict.PASS)
    # the second launch: C=16 undecided, topped up to 3 levels, 3 passes (1, 4, 16, 1, ...)
    assert log.launches == [[1, 4, 16], [1, 4, 16] * 3]
    # not adjusting, a pass is a plain re-run on the same launch: one pass a launch
    log = LaunchLog()
    _settle(log, {1: 1, 4: 1, 16: 3}, adjusting=False, launch_budget=6, passes=3)
    assert log.launches == [[1, 4, 16], [16], [16]]


def test_the_budget_ends_the_loop_with_the_point_undecided():
    log = LaunchLog()
    got = _settle(log, {1: 1, 4: 1, 16: 99}, adjusting=False, launch_budget=4)
    assert got[16] == Verdict.INCONCLUSIVE and len(log.launches) == 4
    assert log.launches[1:] == [[16], [16], [16]]


@pytest.mark.parametrize(("minutes", "launches"), [(1.0, 1), (2.0, 3), (10.0, 5)])
def test_a_time_budget_allows_as_many_launches_as_fit(minutes, launches):
    """The first launch measures the sweep (60 s), each relaunch only C=16 (20 s): a minute
    holds the first, two minutes three (100 s, a fourth would pass 120 s on the running
    average), ten minutes the 5 of the launch budget."""
    log = LaunchLog()
    _settle(log, {1: 1, 4: 1, 16: 99}, adjusting=False, launch_budget=5, time_budget_min=minutes)
    assert len(log.launches) == launches


def test_planned_launches():
    assert planned_launches(6) == 6
    assert planned_launches(6, 2.0, 60.0) == 2
    assert planned_launches(6, 0.5, 60.0) == 1  # never fewer than one
    assert planned_launches(6, 60.0, 60.0) == 6


def test_adjusting_a_launch_measures_enough_levels_to_remove_its_speed():
    log = LaunchLog()
    _settle(log, {1: 1, 4: 1, 16: 3}, adjusting=True, launch_budget=6)
    assert log.launches == [[1, 4, 16]] * 3
