"""``[[ab]] passes``: each launch of a round measures the sweep several times, interleaved; a
round's value is its passes' median, and the launch-adjusted comparison's noise pools over the
levels and the passes (run/ab.py ``ABRun.noise``, launch_adjust.pool_within)."""

from __future__ import annotations

import math
from typing import Any, cast

import numpy as np
import pytest

from pytest_llmperf.run.ab import ABRun, ab_point
from pytest_llmperf.run.perfrun import PerfRun
from pytest_llmperf.run.suite import ABSpec
from pytest_llmperf.verdicts.launch_adjust import pool_within
from pytest_llmperf.verdicts.verdict import Verdict

from ..verdicts import WORKLOAD
from .test_ab_validity import BAD, ScriptedRun

LEVELS = (1, 4, 16)


def scripted(script: dict[tuple[str, int], list[float]], **spec: Any) -> tuple[ABRun, ScriptedRun]:
    run = ScriptedRun(script)
    levels = tuple(sorted({c for _, c in script}))
    ab = ABSpec(candidate="new", reference="old", **spec)
    return ABRun(ab, levels, WORKLOAD, cast(PerfRun, run), sequential=True), run


def test_a_launch_measures_its_passes_interleaved_and_a_round_is_their_median() -> None:
    # three passes a launch: old at C=1 reads 100, 130, 90 -> 100 (the median, not the mean 106.7)
    old = {1: [100.0, 130.0, 90.0] * 2, 4: [400.0, 400.0, 400.0] * 2}
    new = {1: [100.0, 100.0, 100.0] * 2, 4: [380.0, 390.0, 1000.0] * 2}
    script = {(s, c): v for s, vs in (("old", old), ("new", new)) for c, v in vs.items()}
    abr, run = scripted(script, rounds=2, passes=3)
    abr.result(1)
    # round 1: old then new, each launch 1, 4, 1, 4, 1, 4 (drift falls on both levels alike)
    assert run.calls[:6] == [("old", 1), ("old", 4)] * 3
    assert run.calls[6:12] == [("new", 1), ("new", 4)] * 3
    assert abr.values["old"][1] == [100.0, 100.0]
    assert abr.values["new"][4] == [390.0, 390.0]  # one wild pass moves a median not at all
    point = ab_point(abr, abr.result(4))
    assert point.passes == 3
    assert point.candidate_passes == [[380.0, 390.0, 1000.0]] * 2
    assert point.reference_values == [400.0, 400.0]
    assert "paired over 2 rounds of 3 passes" in point.message


def test_one_pass_keeps_the_file_as_it_was() -> None:
    script = {(s, c): [100.0 * c] * 2 for s in ("old", "new") for c in (1, 4)}
    abr, _ = scripted(script, rounds=2)
    point = ab_point(abr, abr.result(4))
    assert point.passes is None and point.candidate_passes is None
    assert "passes" not in point.model_dump(exclude_none=True)


def test_an_invalid_pass_is_left_out_of_its_round_not_the_round() -> None:
    # new's C=4 pass 2 of round 1 is invalid twice (measured again once); its round stands on
    # the two valid passes
    script = {
        ("old", 4): [400.0] * 6,
        ("new", 4): [300.0, BAD, BAD, 300.0, 300.0, 300.0, 300.0],
    }
    abr, _ = scripted(script, rounds=2, passes=3)
    res = abr.result(4)
    assert abr.values["new"][4] == [300.0, 300.0]
    assert abr.invalid[("new", 4)][0].startswith("round 1, pass 2: ")
    assert res.verdict == Verdict.FAIL and "left out" not in res.message
    point = ab_point(abr, res)
    assert point.candidate_passes == [[300.0, None, 300.0], [300.0, 300.0, 300.0]]


def test_a_round_with_every_pass_invalid_is_left_out_with_its_reasons() -> None:
    script = {
        ("old", 4): [400.0] * 9,
        ("new", 4): [300.0, 300.0] + [BAD] * 4 + [300.0, 300.0] * 2,
    }
    abr, _ = scripted(script, rounds=3, passes=2)
    res = abr.result(4)
    assert abr.values["new"][4][1] != abr.values["new"][4][1]  # NaN: round 2 has no value
    assert "1 of 3 rounds left out as invalid (new: round 2, pass 1: " in res.message
    assert "round 2, pass 2: " in res.message


def test_pool_within_pools_only_when_the_rounds_show_no_excess() -> None:
    # rounds' variance 1.0 on 2 dof, passes' 1.0 on 20: pooled on 22 dof
    assert pool_within(1.0, 2, 1.0, 20) == (1.0, 22)
    # rounds' variance ten times the passes': a launch moved the level; the rounds alone
    assert pool_within(10.0, 2, 1.0, 20) == (10.0, 2)
    assert pool_within(1.0, 2, 0.0, 20) == (1.0, 2)  # no spread measured: nothing to pool


# Replicates: whole sequential A/Bs (6 rounds at most, levels 1, 4, 16, adjust "auto") on drawn
# values: each round's launches draw a common speed (sd 15 %), every pass of every level its
# own noise (sd 10 %), optionally a launch's own effect on a level (sd 3 %).


