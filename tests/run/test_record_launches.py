"""A recording adds launches while a later run's last look would leave a point between the
tolerance and twice it undecided (``run/record_launches.py``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy import stats as scipy_stats

from pytest_llmperf.base.metric_defs import metric
from pytest_llmperf.run.record_launches import GAIN, record_launches, recorded_noise
from pytest_llmperf.verdicts.launch_adjust import last_look_gap, next_launch_gain
from pytest_llmperf.verdicts.sequential import (
    BACKSTOP_SHARE,
    DEFAULT_ALPHA,
    DETECT,
    PASS_BETA,
    Look,
)
from pytest_llmperf.verdicts.stats import LaunchNoise, decide
from pytest_llmperf.verdicts.verdict import Verdict

from ..verdicts import WORKLOAD, make_level
from .test_passes import TimedRun

LEVELS = [1, 4, 16]


class DrawnRun(TimedRun):
    """Launches whose levels each draw their own speed (a launch's effect on a level, ``sd_l``)
    and passes that scatter about it (``sd_w``), seeded; a launch starts in 300 s."""

    def __init__(self, sd_l: float, sd_w: float, *, relaunch: bool = True, seed: int = 0):
        super().__init__(300.0, 5.0)
        self.rng = np.random.default_rng(seed)
        self.sd_l, self.sd_w, self.relaunch = sd_l, sd_w, relaunch
        self.effect: dict[tuple[int, int], float] = {}

    def can_relaunch(self, config: str) -> bool:
        return self.relaunch

    def measure(self, config: str, workload: Any, concurrency: int, **kw: Any) -> Any:
        level = super().measure(config, workload, concurrency, **kw)
        key = (self.launches, concurrency)
        if key not in self.effect:
            self.effect[key] = float(self.rng.normal(0.0, self.sd_l))
        tput = 1000.0 * math.exp(self.effect[key] + self.rng.normal(0.0, self.sd_w))
        drawn = make_level(concurrency, tput)
        level.duration, level.output_throughput = drawn.duration, drawn.output_throughput
        return level


def _record(run: DrawnRun, passes: int = 1, **kw: Any) -> Any:
    kw = {"tolerance": 0.05, "launch_budget": 6, **kw}
    return record_launches(run, "plain", WORKLOAD, LEVELS, 3, passes, None, **kw)


def _note(by: Any) -> str:
    return next(n for n in by["L1"][1][0].notes if n.startswith("recording:"))


def test_a_launch_effect_adds_launches_while_each_narrows_the_gap_and_says_why() -> None:
    # passes of 0.5 % about launches that move a level by 4 %: no budget of 12 closes the gap
    run = DrawnRun(sd_l=0.04, sd_w=0.005)
    by = _record(run, launch_budget=12)
    assert len(by) == 7
    noise, valid = recorded_noise(by, LEVELS)
    assert valid == 7 and noise is not None
    assert last_look_gap(noise, 7, 12) > 0.05 and next_launch_gain(noise, 7, 12) < GAIN
    note = _note(by)
    assert "4 launches added (7 valid in all)" in note, note
    assert "last look (launch 12)" in note and "wider than the 5 % from the tolerance" in note
    assert "(stopped: a launch more would narrow it by under 5 %)" in note, note


def test_quiet_launches_stop_at_baseline_repeat() -> None:
    run = DrawnRun(sd_l=0.0, sd_w=0.002)
    by = _record(run)
    assert len(by) == 3
    noise, valid = recorded_noise(by, LEVELS)
    assert noise is not None and last_look_gap(noise, valid, 6) <= 0.05
    assert not any(n.startswith("recording:") for n in by["L1"][1][0].notes)


def test_launches_stop_once_the_last_look_decides_every_point() -> None:
    # passes of 2.5 % in four passes a launch, no launch effect: the passes pool into the noise,
    # and only the recording's share of the last look's standard error is left to narrow
    by = _record(DrawnRun(sd_l=0.0, sd_w=0.025, seed=0), passes=4)
    noise, valid = recorded_noise(by, LEVELS)
    assert noise is not None and not noise.launch_effect and valid == len(by) == 4
    assert last_look_gap(noise, 4, 6) <= 0.05 < last_look_gap(noise, 3, 6)
    assert "(stopped: every point decided by the last look)" in _note(by)


def test_pooled_passes_add_launches_up_to_the_budget_where_the_gap_stays_wide() -> None:
    by = _record(DrawnRun(sd_l=0.0, sd_w=0.04), passes=4)
    noise, valid = recorded_noise(by, LEVELS)
    assert noise is not None and not noise.launch_effect and valid == len(by) == 6
    assert last_look_gap(noise, 6, 6) > 0.05
    assert "3 launches added (6 valid in all)" in _note(by)
    assert "(stopped: launch_budget or time_budget reached)" in _note(by)


def test_launches_stop_once_another_would_narrow_the_gap_too_little() -> None:
    stopped = []
    for seed in range(8):
        by = _record(DrawnRun(sd_l=0.012, sd_w=0.002, seed=seed), launch_budget=12)
        noise, k = recorded_noise(by, LEVELS)
        assert noise is not None and k == len(by) < 12
        assert last_look_gap(noise, k, 12) <= 0.05 or next_launch_gain(noise, k, 12) < GAIN
        stopped.append(k)
    assert max(stopped) > 3 and min(stopped) == 3, stopped


@pytest.mark.parametrize(("kw", "launches"),
                         [({"time_budget_min": 11.0}, 3), ({"launch_budget": 4}, 4)])  # fmt: skip
def test_the_budget_bounds_the_added_launches(kw: dict[str, Any], launches: int) -> None:
    # a launch costs 300 s + 15 s: 11 minutes hold two, fewer than the three recorded
    assert len(_record(DrawnRun(sd_l=0.04, sd_w=0.005), **kw)) == launches


def test_a_server_that_cannot_be_relaunched_adds_none() -> None:
    run = DrawnRun(sd_l=0.04, sd_w=0.005, relaunch=False)
    run.launches = 0
    by = record_launches(run, "plain", WORKLOAD, LEVELS, 1, 1, None, tolerance=0.05,
                         launch_budget=6)  # fmt: skip
    assert len(by) == 1


def test_the_gap_is_the_last_looks_fail_and_pass_bounds_together() -> None:
    # (c_K + p_K)·σ·√(1/K + 1/n), each bound spending its share of the looks at Student's t
    noise, k, n = LaunchNoise(0.015, 35), 6, 3
    dof = 34 + k - 1
    c = scipy_stats.t.isf(DEFAULT_ALPHA * (1 - BACKSTOP_SHARE) / k, dof)
    p = scipy_stats.t.isf(PASS_BETA / k, dof)
    assert last_look_gap(noise, n, k) == pytest.approx((c + p) * 0.015 * math.sqrt(1 / k + 1 / n))
    # more recorded launches and more degrees of freedom narrow it
    few, more = LaunchNoise(0.02, 5), LaunchNoise(0.02, 11)
    assert last_look_gap(more, 6, 6) < last_look_gap(few, 3, 6)
    assert next_launch_gain(few, 3, 6) > next_launch_gain(LaunchNoise(0.02, 35), 3, 6) > 0.09
    assert (
        next_launch_gain(LaunchNoise(0.02, 35), 5, 6)
        > GAIN
        > next_launch_gain(LaunchNoise(0.02, 35), 6, 6)
    )


@pytest.mark.parametrize("sd", [0.012, 0.014, 0.018])
def test_a_closed_gap_leaves_no_deficit_undecided_at_the_last_look(sd: float) -> None:
    """What the rule promises, checked against the verdict itself: where the gap is within a
    tolerance, every deficit the budget's last look can see passes or fails; wider, some does
    not. The current launches scatter as the recording's noise says."""
    k, n, tol = 6, 3, 0.05
    noise = LaunchNoise(sd, 35)
    z = np.linspace(-1.0, 1.0, k)
    z = z / np.std(z, ddof=1)
    look = Look(k, k).share(1 - BACKSTOP_SHARE)
    outcomes = set()
    for d in np.linspace(0.0, 3 * tol, 61):
        current = [float(v) for v in (1 - d) * np.exp(sd * z)]
        got = decide(
            current,
            base_mean=1.0,
            base_std=sd,
            base_n=n,
            base_launches=n,
            tolerance=tol,
            direction=metric("output_throughput").direction,
            current_launches=[f"l{i}" for i in range(k)],
            look=look,
            noise=noise,
        )
        outcomes.add(got.outcome)
    closed = last_look_gap(noise, n, k) <= (DETECT - 1) * tol
    assert closed == (sd < 0.013)  # at 0.014 the gap is 5.3 %, just too wide
    assert (Verdict.INCONCLUSIVE not in outcomes) == closed, outcomes
