"""Servers that fail, end to end: a real pytest run against the real simulator with ``--sim-fault``.

Each test injects one fault into one config (``--llmperf-sim-args "name: --sim-fault ..."``) and
checks the exact outcome, the message a reviewer sees, what ``results.json`` counted, and that the
session still measured the healthy config. Timings are generous upper bounds on the whole run.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from pytest_llmperf.sim.profile import DEFAULT_PROFILE

from .conftest import (
    FAST,
    SWEEP_TEST,
    assert_no_servers_left,
    light,
    read_json,
    run,
    with_sweep,
)

# Two independent servers (no gate), mtp first both in the file and in the run order, so a fault
# in mtp shows the session going on to plain.
TWO_SERVERS = """
[[server]]
name = "mtp"
model = "sim/qwen-moe"
args = ["--speculative-algorithm", "NEXTN"]

[[server]]
name = "plain"
model = "sim/qwen-moe"
args = []

[sweep]
levels = [1, 4]
"""


# A traceback frame inside the plugin (server logs mention ``-m pytest_llmperf.sim``, not files).
PLUGIN_FRAME = re.compile(r"pytest_llmperf/\w+\.py")


@pytest.fixture
def two(pytester: pytest.Pytester) -> Any:
    pytester.makefile(".toml", llmperf=light(TWO_SERVERS))
    pytester.makepyfile(test_perf=SWEEP_TEST)
    yield pytester
    assert_no_servers_left(pytester.path)


def timed(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, float]:
    t0 = time.monotonic()
    result = run(pytester, *args)
    return result, time.monotonic() - t0


def levels_of(pytester: pytest.Pytester) -> dict[tuple[str, int], dict[str, Any]]:
    results = read_json(pytester.path / "llmperf-results" / "results.json")
    return {
        (s["config"], lv["max_concurrency"]): lv for s in results["sweeps"] for lv in s["levels"]
    }


def baseline_files(pytester: pytest.Pytester) -> list[str]:
    return sorted(p.name for p in (pytester.path / "baselines").rglob("*.json"))


def assert_no_plugin_traceback(result: pytest.RunResult) -> None:
    out = result.stdout.str() + result.stderr.str()
    assert not PLUGIN_FRAME.search(out), "a traceback into the plugin reached the report"


def test_server_exits_during_start(suite: pytest.Pytester) -> None:
    """plain dies before it is healthy: its points ERROR at once with exit code, log path and
    log tail; the gate says why; mtp is still measured and recorded."""
    result, elapsed = timed(
        suite, "--llmperf-update", "--llmperf-sim-args", "plain: --sim-fault crash-on-start"
    )
    print(f"crash-on-start: whole run {elapsed:.1f} s")
    assert elapsed < 30
    result.assert_outcomes(errors=2, failed=2, passed=2)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at setup of test_sweep[[]plain-C1[]]*",
            "config 'plain': server did not start: simulated server 'plain' "
            "(http://127.0.0.1:*) exited with code 1 after * s.",
            f"  log: {suite.path}/llmperf-results/logs/plain-*.log",
            "  last 30 log lines:",
            "*Simulated faults enabled: crash-on-start",
            "*RuntimeError: Not enough memory*(simulated: --sim-fault crash-on-start)",
            "*ERROR at setup of test_sweep[[]plain-C4[]]*",
            "config 'plain': server did not start: *",
        ]
    )
    # Startup took well under a second on the simulator: the message says how long it ran.
    took = re.search(r"exited with code 1 after ([0-9.]+) s\.", result.stdout.str())
    assert took is not None and float(took.group(1)) < 15
    # Launched once: both plain points name the same log, the file the server wrote.
    (log,) = (suite.path / "llmperf-results" / "logs").glob("plain-*.log")
    assert set(re.findall(r"  log: (\S+)", result.stdout.str())) == {str(log)}
    assert "crash-on-start" in log.read_text()
    # The gate cannot compare with a server that never started, and says so.
    result.stdout.fnmatch_lines(
        ["_*test_gate[[]mtp-wins-low-C-C1[]]*", "config 'plain': server did not start: *"]
    )
    assert baseline_files(suite) == ["mtp.json"]
    assert_no_plugin_traceback(result)


def test_server_never_healthy(two: pytest.Pytester) -> None:
    """plain listens but never becomes healthy: its points ERROR at the launch deadline."""
    result, elapsed = timed(
        two,
        "--llmperf-update",
        "--llmperf-launch-timeout",
        "3",
        "--llmperf-sim-args",
        "plain: --sim-fault hang-on-start",
    )
    print(f"hang-on-start: whole run {elapsed:.1f} s")
    assert elapsed < 40
    result.assert_outcomes(errors=2, passed=2)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at setup of test_sweep[[]plain-C1[]]*",
            "config 'plain': server did not start: simulated server 'plain' (http://127.0.0.1:*)"
            " did not become healthy within 3 s (last: /health_generate: HTTP 503).",
            f"  log: {two.path}/llmperf-results/logs/plain-*.log",
            "  last 30 log lines:",
            "*Simulated fault hang-on-start: warmup will never finish.",
        ]
    )
    assert baseline_files(two) == ["mtp.json"]
    assert_no_plugin_traceback(result)


# fault flag, outcomes of mtp's two points, the reason its C=1 message gives.
# The "*" after "invalid measurement: " lets another honest reason come first: on a loaded CI box
# the few ITL gaps of a cut C=1 point can arrive coalesced, and that check fires too.
MID_SWEEP_FAULTS = {
    "crash-after-tokens": (
        ["--sim-fault crash-after-tokens=40"],
        {"errors": 2},
        [
            "config 'mtp': the server exited with code 1 during the run; log: */mtp-*.log",
            "--- last lines of the server log ---",
            "*(simulated: --sim-fault crash-after-tokens=40, * tokens served)",
        ],
    ),
    "hang-stream": (
        ["--sim-fault hang-stream-after-tokens=40"],
        {"failed": 2},
        [
            "INVALID measurement (not a performance verdict, not recorded): mtp at C=1: invalid "
            "measurement: *1 of 2 requests failed (allowed 0); first error: request exceeded its "
            "total deadline of 3s*"
        ],
    ),
    "http-500": (
        ["--sim-fault http-500"],
        {"errors": 2},
        [
            "config 'mtp' at C=1: the level could not be measured after * s: SweepError: warm-up "
            "request to http://127.0.0.1:* failed: HTTP 500: Internal Server Error (simulated: "
            "--sim-fault http-500)"
        ],
    ),
    "cut-stream": (
        ["--sim-fault cut-stream-after-tokens=40"],
        {"failed": 2},
        [
            "INVALID measurement (not a performance verdict, not recorded): mtp at C=1: invalid "
            "measurement: *1 of 2 requests failed (allowed 0); first error: stream cut after * "
            "tokens: ConnectionLost: the server closed the connection before the response's end*"
        ],
    ),
    "stream-error": (
        ["--sim-fault stream-error-after-tokens=40"],
        {"failed": 2},
        [
            "INVALID measurement (not a performance verdict, not recorded): mtp at C=1: invalid "
            "measurement: *1 of 2 requests failed (allowed 0); first error: error in stream: "
            "Simulated engine error after * tokens (--sim-fault stream-error-after-tokens=40)*"
        ],
    ),
    # A cumulative completion_tokens that goes down: the counts are not a measurement.
    "count-down": (
        ["--sim-fault count-down-after-tokens=40"],
        {"failed": 2},
        [
            "INVALID measurement (not a performance verdict, not recorded): mtp at C=1: invalid "
            "measurement: *1 of 2 requests failed (allowed 0); first error: malformed stream: the "
            "cumulative completion_tokens went down from * to *; the server's token counts "
            "cannot be trusted*"
        ],
    ),
}


@pytest.mark.parametrize("fault", list(MID_SWEEP_FAULTS))
def test_server_fails_mid_sweep(two: pytest.Pytester, fault: str) -> None:
    """mtp breaks after 40 tokens (the 16-token warm-up, one 16-token request, then the fault):
    requests fail within their deadline, count as failed and never as tokens, mtp's points
    fail or error with the reason, nothing of mtp is recorded, and plain is measured after it.
    """
    flags, outcomes, lines = MID_SWEEP_FAULTS[fault]
    two.makefile(".toml", llmperf=with_sweep(TWO_SERVERS, "requests = 2", "request_timeout = 3"))
    result, elapsed = timed(
        two,
        "-v",
        "--llmperf-update",
        "--llmperf-sim-args",
        f"mtp: {' '.join(flags)}",
    )
    print(f"{fault}: whole run {elapsed:.1f} s")
    # A hung request costs its 3 s deadline: at most C=1's second request and C=4's wave.
    assert elapsed < 60
    result.assert_outcomes(passed=2, **outcomes)
    result.stdout.fnmatch_lines(lines)
    result.stdout.re_match_lines(
        [r".*test_sweep\[mtp-C1\] (FAILED|ERROR)", r".*test_sweep\[plain-C4\] PASSED"]
    )
    assert baseline_files(two) == ["plain.json"]
    assert_no_plugin_traceback(result)

    levels = levels_of(two)
    for c in (1, 4):
        assert levels[("plain", c)]["failed"] == 0
        assert levels[("plain", c)]["total_output_tokens"] == levels[("plain", c)]["completed"] * 16
    if fault == "http-500":
        # The warm-up request failed: no level was measured, so nothing is counted at all.
        assert ("mtp", 1) not in levels and ("mtp", 4) not in levels
        return
    c1 = levels[("mtp", 1)]
    assert (c1["completed"], c1["failed"]) == (1, 1)
    assert c1["total_output_tokens"] == 16  # the completed request only, never partial streams
    assert c1["errors"]
    if fault == "hang-stream":
        assert c1["errors"] == ["request exceeded its total deadline of 3s"]
        assert c1["duration"] < 3 + 10  # the hung request ended at its deadline
    if fault == "crash-after-tokens":
        assert "server exited with code 1 during this level" in c1["notes"]
        assert ("mtp", 4) not in levels  # C=4 was never started against a dead server
    else:
        c4 = levels[("mtp", 4)]
        assert (c4["completed"], c4["failed"], c4["total_output_tokens"]) == (0, 2, 0)


def test_port_taken_server_starts_on_another(two: pytest.Pytester) -> None:
    """A port someone else listens on (20000, where every session once started) is never
    chosen: ports come from the OS (tests/launch/test_ports.py races sessions for them)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as blocker:
        taken = None
        for port in range(20000, 21000):  # the first free one is the one the plugin would pick
            try:
                blocker.bind(("127.0.0.1", port))
            except OSError:
                continue
            taken = port
            break
        assert taken is not None
        blocker.listen()
        result, elapsed = timed(two, "--llmperf-update", "--llmperf-levels", "1")
    print(f"port taken: whole run {elapsed:.1f} s, port {taken} held")
    result.assert_outcomes(passed=2)
    results = read_json(two.path / "llmperf-results" / "results.json")
    ports = {int(s["server"]["url"].rsplit(":", 1)[1]) for s in results["sweeps"]}
    assert len(results["sweeps"]) == 2
    assert taken not in ports and len(ports) == 2
    logs = [p.read_text() for p in (two.path / "llmperf-results" / "logs").glob("*.log")]
    assert len(logs) == 2
    assert not any(f"--port {taken}" in text for text in logs)


