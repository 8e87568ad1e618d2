"""Same-job A/B through pytest: ``[[ab]]`` + the ``llmperf_ab`` fixture, end to end.

Two simulated servers, interleaved rounds, and a slowdown injected into the candidate at C=4
only: exactly that point fails with a paired-CI sentence, and ab.json plus the Markdown table
are written.
"""

from __future__ import annotations

import json
import math
import re

import pytest

from pytest_llmperf.verdicts.paired import aa_band

from .conftest import FAST, assert_no_servers_left, light

SUITE = """
[[server]]
name = "old"
model = "sim/qwen-moe"

[[server]]
name = "new"
model = "sim/qwen-moe"

[sweep]
levels = [1, 4]
sequential = false  # the fixed rounds (the sequential ones: test_ab_sequential_*)

[[ab]]
candidate = "new"
reference = "old"
rounds = 4
tolerance = 0.05
"""


def test_ab_fails_exactly_the_slowed_level(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", llmperf=light(SUITE))
    pytester.makepyfile(test_ab="def test_ab(llmperf_ab):\n    llmperf_ab.check()\n")
    summary = pytester.path / "summary.md"
    pytester._monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    # Longer outputs than FAST, so a level is not dominated by scheduling on a busy box.
    result = pytester.runpytest_subprocess(
        *FAST,
        "--llmperf-output-len",
        "64",
        "--llmperf-sim-args",
        "new: --sim-slowdown 3-4:4.0",
        "--llmperf-output-dir",
        str(pytester.path / "out"),
        timeout=300,
    )
    out = result.stdout.str()
    failed = set(re.findall(r"^FAILED \S+::(\S+)", out, re.M))
    assert failed == {"test_ab[new-vs-old-C4]"}, out[-3000:]
    # the header's plan counts the rounds: 4 fixed, two launches each, one pass (no start-up
    # recorded, so "auto" has nothing to choose from)
    assert "+ A/B new-vs-old 4 rounds of 2 launches (1 pass a launch), about" in out
    result.assert_outcomes(passed=1, failed=1)
    assert re.search(r"new is \d+\.\d % slower than old at C=4 \(paired over 4 rounds", out), out
    data = json.loads((pytester.path / "out" / "ab.json").read_text())
    points = {p["concurrency"]: p for p in data["points"]}
    assert set(points) == {1, 4}
    assert points[4]["verdict"] == "fail" and points[4]["ci_high"] < -0.05
    assert points[1]["verdict"] != "fail"
    # interleaved: reference first in odd rounds, candidate first in even ones
    assert points[4]["order"] == [["old", "new"], ["new", "old"]] * 2
    assert len(points[4]["candidate_values"]) == 4
    assert "| new-vs-old | 4 " in summary.read_text()
    # the A/A band: the same rounds split (1 with 2, 3 with 4), each server against itself
    for c, p in points.items():
        sides = [p["reference_values"], p["candidate_values"]]
        band = aa_band([[math.nan if v is None else v for v in vs] for vs in sides])
        got = (p["aa_low"], p["aa_high"], p["aa_pairs"])
        assert got == (pytest.approx(band) if band else (None, None, 0)), c
    assert points[4]["ci_high"] < points[4]["aa_low"]  # the slowdown lies outside "no change"
    assert "A/A band" in summary.read_text() and "pairs)" in summary.read_text()
    result.stdout.fnmatch_lines(["*A/A band*verdict*"])
    assert_no_servers_left(pytester.path)


def test_ab_without_compare_section_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", llmperf=SUITE.split("[[ab]]")[0])
    pytester.makepyfile(test_ab="def test_ab(llmperf_ab):\n    llmperf_ab.check()\n")
    result = pytester.runpytest_subprocess(*FAST, timeout=120)
    assert "uses llmperf_ab, but" in result.stdout.str()
    assert "has no [[ab]] entry" in result.stdout.str()
    assert result.ret != 0


def test_ab_points_reach_the_controller_under_xdist(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makefile(".toml", llmperf=light(SUITE))
    pytester.makepyfile(test_ab="def test_ab(llmperf_ab):\n    llmperf_ab.check()\n")
    out = pytester.path / "out"
    result = pytester.runpytest_subprocess(
        *FAST, "-n", "2", "--llmperf-output-dir", str(out), timeout=300
    )
    assert result.ret in (0, 1), result.stdout.str()[-3000:]
    points = json.loads((out / "ab.json").read_text())["points"]
    assert sorted(p["concurrency"] for p in points) == [1, 4]
    assert_no_servers_left(pytester.path)


SEQUENTIAL_SUITE = SUITE.replace(
    "sequential = false  # the fixed rounds (the sequential ones: test_ab_sequential_*)\n", ""
).replace("rounds = 4", "rounds = 6  # the budget")


def _sequential_session(pytester: pytest.Pytester, *sim: str) -> tuple[str, dict[int, dict]]:
    pytester.makefile(".toml", llmperf=light(SEQUENTIAL_SUITE))
    pytester.makepyfile(test_ab="def test_ab(llmperf_ab):\n    llmperf_ab.check()\n")
    out = pytester.path / "out"
    result = pytester.runpytest_subprocess(
        *FAST, "--llmperf-output-len", "64", *sim, "--llmperf-output-dir", str(out), timeout=300
    )
    data = json.loads((out / "ab.json").read_text())
    assert_no_servers_left(pytester.path)
    return result.stdout.str(), {p["concurrency"]: p for p in data["points"]}


def test_ab_sequential_unchanged_stops_before_the_budget(pytester: pytest.Pytester) -> None:
    out, points = _sequential_session(pytester)
    assert not re.findall(r"^FAILED", out, re.M), out[-3000:]
    for c, p in points.items():
        assert p["verdict"] == "pass", (c, p["message"])
        assert p["budget"] == 6 and p["decided_after"] is not None, c
        assert f"decided after {p['decided_after']} of 6 rounds" in p["message"]
        # a bound, or none where even the interval's worse end is a gain (green.py)
        assert re.match(r"pass: no regression (larger than \S+ % )?in ", p["green_means"]), p
    rounds_run = {p["rounds_run"] for p in points.values()}
    assert len(rounds_run) == 1 and rounds_run.pop() < 6  # stopped before the budget
    assert "what green means (A/B):" in out
    green = r"- new-vs-old: pass: no regression (larger than \S+ % )?in output_throughput at C=4 "
    assert re.search(green + r"\(n=\d paired rounds, decided after \d of 6 rounds\)", out), out


def test_ab_sequential_fails_the_slowed_level(pytester: pytest.Pytester) -> None:
    out, points = _sequential_session(pytester, "--llmperf-sim-args", "new: --sim-slowdown 3-4:4.0")
    failed = set(re.findall(r"^FAILED \S+::(\S+)", out, re.M))
    assert failed == {"test_ab[new-vs-old-C4]"}, out[-3000:]
    assert points[4]["verdict"] == "fail" and points[4]["decided_after"] is not None
    assert re.search(r"a regression beyond the tolerance \(-5 %\), decided after \d of 6", out)
    assert points[1]["verdict"] != "fail"
