"""No server outlives the session, end to end: pytest stopped by SIGTERM, Ctrl-C or SIGKILL.

A real ``pytest`` runs in a subprocess with a long workload; once its simulated server is
measuring a level, the test signals pytest and waits (bounded) until no server whose working
directory is the run's directory is left. SIGTERM and Ctrl-C are handled inside pytest; SIGKILL
leaves it to the launcher's watchdog process. A crashing xdist worker is the same as SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, TypeVar

import psutil
import pytest

from .conftest import SWEEP_TEST, servers_under

T = TypeVar("T")

TWO_SERVERS = """
[[server]]
name = "plain"
model = "sim/qwen-moe"
args = []

[[server]]
name = "mtp"
model = "sim/qwen-moe"
args = ["--speculative-algorithm", "NEXTN"]

[sweep]
levels = [1]
"""


# ``python -m pytest``, except that Ctrl-C raises KeyboardInterrupt even if this test runs
# where SIGINT is ignored (background jobs), which a child process would otherwise inherit.
PYTEST = (
    "import signal, sys, pytest; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.exit(pytest.main(sys.argv[1:]))"
)
# 4000 output tokens at ~120 tok/s: each request takes half a minute, far longer than a test.
LONG = [
    "-p",
    "no:cacheprovider",
    "--llmperf-input-len",
    "64",
    "--llmperf-output-len",
    "4000",
    "--llmperf-update",
]
START_TIMEOUT_S = 60.0
CLEANUP_TIMEOUT_S = 30.0  # the launcher's grace period is 15 s; the simulator needs far less


def wait_for(what: str, timeout: float, probe: Callable[[], T | None]) -> T:
    """Poll ``probe`` until it returns something truthy, at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout:g} s waiting for {what}")
        time.sleep(0.1)


def measuring(path: Path, count: int) -> list[psutil.Process] | None:
    """The run's servers once ``count`` of them are measuring a level (cache flushed)."""
    logs = list((path / "llmperf-results" / "logs").glob("*.log"))
    flushed = [p for p in logs if "Cache flushed successfully" in p.read_text(errors="replace")]
    servers = servers_under(path)
    return servers if len(flushed) >= count and len(servers) >= count else None


def watchdogs_of(pid: int) -> list[psutil.Process]:
    """The launcher watchdog processes started by process ``pid``."""
    out = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if any("_watchdog_main" in part for part in cmd) and cmd[-1:] == [str(pid)]:
            out.append(proc)
    return out


