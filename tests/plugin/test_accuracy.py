"""The accuracy probe through pytest: a faster-but-wrong server must not pass.

A simulated server answers the generated items with ``--sim-accuracy``; with
``accuracy_items`` in the suite each point is held to the baseline's answers and each A/B pairs
the two servers' answers item by item (McNemar).
"""

from __future__ import annotations

import json
import re

import pytest

from .conftest import FAST, assert_no_servers_left, light

POINT_SUITE = """
[[server]]
name = "srv"
model = "sim/qwen-moe"

[sweep]
levels = [1]
accuracy_items = 200
"""

AB_SUITE = """
[[server]]
name = "old"
model = "sim/qwen-moe"

[[server]]
name = "new"
model = "sim/qwen-moe"

[sweep]
levels = [1]
accuracy_items = 200

[[ab]]
candidate = "new"
reference = "old"
rounds = 2
tolerance = 0.5
"""

SENTENCE = re.compile(
    r"accuracy: (\d+) of 200 generated items right on (\S+(?: run)?) \(0\.\d\d, 95 % CI "
    r"0\.\d\d-0\.\d\d\) against (\d+) of 200 on (.+?) \(0\.\d\d, 95 % CI 0\.\d\d-0\.\d\d\): a drop "
    r"of (\d+) points, beyond the interval \(McNemar p=\S+\) \u2192 fail"
)


def _run(pytester: pytest.Pytester, sim: str, *extra: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        *FAST,
        "--llmperf-sim-args",
        sim,
        "--llmperf-output-dir",
        str(pytester.path / "out"),
        "-W",
        "default",
        *extra,
        timeout=300,
    )


def test_point_accuracy_against_the_baseline(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", llmperf=light(POINT_SUITE))
    pytester.makepyfile(test_p="def test_p(llmperf_point):\n    llmperf_point.check()\n")
    rec = _run(pytester, "--sim-time-scale 5 --sim-accuracy 0.8", "--llmperf-update")
    rec.assert_outcomes(passed=1)
    files = list((pytester.path / "baselines").rglob("srv.json"))
    assert len(files) == 1, rec.stdout.str()[-2000:]
    entry = next(iter(json.loads(files[0].read_text())["workloads"].values()))["1"]
    acc = entry["accuracy"]
    assert acc["n"] == 200 and len(acc["bitmap"]) == 200 and acc["items_version"] >= 1
    assert 140 <= acc["correct"] <= 180  # 0.8 of 200, drawn per question

    same = _run(pytester, "--sim-time-scale 5 --sim-accuracy 0.8")
    same.assert_outcomes(passed=1)
    checks = json.loads((pytester.path / "out" / "results.json").read_text())["checks"]
    assert checks[0]["accuracy"]["verdict"] == "pass", checks[0]["accuracy"]["message"]

    worse = _run(pytester, "--sim-time-scale 5 --sim-accuracy 0.6")
    worse.assert_outcomes(failed=1)
    m = SENTENCE.search(worse.stdout.str())
    assert m is not None, worse.stdout.str()[-3000:]
    assert m[2] == "this run" and int(m[3]) == acc["correct"] and m[4] == "the baseline"
    assert int(m[5]) == round((int(m[3]) - int(m[1])) / 2)
    assert_no_servers_left(pytester.path)


def test_ab_same_accuracy_passes_lower_fails(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", llmperf=light(AB_SUITE))
    pytester.makepyfile(test_ab="def test_ab(llmperf_ab):\n    llmperf_ab.check()\n")
    same = _run(pytester, "--sim-time-scale 5 --sim-accuracy 0.8")
    same.assert_outcomes(passed=1)
    point = json.loads((pytester.path / "out" / "ab.json").read_text())["points"][0]
    assert point["accuracy"]["verdict"] == "pass", point["accuracy"]["message"]
    assert point["accuracy"]["new"]["bitmap"] == point["accuracy"]["old"]["bitmap"]

    worse = _run(pytester, "--sim-time-scale 5 --sim-accuracy 0.8; new: --sim-accuracy 0.6")
    worse.assert_outcomes(failed=1)
    out = worse.stdout.str()
    m = SENTENCE.search(out)
    assert m is not None, out[-3000:]
    assert m[2] == "new" and m[4] == "old" and int(m[5]) >= 10
    point = json.loads((pytester.path / "out" / "ab.json").read_text())["points"][0]
    assert point["accuracy"]["verdict"] == "fail"
    assert "accuracy" in out and "\u2192 fail" in out  # the summary's A/B accuracy line
    assert_no_servers_left(pytester.path)


def test_ab_at_chance_is_inconclusive_with_a_warning(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", llmperf=light(AB_SUITE))
    pytester.makepyfile(test_ab="def test_ab(llmperf_ab):\n    llmperf_ab.check()\n")
    result = _run(pytester, "--sim-time-scale 5")  # no --sim-accuracy: a random model
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert (
        "accuracy probe: old side scored 0 of 200 \u2014 the model answers at chance (random "
        "weights?); the accuracy check is inconclusive"
    ) in out, out[-3000:]
    point = json.loads((pytester.path / "out" / "ab.json").read_text())["points"][0]
    assert point["accuracy"]["verdict"] == "inconclusive" and point["accuracy"]["chance"]
    assert_no_servers_left(pytester.path)


def test_turning_the_probe_on_asks_to_record_its_answers(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", llmperf=light(POINT_SUITE.replace("accuracy_items = 200", "")))
    pytester.makepyfile(test_p="def test_p(llmperf_point):\n    llmperf_point.check()\n")
    sim = "--sim-time-scale 5 --sim-accuracy 0.9"
    _run(pytester, sim, "--llmperf-update").assert_outcomes(passed=1)
    baseline = next((pytester.path / "baselines").rglob("srv.json"))
    assert '"accuracy"' not in baseline.read_text()

    pytester.makefile(".toml", llmperf=light(POINT_SUITE))
    missing = _run(pytester, sim)
    missing.assert_outcomes(failed=1)
    out = missing.stdout.str()
    assert "no answers recorded for the baseline to compare with" in out, out[-3000:]
    assert "record it: " in out and "--llmperf-update" in out

    _run(pytester, sim, "--llmperf-update").assert_outcomes(passed=1)
    entry = next(iter(json.loads(baseline.read_text())["workloads"].values()))["1"]
    assert entry["accuracy"]["n"] == 200 and entry["accuracy"]["correct"] >= 160
    _run(pytester, sim).assert_outcomes(passed=1)
    assert_no_servers_left(pytester.path)
