"""Sequential verdicts end to end: a config is relaunched only for its undecided points, stops
as soon as every point is decided, and leaves a point inconclusive when the budget is spent."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from .conftest import SUITE, light, run, with_sweep

ARGS = [
    "--llmperf-levels", "1,4,16",
    "--llmperf-output-len", "32",
    "-k", "test_sweep and plain",
]  # fmt: skip


@pytest.fixture(autouse=True)
def _plain(suite):
    """Plain comparisons (no launch adjustment), throughput only, on a light load; a 25 %
    tolerance, so that a 3-launch baseline of this loaded box decides unchanged points at once."""
    lines = ('metrics = ["output_throughput"]', 'adjust = "none"', "sequential = true",
             'tolerance = {"*" = "25%"}')  # fmt: skip
    (suite.path / "llmperf.toml").write_text(light(with_sweep(SUITE, *lines)))


def _samples(suite) -> Counter[int]:
    results = json.loads((suite.path / "llmperf-results" / "results.json").read_text())
    (sweep,) = results["sweeps"]
    got = Counter(lv["max_concurrency"] for lv in sweep["levels"])
    for reps in sweep["repeats"].values():
        got.update(lv["max_concurrency"] for lv in reps)
    return got


def test_relaunches_only_undecided_points_until_decided_or_budget(suite):
    run(suite, *ARGS, "--llmperf-update", "--llmperf-baseline-repeat", "3").assert_outcomes(
        passed=3
    )
    # Unchanged: passes within the default budget of 6 launches per config. (Every point is
    # not yet decided at the first look: Student's t over a 3-launch baseline's 2 dof is wide.)
    same = run(suite, *ARGS)
    same.assert_outcomes(passed=3)
    assert set(_samples(suite)) == {1, 4, 16} and max(_samples(suite).values()) <= 6
    # C=16 as slow as the tolerance (25 %): undecided, so only it is measured again, in fresh
    # launches, until the budget (3 launches) is spent; it then passes with a warning.
    toml = suite.path / "llmperf.toml"
    toml.write_text(with_sweep(toml.read_text(), "launch_budget = 3"))
    edge = run(suite, *ARGS,
               "--llmperf-sim-args=--sim-slowdown 9-16:1.3333")  # fmt: skip
    edge.assert_outcomes(passed=3)
    got = _samples(suite)
    assert got[16] == 3, got
    # a point decided at an earlier look is not measured in the later launches
    decided = [c for c in (1, 4) if f"C={c}: output_throughput" not in edge.stdout.str()]
    assert all(got[c] < 3 for c in decided), got
    edge.stdout.fnmatch_lines(["*C=16*inconclusive after 3 launches*look 3 of 3*"])