class _AlwaysHealthy(BaseHTTPRequestHandler):
    """Another process's server: answers every GET with 200, like a healthy SGLang."""

    hits: list[str] = []

    def do_GET(self) -> None:
        type(self).hits.append(self.path)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_port_taken_between_check_and_bind_is_retried(two: pytest.Pytester, tmp_path: Path) -> None:
    """Another server takes the chosen port after the launcher checked it and before the
    simulator binds it, and answers health checks: the launcher must not take it for its own
    server. Its server fails to bind, and the launch is retried on another port."""
    _AlwaysHealthy.hits = []
    with (tmp_path / "pytest-output.txt").open("w+b") as output:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pytest", *FAST, "--llmperf-update", "-k", "plain"],
            cwd=two.path,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        foreign = None
        try:
            # The launcher writes this line just before it starts the simulator, which needs
            # a quarter of a second (imports) before it binds: take the port in between.
            deadline = time.monotonic() + 60
            port = None
            while port is None:
                assert time.monotonic() < deadline, "the launcher never started a server"
                for log in (two.path / "llmperf-results" / "logs").glob("plain-*.log"):
                    found = re.search(r"attempt 1 at http://127\.0\.0\.1:(\d+)", log.read_text())
                    port = int(found.group(1)) if found else None
                time.sleep(0.005)
            try:
                foreign = ThreadingHTTPServer(("127.0.0.1", port), _AlwaysHealthy)
            except OSError:
                pytest.skip("the simulator bound its port before the test could take it")
            threading.Thread(target=foreign.serve_forever, daemon=True).start()
            assert proc.wait(timeout=120) == 0
        finally:
            if foreign is not None:
                foreign.shutdown()
                foreign.server_close()
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
        output.seek(0)
        text = output.read().decode(errors="replace")
    assert "2 passed" in text, text
    assert "/health_generate" in _AlwaysHealthy.hits  # it answered, and was not believed
    (log,) = (two.path / "llmperf-results" / "logs").glob("plain-*.log")
    assert f"# llmperf: port {port} was taken; retrying" in log.read_text()
    results = read_json(two.path / "llmperf-results" / "results.json")
    (sweep,) = results["sweeps"]
    assert not sweep["server"]["url"].endswith(f":{port}")
    assert (
        sweep["server"]["sim_profile"] == DEFAULT_PROFILE
    )  # measured our simulator, not the impostor


