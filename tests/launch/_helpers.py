"""Shared helpers for the launcher tests: fake-server configs and process-liveness checks."""

from __future__ import annotations

import re
import time
from pathlib import Path

import psutil

from pytest_llmperf.launch.server_config import ServerConfig

FAKE_SGLANG = Path(__file__).parent / "fixtures" / "fake_sglang"


def fake_config(mode: str, name: str | None = None, **env: str) -> ServerConfig:
    """A config whose ``sglang.launch_server`` is the fake one, misbehaving as ``mode``."""
    return ServerConfig(
        name=name or f"fake-{mode}",
        model="fake/model",
        env={"PYTHONPATH": str(FAKE_SGLANG), "FAKE_MODE": mode, **env},
        launch_timeout_s=30,
    )


def is_alive(pid: int) -> bool:
    """Running and not a zombie (a zombie has exited; only its parent has not reaped it)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def wait_dead(pids: list[int], timeout_s: float) -> list[int]:
    """Wait (bounded) until all ``pids`` are gone; returns those still alive."""
    deadline = time.monotonic() + timeout_s
    alive = [p for p in pids if is_alive(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [p for p in alive if is_alive(p)]
    return alive


def child_pid_from_log(log_path: Path, timeout_s: float = 10.0) -> int:
    """The FAKE_CHILD_PID the fake server printed (bounded wait for it to appear)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        match = re.search(r"FAKE_CHILD_PID=(\d+)", log_path.read_text())
        if match:
            return int(match.group(1))
        time.sleep(0.05)
    raise AssertionError(f"no FAKE_CHILD_PID in {log_path}")
