"""A launch's keeper holds every process the launch started, whatever it does to escape.

The daemon here double-forks, calls ``setsid`` and re-executes the simulator with an empty
environment: no process group, session, parent or environment tag leads back to the launch.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from pytest_llmperf.launch import keeper
from pytest_llmperf.launch.launcher import ServerStartError, launch
from pytest_llmperf.launch.server_config import ServerConfig
from tests.launch._helpers import is_alive, wait_dead

ENV_CLEARING = Path(__file__).parent / "fixtures" / "env_clearing_daemon.py"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="subreaper: Linux")


def daemon_config(pid_file: Path, mode: str) -> ServerConfig:
    return ServerConfig(
        name=f"env-clearing-{mode}",
        model="sim/qwen-moe",
        command=(sys.executable, str(ENV_CLEARING), "{port}", "{host}", str(pid_file), mode),
        health="/health_generate",
        launch_timeout_s=60,
    )


def test_a_command_whose_env_clearing_daemon_serves_is_an_error_naming_the_port(
    tmp_path: Path,
) -> None:
    pid_file = tmp_path / "daemon.pid"
    with pytest.raises(ServerStartError, match=r"exited with code 0") as info:
        launch(daemon_config(pid_file, "exit"), log_dir=tmp_path / "logs")
    text = str(info.value)
    daemon = int(pid_file.read_text())
    port = text.split("(http://127.0.0.1:", 1)[1].split(")", 1)[0]
    assert f"left running pid {daemon}" in text and "foreground, not daemonize" in text
    assert f"port {port} still answered" in text
    assert wait_dead([daemon], 10.0) == []


def test_a_foreground_command_with_an_env_clearing_daemon_is_served_and_stopped(
    tmp_path: Path,
) -> None:
    pid_file = tmp_path / "daemon.pid"
    with launch(daemon_config(pid_file, "foreground"), log_dir=tmp_path / "logs") as handle:
        daemon = psutil.Process(int(pid_file.read_text()))
        assert handle.pid is not None and daemon.environ() == {}
        assert os.getsid(daemon.pid) != os.getsid(handle.pid)  # another session
        # The daemon's parent is the keeper: it never left the launch's tree.
        assert daemon.ppid() == psutil.Process(handle.pid).ppid()
        assert handle.poll() is None  # the command itself still runs
    assert handle.exit_code == -signal.SIGTERM
    assert wait_dead([daemon.pid], 10.0) == []


def test_keeper_reports_the_command_exit_and_reaps_adopted_orphans(tmp_path: Path) -> None:
    """The command's own status comes back (not an orphan's); orphans leave no zombie."""
    script = (
        "import os, sys, time\n"
        "if os.fork() == 0:\n"  # an orphan-to-be that outlives the command briefly
        "    time.sleep(0.5); os._exit(9)\n"
        "sys.exit(3)\n"
    )
    with (tmp_path / "log").open("wb") as log:
        kept = keeper.start([sys.executable, "-c", script], env=dict(os.environ), stdout=log)
    assert kept.wait(timeout=20) == 3
    # The orphan was adopted by the keeper (not init), and reaped when it exited.
    assert kept.keeper.wait(timeout=20) == 3
    assert kept.poll() == 3
    kept.close()


def test_keeper_mirrors_a_signal_death(tmp_path: Path) -> None:
    with (tmp_path / "log").open("wb") as log:
        kept = keeper.start(
            [sys.executable, "-c", "import time; time.sleep(60)"], env=dict(os.environ), stdout=log
        )
    assert is_alive(kept.leader_pid) and kept.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        kept.wait(timeout=0.2)
    os.kill(kept.leader_pid, signal.SIGTERM)  # the keeper itself ignores SIGTERM
    assert kept.wait(timeout=20) == -signal.SIGTERM
    assert kept.keeper.wait(timeout=20) == -signal.SIGTERM
    kept.close()


def test_keeper_names_a_command_that_cannot_run(tmp_path: Path) -> None:
    with (tmp_path / "log").open("wb") as log, pytest.raises(keeper.KeeperError) as info:
        keeper.start([str(tmp_path / "no-such-binary")], env=dict(os.environ), stdout=log)
    assert "No such file" in str(info.value)


def test_orphan_adopted_by_keeper_not_init(tmp_path: Path) -> None:
    """An orphan's parent is the keeper while it runs: the launch's tree still holds it."""
    pid_file = tmp_path / "orphan.pid"
    script = (
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        f"    open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(30); os._exit(0)\n"
        "sys.exit(0)\n"
    )
    with (tmp_path / "log").open("wb") as log:
        kept = keeper.start([sys.executable, "-c", script], env=dict(os.environ), stdout=log)
    assert kept.wait(timeout=20) == 0
    deadline = time.monotonic() + 10
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    orphan = psutil.Process(int(pid_file.read_text()))
    assert orphan.ppid() == kept.pid and kept.keeper.poll() is None
    orphan.kill()
    assert kept.keeper.wait(timeout=20) == 0
    kept.close()
