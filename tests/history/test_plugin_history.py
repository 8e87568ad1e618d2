"""The history setting through the real plugin: a pytest session appends one run with its
points (under xdist too, written once by the controller); a database that cannot be reached
is a warning that never shows the URL's password."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_llmperf.history.records import PointKey
from pytest_llmperf.history.store import HistoryStore
from tests.plugin.conftest import SWEEP_TEST, assert_no_servers_left, light, run

SUITE = """
[[server]]
name = "plain"
model = "sim/qwen-moe"
args = []

[sweep]
levels = [1, 2]
"""
HW = "sim-fast-moe"


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makefile(".toml", llmperf=light(SUITE))
    pytester.makepyfile(test_perf=SWEEP_TEST)
    return pytester


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["no-xdist", "xdist-2"])
def test_a_session_appends_one_run_with_its_points(
    suite: pytest.Pytester, tmp_path: Path, xdist: list[str]
) -> None:
    db = tmp_path / "history.sqlite"
    result = run(suite, *xdist, "--llmperf-update", f"--llmperf-history={db}")
    result.assert_outcomes(passed=2)
    lines = [line for line in result.outlines if line.startswith("history: ")]
    assert lines == [f"history: run #1 appended to sqlite:///{db} (2 points)"], lines
    with HistoryStore.open(str(db)) as store:
        (row,) = store.runs()
        assert (row.source, row.hardware_key, row.points) == ("pytest", HW, 2)
        workload = row.provenance["servers"]["plain"]["workload"]
        for c in (1, 2):
            (point,) = store.series(PointKey("plain", workload, c, HW), "output_throughput")
            assert point.run_id == row.id and point.value > 0
            assert point.samples and point.verdict == "recorded"
    # A second session is a second run, whatever its verdicts: the box's load may fail a
    # 4-request point (CI saw C=2's TTFT at +77 %), and the history keeps what the session said.
    result = run(suite, *xdist, f"--llmperf-history={db}")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == 2, outcomes
    assert f"history: run #2 appended to sqlite:///{db} (2 points)" in result.outlines
    with HistoryStore.open(str(db)) as store:
        second, first = store.runs()  # newest first
        assert first.id == row.id
        verdicts = []
        for c in (1, 2):
            points = store.series(PointKey("plain", workload, c, HW), "output_throughput")
            (point,) = [p for p in points if p.run_id == second.id]
            verdicts.append(point.verdict)
    failing = {"fail", "invalid", "missing"}
    assert sum(v in failing for v in verdicts) == outcomes.get("failed", 0), verdicts
    assert_no_servers_left(suite.path)


def test_default_appends_to_the_file_under_the_rootdir(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = run(suite, "--llmperf-update", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    assert not any(line.startswith("history:") for line in result.outlines)  # off by default
    monkeypatch.setenv("LLMPERF_HISTORY", "default")
    result = run(suite)
    result.assert_outcomes(passed=2)
    db = suite.path / ".llmperf" / "history.sqlite"
    assert f"history: run #1 appended to sqlite:///{db} (2 points)" in result.outlines


SECRET = "Hist0ry-pa55word"


def test_an_unreachable_database_is_a_warning_without_the_password(
    suite: pytest.Pytester, free_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLMPERF_HISTORY_PASSWORD", SECRET)
    url = f"postgresql://bob@127.0.0.1:{free_port}/llmperf"
    result = run(suite, "--llmperf-update", f"--llmperf-history={url}", "-rw")
    result.assert_outcomes(passed=2, warnings=1)
    shown = f"postgresql+psycopg://bob:***@127.0.0.1:{free_port}/llmperf"
    text = result.stdout.str() + result.stderr.str()
    assert f"WARNING: history not appended: history ({shown})" in text
    assert SECRET not in text
    for path in suite.path.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


@pytest.fixture
def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