def _not_json(result: pytest.RunResult) -> None:
    result.stdout.fnmatch_lines(
        ["*server_info answered 200 with a body that is not JSON (text/html*502 Bad Gateway*"]
    )
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    assert_no_plugin_traceback(result)


def test_server_info_that_is_not_json_launched(two: pytest.Pytester) -> None:
    """A proxy's error page where /server_info should be: that config's tests fail in one
    sentence naming the URL and what came back; the other config is measured."""
    result = run(two, "--llmperf-sim-args", "plain: --sim-fault server-info-html")
    _not_json(result)
    result.assert_outcomes(errors=2, failed=2)  # plain not measured; mtp measured, no baseline
    result.stdout.fnmatch_lines(["NOT MEASURED: plain: *not JSON*", "*mtp-C4*no baseline*"])


def test_server_info_that_is_not_json_attached(two: pytest.Pytester) -> None:
    import socket
    import subprocess
    import sys

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "pytest_llmperf.sim", "--model-path", "sim/qwen-moe"]
    cmd += ["--port", str(port), "--sim-fault", "server-info-html"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            proc.wait(timeout=0.1) if proc.poll() is not None else time.sleep(0.1)
        result = run(two, "--llmperf-url", f"http://127.0.0.1:{port}", "-k", "plain")
    finally:
        proc.kill()
        proc.wait(timeout=10)
    _not_json(result)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
