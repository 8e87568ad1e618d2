"""Time to a verdict: the header predicts the launches and minutes before the first launch (from
the start-up times and throughputs the baselines recorded, and the re-run settings), and the
summary and results.json say what the session took."""

from __future__ import annotations

import re

import pytest

from pytest_llmperf.run.plan_time import launch_budget

from .conftest import SWEEP_TEST, assert_no_servers_left, light, read_json, run

TWO_LEVELS = """
[[server]]
name = "plain"
model = "sim/qwen-moe"
args = []

[sweep]
levels = [1, 4]
metrics = ["output_throughput"]
"""

PLAN = re.compile(
    r"llmperf: plan: 1 server × (\d+)-(\d+) launches, about ([\d.]+)-([\d.]+) min \((.*?); "
    r"levels 1,4, (.*?); up to (\d+) re-runs a point\)"
)
TOOK = re.compile(r"took: (\d+) launch(?:es)?, ([\d.]+) min \(predicted ([\d.]+)-([\d.]+) min\)")


def test_launch_budget_follows_the_rerun_settings() -> None:
    assert launch_budget(4, repeat=1, max_reruns=2) == (1, 9)
    assert launch_budget(4, repeat=2, max_reruns=0) == (5, 5)  # each further sample relaunches
    assert launch_budget(4, max_reruns=1, update=True, baseline_repeat=3) == (9, 13)
    assert launch_budget(4, repeat=3, max_reruns=2, adjust="launch") == (3, 11)


def test_the_header_predicts_and_the_summary_says_what_it_took(
    pytester: pytest.Pytester,
) -> None:
    pytester.makefile(".toml", llmperf=light(TWO_LEVELS))
    pytester.makepyfile(test_perf=SWEEP_TEST)
    first = run(pytester, "--llmperf-update")
    first.assert_outcomes(passed=2)
    (plan,) = [m for line in first.outlines if (m := PLAN.search(line))]
    assert plan.group(5) == "no start-up time recorded, 60 s assumed"
    assert plan.group(6) == "measuring time not recorded (start-ups only)"
    assert (int(plan.group(1)), int(plan.group(2))) == (1, 5)
    assert int(plan.group(7)) == 2  # recording: max_reruns
    assert float(plan.group(3)) == 1.0  # one 60 s start-up

    result = run(pytester)
    result.assert_outcomes(passed=2)
    (plan,) = [m for line in result.outlines if (m := PLAN.search(line))]
    startup = re.fullmatch(r"start-up (\d+) s recorded in baselines", plan.group(5))
    assert startup is not None
    assert plan.group(6) == "each level's duration from its recorded throughput"
    # judging by the sequential rule: one launch, and up to launch_budget (6) looks in all
    assert (int(plan.group(1)), int(plan.group(2)), int(plan.group(7))) == (1, 6, 5)
    (took,) = [m for line in result.outlines if (m := TOOK.search(line))]
    assert took.group(3, 4) == plan.group(3, 4)
    data = read_json(pytester.path / "llmperf-results" / "results.json")
    spent = data["took"]["plain"]
    # the summary's numbers are the file's; a session of this suite launches 1 to 6 times
    assert int(took.group(1)) == spent["launches"]
    assert 1 <= spent["launches"] <= 6
    assert spent["seconds"] > 0
    assert float(took.group(2)) == pytest.approx(spent["seconds"] / 60, abs=0.06)
    assert_no_servers_left(pytester.path)


# three levels: the fewest the launch-adjusted comparison needs
THREE_LEVELS_ADJUSTED = TWO_LEVELS.replace("levels = [1, 4]", "levels = [1, 2, 4]") + (
    'adjust = "launch"\nlaunch_budget = 12\n'
)


@pytest.mark.parametrize(("sequential", "most"), [(True, 12), (False, 9)])
def test_a_recording_that_adjusts_plans_for_the_launches_it_may_add(
    pytester: pytest.Pytester, sequential: bool, most: int
) -> None:
    """Recording under the sequential rule with ``adjust``, launches are added while a later
    run's first look would be too wide, up to ``launch_budget``: the header's maximum is then
    the budget (12), not the fixed plan's 3 recording launches + 2 re-runs × 3 levels (9).
    Nothing is launched: ``--collect-only``."""
    suite = THREE_LEVELS_ADJUSTED + f"sequential = {str(sequential).lower()}\n"
    pytester.makefile(".toml", llmperf=light(suite))
    pytester.makepyfile(test_perf=SWEEP_TEST)
    result = run(pytester, "--llmperf-update", "--collect-only", "--llmperf-baseline-repeat", "3")
    (header,) = [line for line in result.outlines if line.startswith("llmperf: plan: ")]
    assert header.startswith(f"llmperf: plan: 1 server × 3-{most} launches"), header


