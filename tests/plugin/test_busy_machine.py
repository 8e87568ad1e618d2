"""A machine too busy to measure, through the whole plugin: re-measured, then said once.

"Busy" is injected at the monitor boundary (the generated project's conftest wraps the
client's ``LoopMonitor``): the first N levels report what a starved load generator measures
(its loop lagging 40 ms p99 while it used 5 % of a core, the machine 100 % busy), so the
outcome does not depend on what else this 2-core box is doing. Everything else is real: the
simulated server, the client, the checks, the summary and the exit status.
"""

from __future__ import annotations

import json

import pytest

from .conftest import LIGHT, SWEEP_TEST, assert_no_servers_left, with_sweep
from .conftest import run as _run


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """A light client load (conftest.LIGHT): the plugin's real limits hold on a shared box."""
    return _run(pytester, *LIGHT, *args)


SUITE = """
[[server]]
name = "plain"
model = "sim/qwen-moe"
args = []

[sweep]
levels = [4]
# these tests pin the fixed re-runs (max_reruns); the sequential loop budgets a busy point's
# retries by launch_budget instead (tests/run/test_sequential_loop.py)
sequential = false
"""

GATE_SUITE = (
    SUITE
    + """
[[server]]
name = "mtp"
model = "sim/qwen-moe"
args = ["--speculative-algorithm", "NEXTN"]

[[gate]]
name = "mtp-wins"
config = "mtp"
reference = "plain"
factor = 1.0
"""
)

GATE_TEST = """
def test_gate(llmperf_gate):
    llmperf_gate.check()
"""

# The first FAKE_BUSY_LEVELS measured levels see a busy machine; FAKE_CLIENT_CPU is what the
# client itself used (5 %: others held the CPU; 95 %: the client is the bottleneck).
BUSY_MONITOR = """
import os

import pytest_llmperf.core.sweep as sweep
from pytest_llmperf.core.monitor import LoopMonitor, judge_health

BUSY = int(os.environ["FAKE_BUSY_LEVELS"])
CPU = float(os.environ.get("FAKE_CLIENT_CPU", "5"))
CALLS = []


class BusyMachine(LoopMonitor):
    async def stop(self):
        real = await super().stop()
        CALLS.append(1)
        if len(CALLS) > BUSY:
            return real
        busy = judge_health([40.0] * 200, CPU, real.transport)
        return busy.model_copy(update={"system_cpu_percent": 100.0, "cpus": 2})


sweep.LoopMonitor = BusyMachine
"""


@pytest.fixture
def busy_suite(pytester: pytest.Pytester):
    pytester.makefile(".toml", llmperf=SUITE)
    pytester.makepyfile(test_perf=SWEEP_TEST, conftest=BUSY_MONITOR)
    yield pytester
    assert_no_servers_left(pytester.path)


def _samples(pytester: pytest.Pytester, config: str, c: int) -> list[dict]:
    data = json.loads((pytester.path / "llmperf-results" / "results.json").read_text())
    (sweep,) = [s for s in data["sweeps"] if s["config"] == config]
    first = [lv for lv in sweep["levels"] if lv["max_concurrency"] == c]
    return first + sweep.get("repeats", {}).get(str(c), [])


def _busy_lines(result: pytest.RunResult) -> list[str]:
    return [line for line in result.outlines if line.startswith("TOO BUSY:")]


def test_a_machine_busy_throughout_is_remeasured_then_said_once(busy_suite, monkeypatch):
    monkeypatch.setenv("FAKE_BUSY_LEVELS", "100")
    result = run(busy_suite, "-rs")
    result.assert_outcomes(skipped=1)  # undecided: not failed, not passed
    # invalid=fail (the default): an unmeasured point never exits 0
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    (line,) = _busy_lines(result)
    assert "machine too busy to measure 1 point (plain C=4), each tried 3 times" in line
    assert "loop lag p99 40 ms, limit 10 ms" in line
    assert "machine 100 % busy on 2 CPUs" in line
    assert "exit status 1 (--llmperf-invalid=fail)" in line
    # the short skip reason, not the 400-character invalid sentence per sample
    skip = [ln for ln in result.outlines if ln.startswith("SKIPPED")]
    assert skip and "machine too busy to measure plain C=4 (3 tries)" in skip[0]
    assert "INVALID measurement" not in result.stdout.str()
    assert len(_samples(busy_suite, "plain", 4)) == 3  # measured once + max_reruns 2


def test_invalid_skip_lets_a_busy_run_exit_zero(busy_suite, monkeypatch):
    monkeypatch.setenv("FAKE_BUSY_LEVELS", "100")
    busy_suite.makefile(".toml", llmperf=with_sweep(SUITE, "max_reruns = 1"))
    result = run(busy_suite, "--llmperf-invalid=skip")
    result.assert_outcomes(skipped=1)
    assert result.ret == pytest.ExitCode.OK
    (line,) = _busy_lines(result)
    assert "each tried 2 times" in line and "(--llmperf-invalid=skip)" in line


def test_a_busy_moment_is_remeasured_and_then_judged(busy_suite, monkeypatch):
    monkeypatch.setenv("FAKE_BUSY_LEVELS", "1")
    result = run(busy_suite, "--llmperf-update")
    result.assert_outcomes(passed=1)  # the re-measured sample is valid and is recorded
    assert _busy_lines(result) == []
    samples = _samples(busy_suite, "plain", 4)
    assert len(samples) == 2
    assert samples[0]["client"]["loop_lag_p99_ms"] == 40.0  # the starved one, kept in results
    recorded = next((busy_suite.path / "baselines").rglob("*.json")).read_text()
    assert '"invalid_left_out": 1' in recorded  # only the valid sample is in the entry


def test_a_client_that_is_itself_the_bottleneck_stays_invalid(busy_suite, monkeypatch):
    monkeypatch.setenv("FAKE_BUSY_LEVELS", "100")
    monkeypatch.setenv("FAKE_CLIENT_CPU", "95")
    result = run(busy_suite)
    result.assert_outcomes(failed=1)
    assert _busy_lines(result) == []
    result.stdout.fnmatch_lines(["*INVALID measurement*client processes*"])
    assert len(_samples(busy_suite, "plain", 4)) == 1  # more tries would not help


def test_a_gate_whose_side_is_starved_is_undecided(pytester: pytest.Pytester, monkeypatch):
    pytester.makefile(".toml", llmperf=with_sweep(GATE_SUITE, "max_reruns = 1"))
    pytester.makepyfile(test_perf=GATE_TEST, conftest=BUSY_MONITOR)
    monkeypatch.setenv("FAKE_BUSY_LEVELS", "100")
    result = run(pytester)
    result.assert_outcomes(skipped=1)
    (line,) = _busy_lines(result)
    assert "2 points (mtp C=4, plain C=4)" in line
    assert_no_servers_left(pytester.path)
