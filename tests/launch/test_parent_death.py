"""No server outlives the process that launched it: SIGKILL, SIGTERM, plain exit."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ._helpers import is_alive, wait_dead

PARENT = Path(__file__).parent / "fixtures" / "launching_parent.py"
SECRET = "sk-parent-3b5a"


def start_parent(
    tmp_path: Path, mode: str, then: str, handlers: str, grace: float = 2.0, key: str = ""
) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    argv = [sys.executable, str(PARENT), str(tmp_path), mode, str(grace), then, handlers]
    proc = subprocess.Popen([*argv, *([key] if key else [])], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # the parent prints once the server is healthy
    if not line:
        proc.kill()
        proc.wait(timeout=10)
        pytest.fail(f"launching parent failed (rc {proc.returncode})")
    return proc, json.loads(line)


def server_pids(info: dict[str, Any]) -> list[int]:
    return [info["server"], *([info["child"]] if info["child"] else [])]


@pytest.mark.parametrize("mode", ["child", "escaped"])
def test_sigkilled_parent_takes_server_down(tmp_path: Path, mode: str) -> None:
    proc, info = start_parent(tmp_path, mode, "sleep", "none")
    pids = server_pids(info)
    assert all(is_alive(p) for p in pids) and is_alive(info["watchdog"])
    t0 = time.monotonic()
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=10) == -9
    # A child that left the group (setsid) is found by the launch's tag in its environment.
    assert wait_dead(pids, 20.0) == []
    print(f"parent SIGKILLed ({mode} child): server gone after {time.monotonic() - t0:.2f} s")
    assert wait_dead([info["watchdog"], *pids], 10.0) == []


def test_sigkilled_parent_sigterm_ignoring_server_and_secret(tmp_path: Path) -> None:
    proc, info = start_parent(tmp_path, "ignore_term", "sleep", "none", grace=1.0, key=SECRET)
    assert SECRET in Path(info["log"]).read_text()  # the server printed it, as SGLang does
    t0 = time.monotonic()
    proc.kill()
    proc.wait(timeout=10)
    assert wait_dead([info["server"]], 20.0) == []
    print(f"parent SIGKILLed, SIGTERM-ignoring server gone after {time.monotonic() - t0:.2f} s")
    assert wait_dead([info["watchdog"]], 10.0) == []  # it scrubs the log before exiting
    assert SECRET not in Path(info["log"]).read_text()


@pytest.mark.parametrize("handlers", ["handlers", "none"])
def test_sigterm_to_parent(tmp_path: Path, handlers: str) -> None:
    proc, info = start_parent(tmp_path, "child", "sleep", handlers)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == -15  # with handlers: cleanup, then death by SIGTERM
    if handlers == "handlers":
        # The handler stopped the server before the parent died.
        assert [p for p in server_pids(info) if is_alive(p)] == []
    assert wait_dead(server_pids(info), 20.0) == []
    print(f"parent SIGTERM ({handlers}): server gone after {time.monotonic() - t0:.2f} s")
    assert wait_dead([info["watchdog"]], 10.0) == []


def test_parent_exit_without_close_uses_atexit(tmp_path: Path) -> None:
    proc, info = start_parent(tmp_path, "child", "exit", "none")
    assert proc.wait(timeout=30) == 0
    # atexit ran before the interpreter exited, so nothing is left even for the watchdog.
    assert [p for p in server_pids(info) if is_alive(p)] == []
    assert wait_dead([info["watchdog"]], 10.0) == []
