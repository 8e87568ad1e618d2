"""What green means, and what a point left inconclusive does (``--llmperf-undecided``).

A real pytest run on the simulator records a one-point baseline; the baseline's spread is then
widened on purpose (std 40 % over three launches, the mean unchanged), so the next run cannot
resolve its 5 % tolerance: the point is inconclusive with its minimum detectable effect. Each
value of the setting is checked through the exit status, the terminal summary, results.json,
the step summary and the JUnit XML.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_llmperf.verdicts.compare import EXIT_UNDECIDED

from .conftest import SWEEP_TEST, assert_no_servers_left, light, read_json, run

ONE = """
[[server]]
name = "plain"
model = "sim/qwen-moe"
args = []

[sweep]
levels = [1]
metrics = ["output_throughput"]
max_reruns = 0
launch_budget = 2  # the sequential rule's looks: one more launch, then undecided
"""


def _widen(baseline: Path, spread: float) -> None:
    """output_throughput's recorded spread set to ``spread`` × mean over 3 launches."""
    data = json.loads(baseline.read_text())
    for points in data["workloads"].values():
        for entry in points.values():
            m = entry["metrics"]["output_throughput"]
            m["std"] = spread * m["mean"]
            m["n"] = 3
            m["samples"] = m["launches"] = m["within_se"] = None
            m["launch_residual"] = None
    baseline.write_text(json.dumps(data, indent=1))


@pytest.fixture
def recorded(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makefile(".toml", llmperf=light(ONE))
    pytester.makepyfile(test_perf=SWEEP_TEST)
    run(pytester, "--llmperf-update").assert_outcomes(passed=1)
    yield pytester
    assert_no_servers_left(pytester.path)


@pytest.fixture
def noisy(recorded: pytest.Pytester) -> pytest.Pytester:
    (baseline,) = (recorded.path / "baselines").rglob("plain.json")
    _widen(baseline, 0.4)
    return recorded


def _junit(path: Path) -> tuple[ET.Element, dict[str, str]]:
    case = ET.parse(path).getroot().find(".//testcase")
    assert case is not None
    props = {p.get("name", ""): p.get("value", "") for p in case.iter("property")}
    return case, props


def test_a_recorded_point_says_recorded_in_results_and_junit(pytester: pytest.Pytester) -> None:
    """What the terminal says of a point ``--llmperf-update`` wrote, the files say too (not the
    comparison against the missing entry that preceded it)."""
    pytester.makefile(".toml", llmperf=light(ONE))
    pytester.makepyfile(test_perf=SWEEP_TEST)
    result = run(pytester, "--llmperf-update", "--junitxml", "junit.xml")
    result.assert_outcomes(passed=1)
    (check,) = read_json(pytester.path / "llmperf-results" / "results.json")["checks"]
    assert check["verdict"] == "recorded"
    assert check["green_means"] == "recorded at C=1: this run's samples are the baseline now"
    _, props = _junit(pytester.path / "junit.xml")
    assert props["llmperf.verdict"] == "recorded"
    assert props["llmperf.green_means"] == check["green_means"]
    assert_no_servers_left(pytester.path)


def test_a_pass_says_what_it_could_have_missed(
    recorded: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = recorded.path / "step.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = run(recorded, "--junitxml", "junit.xml")
    result.assert_outcomes(passed=1)
    assert result.ret == 0
    (check,) = read_json(recorded.path / "llmperf-results" / "results.json")["checks"]
    assert check["verdict"] == "pass"
    # one launch against a one-launch baseline, noise assumed 2 %: at least 5 % + 3.6 × 2.8 %
    # = 15 %, more by both samples' within-run errors
    mde = check["missable"]["output_throughput"]
    assert 0.15 < mde < 0.5
    sentence = (
        f"pass: no regression larger than {100 * mde:.0f} % in output_throughput at C=1 "
        "(n=1 launch)"
    )
    assert check["green_means"] == sentence
    result.stdout.fnmatch_lines(["what green means:", f"- plain: {sentence}"])
    assert f"### what green means\n- plain: {sentence}" in summary.read_text()
    case, props = _junit(recorded.path / "junit.xml")
    assert case.find("skipped") is None and case.find("failure") is None
    assert props["llmperf.verdict"] == "pass"
    assert props["llmperf.green_means"] == check["green_means"]
    assert "INCONCLUSIVE:" not in result.stdout.str()


def test_warn_passes_with_one_warning_for_the_session(noisy: pytest.Pytester) -> None:
    result = run(noisy, "--junitxml", "junit.xml")
    result.assert_outcomes(passed=1, warnings=1)
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "*plain: inconclusive at C=1 (n=2 launches): the change (output_throughput *) is "
            "within the noise; this run could only have caught a regression larger than "
            "* % in output_throughput*",
            "INCONCLUSIVE: 1 check inconclusive after re-runs (plain C=1): within the noise, "
            "neither pass nor fail; they pass (--llmperf-undecided=warn)*",
        ]
    )
    # one warning for the session (assert_outcomes counted it), none per test
    result.stdout.fnmatch_lines(
        ["*undecided.py:*: LLMPerfInconclusiveWarning: pytest-llmperf: 1 check*"]
    )
    (check,) = read_json(noisy.path / "llmperf-results" / "results.json")["checks"]
    assert check["verdict"] == "inconclusive"
    assert check["green_means"].startswith("inconclusive at C=1")
    # 5 % + 3.6 × 40 % × √(1 + 1/3): nothing below about 170 % could have been caught
    assert check["missable"]["output_throughput"] > 1.0
    case, props = _junit(noisy.path / "junit.xml")
    assert case.find("skipped") is None and case.find("failure") is None
    assert props["llmperf.verdict"] == "inconclusive"
    assert props["llmperf.green_means"] == check["green_means"]


def test_fail_fails_the_test(noisy: pytest.Pytester) -> None:
    result = run(noisy, "--llmperf-undecided", "fail", "--junitxml", "junit.xml")
    result.assert_outcomes(failed=1)
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*INCONCLUSIVE (--llmperf-undecided=fail): inconclusive at C=1*"])
    case, props = _junit(noisy.path / "junit.xml")
    failure = case.find("failure")
    assert failure is not None and "within the noise" in failure.get("message", "")
    assert props["llmperf.verdict"] == "inconclusive"


def test_exit_skips_the_test_and_exits_with_its_own_status(
    noisy: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLMPERF_UNDECIDED", "exit")  # the environment sets it as well
    result = run(noisy, "--junitxml", "junit.xml")
    result.assert_outcomes(skipped=1)
    assert result.ret == EXIT_UNDECIDED == 6
    result.stdout.fnmatch_lines(["INCONCLUSIVE: 1 check *exit status 6 when nothing failed*"])
    case, props = _junit(noisy.path / "junit.xml")
    skipped = case.find("skipped")
    assert skipped is not None and "could only have caught" in skipped.get("message", "")
    assert props["llmperf.verdict"] == "inconclusive"
    # under --llmperf-bisect, "could not decide" is git bisect's 125 (any other code is "bad")
    assert run(noisy, "--llmperf-bisect").ret == 125


def test_a_bad_value_names_the_setting(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", llmperf=ONE)
    pytester.makepyfile(test_perf=SWEEP_TEST)
    result = run(pytester, "--llmperf-undecided", "maybe")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--llmperf-undecided=maybe*"])