def start(
    pytester: pytest.Pytester, output: IO[bytes], *args: str, suite: str = TWO_SERVERS
) -> subprocess.Popen[bytes]:
    pytester.makefile(".toml", llmperf=suite)
    pytester.makepyfile(test_perf=SWEEP_TEST)
    return subprocess.Popen(
        [sys.executable, "-c", PYTEST, *LONG, *args],
        cwd=pytester.path,
        stdin=subprocess.DEVNULL,
        stdout=output,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Never leave the pytest subprocess behind, whatever the test asserted."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=CLEANUP_TIMEOUT_S)


@pytest.mark.parametrize(
    ("sig", "returncode"),
    [
        (signal.SIGTERM, -signal.SIGTERM),
        (signal.SIGINT, pytest.ExitCode.INTERRUPTED),
        (signal.SIGKILL, -signal.SIGKILL),
    ],
    ids=["SIGTERM", "SIGINT", "SIGKILL"],
)
def test_signal_to_pytest_leaves_no_server(
    pytester: pytest.Pytester, tmp_path: Path, sig: signal.Signals, returncode: int
) -> None:
    with (tmp_path / "pytest-output.txt").open("w+b") as output:
        proc = start(pytester, output, "-k", "plain")
        try:
            (server,) = wait_for(
                "the server to measure", START_TIMEOUT_S, lambda: measuring(pytester.path, 1)
            )
            watchdogs = watchdogs_of(proc.pid)
            assert len(watchdogs) == 1
            t0 = time.monotonic()
            proc.send_signal(sig)
            _, alive = psutil.wait_procs([server], timeout=CLEANUP_TIMEOUT_S)
            elapsed = time.monotonic() - t0
            assert not alive, f"server {server.pid} outlived pytest after {sig.name}"
            assert proc.wait(timeout=CLEANUP_TIMEOUT_S) == returncode
            # The watchdog ends too (after stopping the server itself on SIGKILL).
            _, left = psutil.wait_procs(watchdogs, timeout=CLEANUP_TIMEOUT_S)
            assert not left
            assert not servers_under(pytester.path)
        finally:
            stop(proc)
        output.seek(0)
        text = output.read().decode(errors="replace")
    print(f"{sig.name}: server gone {elapsed:.1f} s after the signal")
    if sig == signal.SIGINT:
        assert "KeyboardInterrupt" in text
    assert elapsed < CLEANUP_TIMEOUT_S


def test_crashing_xdist_worker_leaves_no_server(pytester: pytest.Pytester, tmp_path: Path) -> None:
    """SIGKILL one worker: its watchdog stops its server; then Ctrl-C ends the rest."""
    with (tmp_path / "pytest-output.txt").open("w+b") as output:
        proc = start(pytester, output, "-n", "2")
        try:
            servers = wait_for(
                "both servers to measure", START_TIMEOUT_S, lambda: measuring(pytester.path, 2)
            )
            assert len(servers) == 2
            victim, survivor = servers
            keeper = psutil.Process(victim.ppid())  # the launch's keeper (its subreaper)
            worker = psutil.Process(keeper.ppid())
            assert worker.ppid() == proc.pid  # the xdist worker that launched it
            t0 = time.monotonic()
            worker.kill()
            _, alive = psutil.wait_procs([victim], timeout=CLEANUP_TIMEOUT_S)
            elapsed = time.monotonic() - t0
            assert not alive, "the crashed worker's server outlived it"
            assert survivor.is_running()
            proc.send_signal(signal.SIGINT)
            _, alive = psutil.wait_procs([survivor], timeout=CLEANUP_TIMEOUT_S)
            assert not alive, "the other worker's server outlived Ctrl-C"
            proc.wait(timeout=CLEANUP_TIMEOUT_S)
            assert not servers_under(pytester.path)
        finally:
            stop(proc)
        output.seek(0)
        text = output.read().decode(errors="replace")
    print(f"worker crash: its server gone {elapsed:.1f} s after SIGKILL")
    pytest.LineMatcher(text.splitlines()).fnmatch_lines(
        [
            "replacing crashed worker gw*",
            "worker 'gw*' crashed while running 'test_perf.py::test_sweep[[]*-C1[]]*'",
            "*KeyboardInterrupt*",
        ]
    )


def shards_of(pid: int) -> list[psutil.Process] | None:
    """pytest's client-shard processes (multiprocessing spawn children), once two run."""
    try:
        kids = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return None
    shards = [kid for kid in kids if "spawn_main" in command_of(kid)]
    return shards if len(shards) >= 2 else None


def command_of(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:  # exited (or a zombie) meanwhile
        return ""


@pytest.mark.parametrize(
    "sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT], ids=["SIGKILL", "SIGTERM", "SIGINT"]
)
def test_signal_to_pytest_with_client_processes_leaves_nothing(
    pytester: pytest.Pytester, tmp_path: Path, sig: signal.Signals
) -> None:
    """Shards, the resource tracker, the server and the watchdog: everything pytest started
    is gone promptly after the signal (ps shows nothing of the session)."""
    with (tmp_path / "pytest-output.txt").open("w+b") as output:
        proc = start(
            pytester,
            output,
            "-k",
            "plain",
            "--llmperf-levels",
            "4",
            "--llmperf-client-processes",
            "2",
        )
        try:
            wait_for("the server to measure", START_TIMEOUT_S, lambda: measuring(pytester.path, 1))
            wait_for("two client processes", START_TIMEOUT_S, lambda: shards_of(proc.pid))
            session = psutil.Process(proc.pid).children(recursive=True) + watchdogs_of(proc.pid)
            assert any("resource_tracker" in command_of(p) for p in session)
            t0 = time.monotonic()
            proc.send_signal(sig)
            proc.wait(timeout=CLEANUP_TIMEOUT_S)
            _, alive = psutil.wait_procs(session, timeout=CLEANUP_TIMEOUT_S)
            elapsed = time.monotonic() - t0
            assert not alive, f"outlived pytest after {sig.name}: {[command_of(p) for p in alive]}"
        finally:
            stop(proc)
    print(f"{sig.name} with 2 client processes: everything gone {elapsed:.1f} s after it")
    # The level's requests take half a minute each: a prompt stop is far below that.
    assert elapsed < 20.0
