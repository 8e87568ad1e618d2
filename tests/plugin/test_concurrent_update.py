"""Two pytest sessions updating one baseline directory at once lose nothing.

Two suites in their own directories share a config name ("plain") and a baseline directory;
they sweep different levels. Older entries (C=4 and C=8, recorded before both started) are
unused by session "a". Both update, started together; "b" measures one level and
re-records C=4 (``--llmperf-rerecord``) while "a" (four levels) still runs. "a" must keep that
entry (it was recorded after its own store opened) and delete C=8; the file must end with
every level either measured. "b" may be narrowed with ``--llmperf-levels`` (it then deletes
nothing).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import FAST, SWEEP_TEST, light, read_json

RUN_TIMEOUT_S = 240


def suite_text(levels: list[int]) -> str:
    return f"""
[[server]]
name = "plain"
model = "sim/qwen-moe"
args = []

[sweep]
levels = {levels}
"""


def make_suite(root: Path, name: str, levels: list[int]) -> Path:
    path = root / name
    path.mkdir()
    (path / "pytest.ini").write_text("[pytest]\n")  # each directory is its own rootdir
    (path / "llmperf.toml").write_text(light(suite_text(levels)))
    (path / "test_perf.py").write_text(SWEEP_TEST)
    return path


def start(path: Path, baselines: Path, *args: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "pytest", *FAST, "-p", "no:cacheprovider"]
    argv += ["--llmperf-update", "--llmperf-baseline-dir", str(baselines), *args]
    return subprocess.Popen(
        argv,
        cwd=path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    return proc.returncode, out


BUSY = re.compile(r"^TOO BUSY: machine too busy to measure \d+ points? \(([^)]*)\)", re.M)


def too_busy(code: int, out: str) -> set[int]:
    """The levels a session said it was too busy to measure; anything else must be exit 0."""
    got = BUSY.search(out)
    if got is None:
        assert code == 0, out
        return set()
    assert code == 1 and " failed" not in out.splitlines()[-1], out  # skipped, never failed
    return {int(c) for c in re.findall(r"plain C=(\d+)", got.group(1))}


def recorded_levels(baselines: Path) -> set[int]:
    """The levels in the one baseline file of config "plain" (one workload)."""
    (path,) = baselines.rglob("plain.json")
    (levels,) = read_json(path)["workloads"].values()
    return {int(c) for c in levels}


@pytest.mark.parametrize("narrowed", [False, True], ids=["both-full", "one-narrowed"])
def test_two_sessions_updating_one_baseline_dir_at_once_lose_nothing(
    tmp_path: Path, narrowed: bool
) -> None:
    baselines = tmp_path / "baselines"
    old = make_suite(tmp_path, "old", [4, 8])
    code, out = finish(start(old, baselines))
    first = {4, 8} - too_busy(code, out)
    assert recorded_levels(baselines) == first, out

    a = make_suite(tmp_path, "a", [1, 2, 3, 5])
    b = make_suite(tmp_path, "b", [1, 4] if narrowed else [4])
    # "b" re-records C=4 whatever its verdict (an update alone keeps an entry that passes).
    rerecord = ["--llmperf-rerecord", *(["--llmperf-levels", "4"] * narrowed)]
    procs = [start(a, baselines), start(b, baselines, *rerecord)]
    (code_a, out_a), (code_b, out_b) = [finish(p) for p in procs]
    # Two sessions and their servers on a 2-core box: a level whose load generator was starved
    # is not recorded (never a baseline from an invalid sample) and the session says TOO BUSY
    # and exits 1; every other level records.
    busy_a, busy_b = too_busy(code_a, out_a), too_busy(code_b, out_b)
    # Every level either session measured validly is in the file (C=4 also when "b" was too
    # busy to re-record it: the older entry stays); C=8, unused by the un-narrowed session "a"
    # and recorded before it started, is deleted.
    four = {4} if 4 in first or 4 not in busy_b else set()
    assert recorded_levels(baselines) == {1, 2, 3, 5} - busy_a | four, (out_a, out_b)
