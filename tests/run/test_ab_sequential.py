"""Sequential A/B rounds (run/ab.py, run/ab_rounds.py): rounds added one at a time until every
level is decided, on the scripted ``PerfRun`` of test_ab_validity."""

from __future__ import annotations

import itertools
import math
from typing import Any, cast

import numpy as np

from pytest_llmperf.report.ab_table import ab_markdown, ab_table
from pytest_llmperf.run.ab import ABCheck, ABRun, ab_point
from pytest_llmperf.run.ab_rounds import run_rounds
from pytest_llmperf.run.perfrun import PerfRun
from pytest_llmperf.run.suite import ABSpec
from pytest_llmperf.verdicts.verdict import Verdict

from ..verdicts import WORKLOAD
from .test_ab_validity import ScriptedRun


def seq_ab(
    script: dict[tuple[str, int], list[float]], *, sequential: bool = True, **spec: Any
) -> tuple[ABRun, ScriptedRun]:
    run = ScriptedRun(script)
    levels = tuple(sorted({c for _, c in script}))
    ab = ABSpec(candidate="new", reference="old", **spec)
    return ABRun(ab, levels, WORKLOAD, cast(PerfRun, run), sequential=sequential), run


def test_an_unchanged_ab_stops_at_the_first_look() -> None:
    script = {(s, c): [100.0 * c] * 6 for s in ("old", "new") for c in (1, 4)}
    abr, run = seq_ab(script, rounds=6)
    for c in (1, 4):
        assert abr.result(c).verdict == Verdict.PASS
    assert len(abr.orders) == 2 and len(run.calls) == 8  # 2 rounds x 2 servers x 2 levels
    point = ab_point(abr, abr.result(4))
    assert (point.budget, point.rounds_run, point.decided_after) == (6, 2, 2)
    assert point.rounds_cell() == "2 of 6"
    assert "decided after 2 of 6 rounds" in point.message
    assert point.green_means is not None
    assert point.green_means.startswith("pass: no regression larger than 0.0 % in ")
    assert "what green means" in ab_markdown([point]) and "2 of 6" in ab_table([point])
    assert "95 % CI (any stop)" in ab_table([point])  # the look's interval, not a fixed one
    props: list[tuple[str, str]] = []
    ABCheck(abr, 1, on_properties=props.extend).evaluate()  # JUnit, as a baseline point's
    assert dict(props)["llmperf.green_means"].startswith("pass: no regression larger than")


def test_a_level_slowed_under_a_big_launch_factor_fails_launch_adjusted() -> None:
    # Each round's launches draw a common speed (sd 20 %); "new" loses 25 % at C=16 only.
    rng = np.random.default_rng(5)
    common = np.exp(rng.normal(0, 0.2, 6))
    noise = np.exp(rng.normal(0, 0.005, (3, 6)))
    script: dict[tuple[str, int], list[float]] = {}
    for i, c in enumerate((1, 4, 16)):
        script[("old", c)] = [100.0 * c] * 6
        slow = 0.75 if c == 16 else 1.0
        script[("new", c)] = list(100.0 * c * slow * common * noise[i])
    abr, _ = seq_ab(script, rounds=6)
    res = {c: abr.result(c) for c in (1, 4, 16)}
    assert res[16].verdict == Verdict.FAIL and res[16].adjusted
    assert "launch-adjusted because the rounds' common launch factor" in res[16].message
    assert res[1].verdict == res[4].verdict == Verdict.PASS
    assert len(abr.orders) < 6
    assert ab_point(abr, res[16]).adjusted
    # Plain, the same rounds cannot tell: the launch factor swamps the 25 %.
    plain, _ = seq_ab(script, rounds=6, adjust="none")
    assert plain.result(16).verdict != Verdict.FAIL


def test_a_borderline_level_runs_the_whole_budget_and_says_so() -> None:
    rng = np.random.default_rng(2)
    new = list(1000.0 * np.exp(math.log(0.92) + rng.normal(0, 0.03, 4)))
    abr, _ = seq_ab({("old", 4): [1000.0] * 4, ("new", 4): new}, rounds=4)
    res = abr.result(4)
    assert res.verdict == Verdict.INCONCLUSIVE and len(abr.orders) == 4
    assert "undecided after 4 of 4 rounds (the budget)" in res.message
    point = ab_point(abr, res)
    assert point.decided_after is None and point.rounds_cell() == "4 of 4 (undecided)"
    assert point.green_means is not None and point.green_means.startswith("inconclusive at C=4")


def test_the_budget_defaults_to_launch_budget_sequential_and_4_fixed() -> None:
    script = {(s, 4): [1000.0] * 6 for s in ("old", "new")}
    assert seq_ab(script)[0].budget == 6
    assert seq_ab(script, sequential=False)[0].budget == 4
    assert seq_ab(script, rounds=3)[0].budget == 3
    fixed, _ = seq_ab(script, sequential=False)
    fixed.result(4)
    assert len(fixed.orders) == 4 and not fixed.decided  # fixed rounds: no early stop
    assert ab_point(fixed, fixed.result(4)).budget is None


def test_the_time_budget_stops_the_rounds_but_never_before_two() -> None:
    ticks = itertools.count()
    clock = lambda: 60.0 * next(ticks)  # noqa: E731 - each round takes a minute
    done: list[int] = []
    n, out = run_rounds(6, done.append, lambda n: False, time_budget_min=3.5, clock=clock)
    assert (n, out) == (3, True) and done == [0, 1, 2]
    ticks = itertools.count()
    n, out = run_rounds(6, lambda r: None, lambda n: False, time_budget_min=0.5, clock=clock)
    assert (n, out) == (2, True)
    n, out = run_rounds(6, lambda r: None, None, time_budget_min=0.5, clock=clock)
    assert (n, out) == (6, False)  # fixed rounds ignore it