AB_AND_SWEEP = """
[[server]]
name = "old"
model = "sim/qwen-moe"

[[server]]
name = "new"
model = "sim/qwen-moe"

[sweep]
levels = [1, 4]
sequential = false
max_reruns = 1

[[ab]]
candidate = "new"
reference = "old"
rounds = 4
"""
AB_TEST = "def test_ab(llmperf_ab):\n    llmperf_ab.check()\n"


def test_the_plan_is_made_again_for_the_collected_tests(pytester: pytest.Pytester) -> None:
    """The header's plan counts every server's sweep; tests that only run the ``[[ab]]`` (or
    a ``-k`` that keeps one server's points) launch less, and the line after collection says
    how much less. Nothing is launched: ``--collect-only``."""
    pytester.makefile(".toml", llmperf=light(AB_AND_SWEEP))
    pytester.makepyfile(test_ab=AB_TEST)
    only_ab = run(pytester, "--collect-only")
    header = [line for line in only_ab.outlines if line.startswith("llmperf: plan: ")]
    assert len(header) == 1 and header[0].startswith("llmperf: plan: 2 servers × 1-3 launches")
    assert " + A/B new-vs-old 4 rounds of 2 launches" in header[0]
    (again,) = [line for line in only_ab.outlines if "plan for the" in line]
    assert again.startswith(
        "llmperf: plan for the 2 collected tests: 0 servers × 0 launches + A/B new-vs-old 4 "
        "rounds of 2 launches"
    )
    # the collected tests' minutes are below the header's: no sweep launches
    minutes = [re.search(r"about ([\d.]+)-([\d.]+) min", line) for line in (header[0], again)]
    assert all(m is not None for m in minutes)
    (h_lo, h_hi), (a_lo, a_hi) = (tuple(map(float, m.group(1, 2))) for m in minutes if m)
    assert a_lo < h_lo and a_hi < h_hi

    pytester.makepyfile(test_ab=SWEEP_TEST)
    one_server = run(pytester, "--collect-only", "-k", "old")
    (again,) = [line for line in one_server.outlines if "plan for the" in line]
    assert again.startswith("llmperf: plan for the 2 collected tests: 1 server × 1-3 launches,")
    assert "A/B" not in again
    # everything collected: the header's plan stands, no second line
    pytester.makepyfile(test_ab=SWEEP_TEST + "\n\n" + AB_TEST)
    everything = run(pytester, "--collect-only")
    assert "collected 6 items" in everything.stdout.str()
    assert not [line for line in everything.outlines if "plan for the" in line]


def test_under_xdist_the_plan_is_made_again_from_a_workers_collection(
    pytester: pytest.Pytester,
) -> None:
    """The controller collects nothing; the first worker's collected tests are what the second
    line plans for (``-k test_ab``: the A/B alone, no sweep), as without xdist."""
    pytester.makefile(".toml", llmperf=light(AB_AND_SWEEP))
    pytester.makepyfile(test_perf=SWEEP_TEST + "\n\n" + AB_TEST)
    result = run(pytester, "-n", "2", "-k", "test_ab")
    header = [line for line in result.outlines if line.startswith("llmperf: plan: ")]
    assert len(header) == 1 and header[0].startswith("llmperf: plan: 2 servers × 1-3 launches")
    again = [line for line in result.outlines if "plan for the" in line]
    assert len(again) == 1, again
    assert again[0].startswith(
        "llmperf: plan for the 2 collected tests: 0 servers × 0 launches + A/B new-vs-old 4 "
        "rounds of 2 launches"
    )
    # what the A/B took is set against the second plan, not the header's (its verdicts are
    # this box's noise, not what this test is about)
    took = TOOK.search(result.stdout.str())
    assert took is not None, result.stdout.str()[-3000:]
    planned = re.search(r"about ([\d.]+)-([\d.]+) min", again[0])
    assert planned is not None, again[0]
    assert took.group(3, 4) == planned.group(1, 2)
    assert_no_servers_left(pytester.path)
