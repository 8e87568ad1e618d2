"""Helpers for driving the plugin end to end: a tiny suite against the simulated server."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest

# A light client load on a shared CPU: the model 5x slower than real time leaves ~5 ms between
# a stream's events, so the plugin's real validity limits hold (a test that sets its own
# --llmperf-sim-args starts them with LIGHT_SIM).
LIGHT_SIM = "--sim-time-scale 5"
LIGHT = [f"--llmperf-sim-args={LIGHT_SIM}"]


def light(suite_toml: str) -> str:
    """``suite_toml`` with LIGHT_SIM as every server's ``sim_args`` (the suite file's own key).

    A test's own --llmperf-sim-args then add to the light load instead of replacing it.
    """
    flags = ", ".join(f'"{f}"' for f in LIGHT_SIM.split())
    out = []
    for line in suite_toml.splitlines(keepends=True):
        out.append(line)
        if line.startswith("args = "):
            out.append(f"sim_args = [{flags}]\n")
    return "".join(out)


# Small and quick: the simulator's default profile, short prompts and outputs.
# One launch per recorded baseline point: these tests are about the workflow, not the noise
# (tests/verdicts/test_noise.py and benchmarks/bench_noise.py are about that).
FAST = [
    "--llmperf-input-len",
    "64",
    "--llmperf-output-len",
    "16",
    "--llmperf-baseline-repeat",
    "1",
    "-p",
    "no:randomly",
]

SUITE = """
[[server]]
name = "plain"
model = "sim/qwen-moe"
args = []

[[server]]
name = "mtp"
model = "sim/qwen-moe"
args = ["--speculative-algorithm", "NEXTN"]

[sweep]
levels = [1, 4]

[[gate]]
name = "mtp-wins-low-C"
config = "mtp"
reference = "plain"
factor = 1.0
where = "C<=4"
"""

TESTS = """
def test_sweep(llmperf_point):
    llmperf_point.assert_baseline()


def test_gate(llmperf_gate):
    llmperf_gate.check()
"""


SWEEP_TEST = """
def test_sweep(llmperf_point):
    llmperf_point.assert_baseline()
"""


def with_sweep(suite_text: str, *lines: str) -> str:
    """``suite_text`` with ``lines`` (e.g. ``'metrics = ["output_throughput"]'``) added to its
    ``[sweep]`` table: what a test measures is the suite's, not the command line's."""
    assert "[sweep]\n" in suite_text
    return suite_text.replace("[sweep]\n", "[sweep]\n" + "".join(f"{x}\n" for x in lines), 1)


def sim_servers() -> list[psutil.Process]:
    """Simulated servers still running anywhere on the machine, started by this test run."""
    out = []
    for proc in psutil.process_iter(["cmdline", "environ"]):
        try:
            cmd = proc.info["cmdline"] or []
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if "pytest_llmperf.sim" in cmd:
            out.append(proc)
    return out


@pytest.fixture
def suite(pytester: pytest.Pytester) -> Any:
    """A pytester dir holding a two-server suite (plain, mtp) and its tests.

    Afterwards, asserts that no simulated server started from it is still running.
    """
    pytester.makefile(".toml", llmperf=SUITE)
    pytester.makepyfile(test_perf=TESTS)
    yield pytester
    assert_no_servers_left(pytester.path)


def run(pytester: pytest.Pytester, *args: str, timeout: float = 240) -> pytest.RunResult:
    """Run pytest in a subprocess (event loops, servers and signals stay out of this one)."""
    return pytester.runpytest_subprocess(*FAST, *args, timeout=timeout)


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def servers_under(path: Path) -> list[psutil.Process]:
    """Simulated servers whose working directory is inside ``path`` (this test's runs)."""
    out = []
    for proc in sim_servers():
        try:
            if Path(proc.cwd()).is_relative_to(path):
                out.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


def assert_no_servers_left(path: Path, timeout: float = 10.0) -> None:
    """No server process outlives the session (bounded wait for ones just being reaped)."""
    _, alive = psutil.wait_procs(servers_under(path), timeout=timeout)
    assert not alive, f"server processes outlived the session: {[p.pid for p in alive]}"


@pytest.fixture(params=[[], ["-n", "2"]], ids=["no-xdist", "xdist-2"])
def xdist_args(request: pytest.FixtureRequest) -> list[str]:
    return list(request.param)


os.environ.setdefault("PYTHONUNBUFFERED", "1")


def wait_healthy(proc: subprocess.Popen[bytes], url: str, log_path: Path, what: str) -> None:
    """Wait (60 s at most) until a server started by hand answers ``/health_generate``."""
    deadline = time.monotonic() + 60
    while True:  # bounded by the deadline
        assert proc.poll() is None, log_path.read_text()
        # urllib, not httpx: pytester drops modules imported during a test, and httpcore
        # imported afresh no longer matches the exception classes httpx maps.
        try:
            with urllib.request.urlopen(f"{url}/health_generate", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:  # refused while starting, HTTP 503 until warmed up
            pass
        assert time.monotonic() < deadline, f"{what} never became healthy"
        time.sleep(0.2)
