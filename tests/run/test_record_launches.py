"""A recording adds launches while a later run's first look would be too wide to fail a
regression of twice the tolerance (``run/record_launches.py``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from pytest_llmperf.run.record_launches import GAIN, record_launches, recorded_noise
from pytest_llmperf.verdicts.launch_adjust import first_look_margin, next_launch_gain
from pytest_llmperf.verdicts.stats import LaunchNoise

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


def test_a_launch_effect_adds_launches_while_each_narrows_the_margin_and_says_why() -> None:
    # passes of 0.5 % about launches that move a level by 4 %: the launch medians are the noise
    run = DrawnRun(sd_l=0.04, sd_w=0.005)
    by = _record(run)
    assert len(by) == 5  # 3 -> 4 narrows the margin by 23 %, 4 -> 5 by 12 %, 5 -> 6 by 7 %
    noise, valid = recorded_noise(by, LEVELS)
    assert valid == 5 and noise is not None
    assert first_look_margin(noise, 5, 6) > 0.05 and next_launch_gain(noise, 5, 6) < GAIN
    note = next(n for n in by["L1"][1][0].notes if n.startswith("recording:"))
    assert "2 launches added (5 valid in all)" in note, note
    assert "wider than the tolerance 5 %" in note, note
    assert "(stopped: a launch more would narrow it by under 10 %)" in note, note


def test_quiet_launches_stop_at_baseline_repeat() -> None:
    run = DrawnRun(sd_l=0.0, sd_w=0.002)
    by = _record(run)
    assert len(by) == 3
    noise, valid = recorded_noise(by, LEVELS)
    assert noise is not None and first_look_margin(noise, valid, 6) <= 0.05
    assert not any(n.startswith("recording:") for n in by["L1"][1][0].notes)


def test_pooled_passes_add_no_launch_however_wide_the_margin() -> None:
    # no launch effect, passes of 4 % in four passes a launch: the passes pool into the noise,
    # whose degrees of freedom are many; a launch more would narrow the margin by about 6 %
    by = _record(DrawnRun(sd_l=0.0, sd_w=0.04), passes=4)
    noise, valid = recorded_noise(by, LEVELS)
    assert noise is not None and not noise.launch_effect
    assert first_look_margin(noise, valid, 6) > 0.05 and len(by) == 3


def test_launches_stop_once_another_would_narrow_the_margin_too_little() -> None:
    stopped = []
    for seed in range(8):
        by = _record(DrawnRun(sd_l=0.012, sd_w=0.002, seed=seed), launch_budget=12)
        noise, k = recorded_noise(by, LEVELS)
        assert noise is not None and k == len(by) < 12
        assert first_look_margin(noise, k, 12) <= 0.05 or next_launch_gain(noise, k, 12) < GAIN
        stopped.append(k)
    assert max(stopped) > 3, stopped


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


def test_the_first_look_margin_narrows_with_launches_and_their_degrees_of_freedom() -> None:
    few, more = LaunchNoise(0.02, 5), LaunchNoise(0.02, 11)
    assert first_look_margin(more, 6, 6) < first_look_margin(few, 3, 6)
    assert (
        next_launch_gain(few, 3, 6) > 0.2 and next_launch_gain(LaunchNoise(0.02, 23), 3, 6) < GAIN
    )
    # Student's t at 4 degrees of freedom: far wider than the normal's 2.6 standard errors
    assert first_look_margin(few, 3, 6) > 4 * 0.02 * math.sqrt(1 + 1 / 3)
