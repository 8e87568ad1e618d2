"""A ``command`` server that escapes everything but its keeper dies with the session.

The command double-forks, calls ``setsid`` and re-executes the simulator with an EMPTY
environment (no launch tag, another session, re-parented): only the launch's keeper (a child
subreaper) still holds it. The session runs through the real plugin; then it ends normally,
or pytest is SIGKILLed (only the watchdog is left to act), or SIGTERMed / Ctrl-C'd.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest

from .conftest import SWEEP_TEST, run
from .test_signals import (
    CLEANUP_TIMEOUT_S,
    START_TIMEOUT_S,
    command_of,
    start,
    stop,
    wait_for,
    watchdogs_of,
)

FIXTURE = Path(__file__).parents[1] / "launch" / "fixtures" / "env_clearing_daemon.py"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="subreaper: Linux")


def daemon_suite(pid_file: Path) -> str:
    command = [sys.executable, str(FIXTURE), "{port}", "{host}", str(pid_file), "foreground"]
    quoted = ", ".join(f'"{part}"' for part in command)
    return f"""
[[server]]
name = "daemon"
model = "sim/qwen-moe"
command = [{quoted}]
health = "/health_generate"

[sweep]
levels = [1]
"""


def daemon_measuring(path: Path, pid_file: Path) -> psutil.Process | None:
    """The env-clearing daemon, once it is measuring a level (cache flushed)."""
    logs = list((path / "llmperf-results" / "logs").glob("*.log"))
    if not pid_file.exists() or not pid_file.read_text():
        return None
    if not any("Cache flushed successfully" in p.read_text(errors="replace") for p in logs):
        return None
    daemon = psutil.Process(int(pid_file.read_text()))
    assert daemon.environ() == {}, "the fixture must clear the daemon's environment"
    return daemon


def test_env_clearing_daemon_is_stopped_by_a_normal_teardown(pytester: pytest.Pytester) -> None:
    pid_file = pytester.path / "daemon.pid"
    pytester.makefile(".toml", llmperf=daemon_suite(pid_file))
    pytester.makepyfile(test_perf=SWEEP_TEST)
    result = run(pytester, "--llmperf-update")
    assert result.ret == 0, result.stdout.str()
    daemon = int(pid_file.read_text())
    # Teardown waits for every process it stopped: nothing is left once pytest has exited.
    assert not psutil.pid_exists(daemon) or psutil.Process(daemon).status() == "zombie"


@pytest.mark.parametrize(
    "sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT], ids=["SIGKILL", "SIGTERM", "SIGINT"]
)
def test_env_clearing_daemon_dies_with_an_interrupted_session(
    pytester: pytest.Pytester, tmp_path: Path, sig: signal.Signals
) -> None:
    pid_file = pytester.path / "daemon.pid"
    with (tmp_path / "pytest-output.txt").open("w+b") as output:
        proc = start(pytester, output, suite=daemon_suite(pid_file))
        try:
            daemon = wait_for(
                "the daemon to measure",
                START_TIMEOUT_S,
                lambda: daemon_measuring(pytester.path, pid_file),
            )
            session = [
                *psutil.Process(proc.pid).children(recursive=True),
                *watchdogs_of(proc.pid),
            ]
            assert daemon.pid in {p.pid for p in session}  # held in the tree by the keeper
            t0 = time.monotonic()
            proc.send_signal(sig)
            proc.wait(timeout=CLEANUP_TIMEOUT_S)
            _, alive = psutil.wait_procs(session, timeout=CLEANUP_TIMEOUT_S)
            elapsed = time.monotonic() - t0
            assert not alive, f"outlived pytest after {sig.name}: {[command_of(p) for p in alive]}"
        finally:
            stop(proc)
            if pid_file.exists() and pid_file.read_text():  # never leave the daemon behind
                with contextlib.suppress(psutil.Error):
                    psutil.Process(int(pid_file.read_text())).kill()
    print(f"{sig.name}: the env-clearing daemon and all else gone {elapsed:.1f} s after it")
    assert elapsed < CLEANUP_TIMEOUT_S
