"""An invalid level never decides an A/B verdict: re-measured once, else left out of the pairs.

``ABRun`` talks to its ``PerfRun`` through ``stop`` and ``measure``; the stand-in below serves
scripted levels per (config, C) in order, so a test states exactly which round of which side
was invalid (failed requests, what llama-server does when it is overloaded).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import pytest

from pytest_llmperf.base.results import LevelResult, Workload
from pytest_llmperf.report.ab_table import ab_table
from pytest_llmperf.run.ab import ABCheck, ABRun, ab_point
from pytest_llmperf.run.options import RunOptions
from pytest_llmperf.run.perfrun import PerfRun
from pytest_llmperf.run.suite import CompareSpec
from pytest_llmperf.verdicts.validity import ValidityPolicy
from pytest_llmperf.verdicts.verdict import Verdict

from ..verdicts import WORKLOAD, make_level

BAD = -1.0  # a scripted value meaning "this measurement had failed requests"


class ScriptedRun:
    """What ``ABRun`` uses of a ``PerfRun``: levels served from ``script[(config, c)]``."""

    def __init__(self, script: dict[tuple[str, int], list[float]]) -> None:
        self._next: dict[tuple[str, int], Iterator[float]] = {k: iter(v) for k, v in script.items()}
        self.calls: list[tuple[str, int]] = []
        self.options = RunOptions(probes=0)  # these A/Bs judge speed; probes need a server

    def stop(self, config: str) -> None:
        pass

    def measure(self, config: str, workload: Workload, c: int, **kw: Any) -> LevelResult:
        self.calls.append((config, c))
        value = next(self._next[(config, c)])
        if value == BAD:
            return make_level(c, 1000.0, failed=3)
        return make_level(c, value)


def ab(script: dict[tuple[str, int], list[float]], **spec: Any) -> tuple[ABRun, ScriptedRun]:
    run = ScriptedRun(script)
    levels = tuple(sorted({c for _, c in script}))
    compare = CompareSpec(candidate="new", reference="old", **spec)
    return ABRun(compare, levels, WORKLOAD, cast(PerfRun, run)), run


def test_an_invalid_level_is_measured_again_and_the_valid_repeat_is_used() -> None:
    abr, run = ab({("old", 4): [1000, 1000, 1000], ("new", 4): [BAD, 800, 800, 800]}, rounds=3)
    res = abr.result(4)
    assert run.calls.count(("new", 4)) == 4  # one repeat, in round 1
    assert res.verdict == Verdict.FAIL and res.rounds == 3
    assert "left out" not in res.message
    assert abr.invalid == {}


def test_a_round_that_stays_invalid_is_left_out_with_its_reason() -> None:
    old = [1000.0] * 4
    # round 2 of "new" is invalid twice; the other three rounds say 20 % slower
    abr, _ = ab({("old", 4): old, ("new", 4): [800, BAD, BAD, 800, 800]}, rounds=4)
    res = abr.result(4)
    assert res.verdict == Verdict.FAIL and res.rounds == 3
    assert "1 of 4 rounds left out as invalid (new: round 2: 3 of" in res.message
    assert "requests failed" in res.message
    point = ab_point(abr, res)
    assert point.candidate_values == [800.0, None, 800.0, 800.0]
    assert "800.0" in ab_table([point])  # the table's mean is over the valid rounds
    assert "95 % CI " in ab_table([point]) and "(any stop)" not in ab_table([point])  # fixed


def test_too_few_valid_rounds_is_invalid_not_a_verdict() -> None:
    # Invalid levels that would read as a 50 % drop if they were judged.
    abr, _ = ab({("old", 4): [1000.0] * 3, ("new", 4): [BAD, BAD, 500, BAD, BAD]}, rounds=3)
    seen: list[str] = []
    check = ABCheck(abr, 4, on_invalid=seen.append)
    outcome = check.judge()
    assert len(seen) == 1 and "2 of 3 rounds left out" in seen[0]  # summary, bisect exit 125
    assert check.evaluate().verdict == Verdict.INVALID
    assert outcome.kind == "fail" and outcome.message.startswith("INVALID measurement")
    assert "2 of 3 rounds left out as invalid" in outcome.message
    assert "not a performance verdict" in outcome.message
    abr2, _ = ab({("old", 4): [1000.0] * 3, ("new", 4): [BAD, BAD, 500, BAD, BAD]}, rounds=3)
    skipped = ABCheck(abr2, 4, invalid_policy="skip").judge()
    assert skipped.kind == "skip" and "INVALID" in skipped.message


def test_launch_adjust_leaves_out_a_round_with_too_few_valid_levels() -> None:
    # Three levels; in round 1 the candidate's C=1 is invalid, so that round's launch factor
    # (the median over levels) cannot be taken: round 1 is left out at every level.
    script = {
        ("old", 1): [100.0] * 3,
        ("old", 4): [400.0] * 3,
        ("old", 16): [1600.0] * 3,
        ("new", 1): [BAD, BAD, 110, 90],
        ("new", 4): [440, 440, 360],
        ("new", 16): [1100, 1200, 1000],
    }
    abr, _ = ab(script, rounds=3, adjust="launch")
    for c in (1, 4, 16):
        assert abr.result(c).rounds == 2, c
    assert "launch factor is unknown" in abr.result(4).message
    assert "new: round 1" in abr.result(1).message


@pytest.mark.parametrize("policy_failed", [0, 5])
def test_the_suites_validity_policy_is_applied(policy_failed: int) -> None:
    abr, run = ab({("old", 4): [1000.0] * 2, ("new", 4): [BAD, 800, 800]}, rounds=2)
    abr.policy = ValidityPolicy(max_failed=policy_failed)
    abr.measure()
    # 3 failed requests: invalid under the default (0 allowed), accepted with 5 allowed
    assert run.calls.count(("new", 4)) == (3 if policy_failed == 0 else 2)
