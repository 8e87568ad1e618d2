"""A server's ``python``: the interpreter that runs ``-m sglang.launch_server`` (an upgrade's
own environment, for a same-job A/B); a simulated run keeps the simulator in this interpreter."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from pytest_llmperf.launch.launcher import LaunchError, launch
from pytest_llmperf.launch.server_config import (
    ConfigError,
    ServerConfig,
    server_configs_from_data,
)

# Stands in for another environment's python: it must be asked for sglang.launch_server, and
# then serves the simulator (this machine has no SGLang), and records that it ran.
FAKE_PYTHON = f"""#!{sys.executable}
import pathlib, runpy, sys
assert sys.argv[1:3] == ["-m", "sglang.launch_server"], sys.argv
pathlib.Path(sys.argv[0] + ".ran").write_text(" ".join(sys.argv[3:]))
sys.argv = ["sglang-stand-in", *sys.argv[3:]]
runpy.run_module("pytest_llmperf.sim", run_name="__main__")
"""


def _config(python: str) -> ServerConfig:
    data = {"server": [{"name": "new", "model": "sim/qwen-moe", "python": python}]}
    return server_configs_from_data(data)[0]


def test_python_runs_sglang_launch_server(tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    cfg = _config(str(fake))
    with launch(cfg, log_dir=tmp_path, simulate=False, health_timeout_s=60) as handle:
        assert handle.mode == "launched"
        assert handle.argv[:3] == [str(fake), "-m", "sglang.launch_server"]
    assert "--model-path sim/qwen-moe" in (tmp_path / "python.ran").read_text()


def test_simulated_run_keeps_the_simulator_in_this_interpreter(tmp_path: Path) -> None:
    cfg = _config("/nonexistent/bin/python")
    with launch(cfg, log_dir=tmp_path, simulate=True, health_timeout_s=60) as handle:
        assert handle.argv[:3] == [sys.executable, "-m", "pytest_llmperf.sim"]


def test_missing_interpreter_names_the_field(tmp_path: Path) -> None:
    cfg = _config(str(tmp_path / "no-such-python"))
    with pytest.raises(LaunchError, match=r"server config 'new'\.python: cannot start"):
        launch(cfg, log_dir=tmp_path, simulate=False, health_timeout_s=5)


def test_python_with_command_is_rejected() -> None:
    data = {
        "server": [
            {"name": "x", "model": "m", "python": "/usr/bin/python3", "command": ["s", "{port}"]}
        ]
    }
    with pytest.raises(ConfigError, match=r"server\[0\]: python: only used to run sglang"):
        server_configs_from_data(data)