class Drawn(ABRun):
    """Rounds read from arrays instead of measured (the looks, the adjust choice, the noise
    and the verdicts are the plugin's)."""

    draws: dict[str, dict[int, np.ndarray]]

    def _round(self, r: int) -> None:
        self.orders.append((self.spec.reference, self.spec.candidate))
        for side in (self.spec.reference, self.spec.candidate):
            for c in self.levels:
                passes = [float(x) for x in self.draws[side][c][r]]
                self.pass_values.setdefault(side, {}).setdefault(c, []).append(passes)
                self.values.setdefault(side, {}).setdefault(c, []).append(
                    float(np.exp(np.median(np.log(passes))))
                )


def replicate(
    rng: np.random.Generator, passes: int, slow: float, *, own_sd: float = 0.0, pooled: bool = True
) -> dict[int, Verdict]:
    budget = 6
    draws: dict[str, dict[int, np.ndarray]] = {}
    for side in ("old", "new"):
        common = rng.normal(0, 0.15, budget)[:, None]
        draws[side] = {}
        for c in LEVELS:
            shift = math.log(slow) if side == "new" and c == 16 else 0.0
            own = rng.normal(0, own_sd, budget)[:, None]
            noise = rng.normal(0, 0.10, (budget, passes))
            draws[side][c] = 100.0 * c * np.exp(shift + common + own + noise)
    spec = ABSpec(candidate="new", reference="old", passes=passes)
    abr = Drawn(spec, LEVELS, WORKLOAD, cast(PerfRun, None), sequential=True, launch_budget=budget)
    abr.draws = draws
    if not pooled:
        abr.noise = lambda n, adjusted: None  # type: ignore[method-assign]
    abr.measure()
    return {c: abr.result(c).verdict for c in LEVELS}


@pytest.mark.parametrize(("passes", "own_sd"), [(4, 0.0), (8, 0.15)])
def test_pooled_noise_keeps_the_false_fail_rate_at_the_tolerance(
    passes: int, own_sd: float
) -> None:
    # new is exactly 5 % (the tolerance) slower at C=16: it may fail at most alpha (2.5 %) of
    # the time, a launch's own effect on a level (own_sd) included, which the F-test must keep
    # out of the pooled noise (pooled regardless, 8 passes and sd 15 % fail 30 times in 300)
    rng = np.random.default_rng(11)
    reps = 300
    fails = sum(
        replicate(rng, passes, 0.95, own_sd=own_sd)[16] == Verdict.FAIL for _ in range(reps)
    )
    bound = 0.025 + 3 * math.sqrt(0.025 * 0.975 / reps)
    assert fails / reps <= bound, f"{fails} of {reps} false fails at the tolerance"


def test_pooled_noise_catches_more_than_a_levels_own_rounds() -> None:
    # a 15 % drop at C=16, four passes: the same draws judged with a level's own n - 1
    # degrees of freedom and with the pooled noise (22 and 38 of 150 when written)
    caught = {}
    for pooled in (False, True):
        rng = np.random.default_rng(3)
        caught[pooled] = sum(
            replicate(rng, 4, 0.85, pooled=pooled)[16] == Verdict.FAIL for _ in range(150)
        )
    assert caught[True] > 1.2 * caught[False], caught


class SlowStart(ScriptedRun):
    """Launches that take ``startup_s`` to start and ``level_s`` a level."""

    def __init__(self, script: dict[tuple[str, int], list[float]], startup_s: float) -> None:
        super().__init__(script)
        self.startup_s = startup_s

    def measure(self, config: str, workload: Any, c: int, **kw: Any) -> Any:
        level = super().measure(config, workload, c, **kw)
        level.startup_s, level.duration = self.startup_s, 10.0
        return level


@pytest.mark.parametrize(
    ("startup_s", "ratio", "passes"), [(300.0, None, 8), (5.0, None, 1), (300.0, 0.5, 2)]
)
def test_auto_passes_follow_the_first_launchs_start_up(
    startup_s: float, ratio: float | None, passes: int
) -> None:
    # the default passes = "auto": a pass of two 10 s levels; start-up 300 s gives
    # 2 x sqrt(300 / 20) = 7.7 -> 8 passes a launch, on every launch; 5 s is a cheap launch;
    # at the ratio 0.5 the entries recorded (launches the larger noise) 0.5 x 3.9 -> 2
    script = {(s, c): [100.0 * c] * 40 for s in ("old", "new") for c in (1, 4)}
    run = SlowStart(script, startup_s)
    abr = ABRun(ABSpec(candidate="new", reference="old", rounds=2), (1, 4), WORKLOAD,
                cast(PerfRun, run), sequential=True, ratio=ratio)  # fmt: skip
    abr.result(4)
    assert abr.passes == passes
    assert len(run.calls) == 2 * 2 * 2 * passes  # rounds x sides x levels x passes
    assert all(len(p) == passes for side in abr.pass_values.values() for p in side[4])
