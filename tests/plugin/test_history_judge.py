"""``judge_against = history``: a point judged against the window of its earlier runs in the
history database, through the real plugin path (pytest sessions on the simulator)."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import timedelta

import pytest

from pytest_llmperf.history.records import PointKey, PointRecord, RunRecord
from pytest_llmperf.history.store import HistoryStore

from .conftest import assert_no_servers_left, light

SUITE = """
[[server]]
name = "plain"
model = "sim/qwen-moe"
args = []

[sweep]
levels = [4]
input_len = 64
output_len = 64
metrics = ["output_throughput"]
judge_against = "history"
"""
TEST = "def test_sweep(llmperf_point):\n    llmperf_point.assert_baseline()\n"


def _only_run(store: HistoryStore) -> tuple[RunRecord, PointKey, float]:
    """The one stored run as a record to copy, its point's key and value."""
    (row,) = store.runs()
    point = row.provenance["servers"]["plain"]
    key = PointKey("plain", point["workload"], 4, point["hardware_key"])
    (first,) = store.series(key, "output_throughput")
    record = RunRecord(
        uuid="",
        started_at=row.started_at,
        finished_at=row.finished_at,
        source="pytest",
        hardware_key=row.hardware_key,
    )
    return record, key, first.value


def _point(key: PointKey, value: float) -> PointRecord:
    return PointRecord(
        key.config,
        key.workload_key,
        key.concurrency,
        key.hardware_key,
        "pass",
        True,
        metrics={"output_throughput": value},
        samples={"output_throughput": (value,)},
    )


def test_a_slower_run_after_a_bad_one_fails_against_its_history(pytester: pytest.Pytester):
    pytester.makefile(".toml", llmperf=light(SUITE))
    pytester.makepyfile(test_perf=TEST)
    db = pytester.path / "hist.sqlite"
    args = ["--llmperf-history", str(db), "-p", "no:randomly"]

    # No history yet: nothing to judge against, an explicit "insufficient data" (a warning,
    # the test passes), and the run is appended.
    first = pytester.runpytest_subprocess(*args, timeout=300)
    first.assert_outcomes(passed=1, warnings=1)
    out = first.stdout.str()
    assert "insufficient data: 0 earlier good runs in the window, 5 needed" in out, out[-3000:]

    # Eight more runs like it (within ±1 %), then one 30 % slower: a first bad run.
    with HistoryStore.open(str(db)) as store:
        record, key, value = _only_run(store)
        for i in range(1, 10):
            v = value * (0.7 if i == 9 else 1 + 0.01 * (-1) ** i * (i % 3) / 2)
            store.append(
                replace(
                    record,
                    uuid=f"prefilled-{i}",
                    started_at=record.started_at
                    + timedelta(milliseconds=i),  # before the next session
                    git_commit=f"c0ffee{i}",
                    points=(_point(key, v),),
                )
            )
        bad_id = store.series(key, "output_throughput")[-1].run_id

    # This run's server is 1.5x slower than the history's: the second bad run in a row.
    slow = pytester.runpytest_subprocess(
        *args, "--llmperf-sim-args", "--sim-time-scale 7.5", timeout=300
    )
    slow.assert_outcomes(failed=1)
    out = slow.stdout.str()
    sentence = (
        r"plain output_throughput at C=4: [\d.]+ tok/s is [\d.]+ % below the mean of the last "
        r"9 runs \(threshold [\d.]+ %[^)]*\); second bad run in a row → regression since "
        rf"run #{bad_id} \(commit c0ffee9\)"
    )
    assert re.search(sentence, out), out[-3000:]
    # The reports say it too: the HTML report's trend (its runs, "this run" last) and the PR
    # comment's "Against the history", from the same rule.
    results = pytester.path / "llmperf-results"
    page = (results / "report.html").read_text()
    trends = page[page.index("<h2>Trends</h2>") :]
    assert re.search(sentence, trends) and "this run" in trends and f"run #{bad_id}" in trends
    comment = (results / "pr-comment.md").read_text()
    assert "### Against the history" in comment and re.search(sentence, comment), comment
    with HistoryStore.open(str(db)) as store:
        assert store.series(key, "output_throughput")[-1].verdict == "fail"
    assert_no_servers_left(pytester.path)


def test_history_judge_needs_the_history_setting(pytester: pytest.Pytester):
    pytester.makefile(".toml", llmperf=light(SUITE))
    pytester.makepyfile(test_perf=TEST)
    result = pytester.runpytest_subprocess("-p", "no:randomly", timeout=120)
    assert result.ret != 0
    out = result.stdout.str() + result.stderr.str()
    assert "judge_against = history reads the history database" in out, out[-2000:]
    assert "--llmperf-history default" in out
