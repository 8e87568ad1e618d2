"""`pytest --help` must work for every project once the plugin is installed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pytest_llmperf.run.settings import SETTINGS


def test_pytest_help_lists_every_flag_and_exits_0(tmp_path: Path) -> None:
    # an unrelated project: the plugin is loaded through its entry point, not a conftest
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    for s in SETTINGS:
        if s.cli:
            assert s.cli_flag in proc.stdout, s.cli_flag
        else:  # a suite setting: its flag is a hidden option that only says where it went
            assert s.cli_flag not in proc.stdout, s.cli_flag
