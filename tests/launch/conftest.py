"""Every launcher test must leave no server behind: checked after each test with psutil."""

from __future__ import annotations

from collections.abc import Iterator

import psutil
import pytest

from pytest_llmperf.launch import launcher, reaper

from ._helpers import wait_dead


def _python_helper(proc: psutil.Process) -> bool:
    """multiprocessing's resource tracker: Python starts it once per session for the first
    spawn-context queue (core/shard.py) and it lives until the session ends; it is no server."""
    try:
        return any("multiprocessing.resource_tracker" in part for part in proc.cmdline())
    except psutil.Error:
        return False


@pytest.fixture(autouse=True)
def no_server_survives() -> Iterator[None]:
    yield
    leftovers = launcher.live_servers()
    pids = [h.pid for h in leftovers if h.pid is not None]
    launcher.terminate_all(grace_s=1.0)
    me = psutil.Process()
    strays = [
        p.pid
        for p in me.children(recursive=True)
        if p.pid != reaper.WATCHDOG.pid
        and p.status() != psutil.STATUS_ZOMBIE
        and not _python_helper(p)
    ]
    still = wait_dead(strays, 5.0)
    assert not leftovers, f"test left servers running: {leftovers} (pids {pids})"
    assert not still, f"processes survived the test: {still}"
