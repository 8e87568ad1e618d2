"""Secrets and paths, end to end: the API key never leaves the process, nothing is written outside
the configured directories, and ``--llmperf-require-real`` never falls back to the simulator.
"""

from __future__ import annotations

import importlib.util
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_llmperf.launch.ports import free_port

from .conftest import (
    LIGHT_SIM,
    SWEEP_TEST,
    assert_no_servers_left,
    light,
    read_json,
    run,
    servers_under,
    wait_healthy,
)

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


@pytest.fixture
def two(pytester: pytest.Pytester) -> Iterator[pytest.Pytester]:
    pytester.makefile(".toml", llmperf=light(TWO_SERVERS))
    pytester.makepyfile(test_perf=SWEEP_TEST)
    yield pytester
    assert_no_servers_left(pytester.path)


@pytest.fixture
def secured_server(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A simulated server started by hand with ``--api-key``: (URL, key)."""
    key = "sk-llmperf-" + secrets.token_hex(16)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "pytest_llmperf.sim", "--port", str(port), "--api-key", key]
    argv += LIGHT_SIM.split()  # attached: the suite's sim_args do not reach it
    with (tmp_path / "server.log").open("wb") as log:
        proc = subprocess.Popen(
            argv, cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        wait_healthy(proc, url, tmp_path / "server.log", "the secured server")
        yield url, key
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


def everything_written(root: Path) -> dict[Path, str]:
    """Every file under ``root`` (results, baselines, logs, junit XML), as text."""
    return {p: p.read_text(errors="replace") for p in root.rglob("*") if p.is_file()}


def assert_absent(secret: str, result: pytest.RunResult, root: Path) -> None:
    assert secret not in result.stdout.str()
    assert secret not in result.stderr.str()
    leaks = [p for p, text in everything_written(root).items() if secret in text]
    assert not leaks, f"the API key was written to {leaks}"


@pytest.mark.parametrize("source", ["env", "cli"])
def test_api_key_never_appears(
    two: pytest.Pytester,
    secured_server: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
    source: str,
) -> None:
    url, key = secured_server
    if source == "env":
        monkeypatch.setenv("LLMPERF_API_KEY", key)
        key_args = []
    else:
        key_args = ["--llmperf-api-key", key]
    junit = two.path / "junit.xml"
    result = run(
        two,
        "-v",
        "--llmperf-url",
        url,
        *key_args,
        "--llmperf-update",
        "--llmperf-details",
        f"--junitxml={junit}",
    )
    result.assert_outcomes(passed=2)  # the key reached the server: it refuses requests without
    result.stdout.fnmatch_lines([f"llmperf: server plain: ATTACHED ({url}), *"])
    assert junit.is_file()
    assert (two.path / "llmperf-results" / "results.json").is_file()
    assert list((two.path / "baselines").rglob("*.json"))
    assert_absent(key, result, two.path)


def test_wrong_api_key_is_a_clear_401_without_the_key(
    two: pytest.Pytester, secured_server: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, key = secured_server
    wrong = "sk-wrong-" + secrets.token_hex(16)
    monkeypatch.setenv("LLMPERF_API_KEY", wrong)
    junit = two.path / "junit.xml"
    result = run(two, "--llmperf-url", url, f"--junitxml={junit}")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at setup of test_sweep[[]plain-C1[]]*",
            "config 'plain' at C=1: the level could not be measured after * s: SweepError: "
            f"warm-up request to {url} failed: HTTP 401: *; the server refused the API key: set "
            "LLMPERF_API_KEY (or --llmperf-api-key) to the key the server was started with",
        ]
    )
    assert_absent(wrong, result, two.path)
    assert_absent(key, result, two.path)


@pytest.mark.skipif(
    importlib.util.find_spec("sglang") is not None, reason="SGLang is installed here"
)
def test_require_real_without_sglang_launches_nothing(
    two: pytest.Pytester, xdist_args: list[str]
) -> None:
    result = run(two, "--llmperf-require-real", *xdist_args)
    message = (
        "config '*': SGLang is not installed in * and --llmperf-require-real refuses the "
        "simulated server"
    )
    if xdist_args:
        # A worker cannot stop the session: each test errors with the same sentence.
        result.assert_outcomes(errors=2)
        result.stdout.fnmatch_lines([message])
    else:
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines([f"ERROR: pytest-llmperf: {message}"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    assert not (two.path / "llmperf-results").exists()  # no server log: nothing was launched
    assert not servers_under(two.path)


@pytest.mark.parametrize("where", ["relative", "absolute"])
def test_reports_and_logs_stay_in_the_configured_directories(
    two: pytest.Pytester, tmp_path: Path, where: str
) -> None:
    out = two.path / "out" / "perf" if where == "relative" else tmp_path / "elsewhere"
    before = set(everything_written(two.path))
    result = run(
        two,
        "--llmperf-update",
        "--llmperf-output-dir",
        "out/perf" if where == "relative" else str(out),
        "--llmperf-baseline-dir",
        "expected",
        "--llmperf-hardware",
        "../../escape",  # reduced to a safe file name, never a path
        "--llmperf-plots",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([f"results: {out / 'results.json'}", f"plots: {out / 'plots'}"])
    # Not the plugin's: pytester's captured output, matplotlib's cache under pytester's HOME.
    own = {two.path / "stdout", two.path / "stderr"}
    written = [
        p
        for p in set(everything_written(two.path)) - before - own
        if not {"__pycache__", ".cache"} & set(p.relative_to(two.path).parts)
    ]
    allowed = [two.path / "expected"] + ([out] if where == "relative" else [])
    outside = [p for p in written if not any(p.is_relative_to(d) for d in allowed)]
    assert not outside, f"written outside the configured directories: {outside}"
    assert sorted(p.name for p in (two.path / "expected").rglob("*.json")) == [
        "mtp.json",
        "plain.json",
    ]
    assert {p.parent.name for p in (two.path / "expected").rglob("*.json")} == {"escape"}
    assert read_json(out / "results.json")["hardware"] == "escape"
    assert len(list((out / "logs").glob("*.log"))) == 2
    assert list((out / "plots").glob("*.png"))
    assert not (tmp_path.parent / "escape").exists()


FAILING_ASSERTIONS = """
def test_sweep(llmperf_point):
    assert llmperf_point.result.failed == 1, llmperf_point  # fails: shows the point's repr


def test_run(llmperf_run):
    assert llmperf_run is None  # fails: shows the run's repr
"""


def test_api_key_absent_after_failing_assertions_with_vv(
    two: pytest.Pytester, secured_server: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user's failing assertion prints the point and the run (``-vv``, ``-l``) and writes them
    to JUnit XML: the key must be masked in their repr, and in every file written."""
    url, key = secured_server
    monkeypatch.setenv("LLMPERF_API_KEY", key)
    two.makepyfile(test_perf=FAILING_ASSERTIONS)
    junit = two.path / "junit.xml"
    result = run(two, "-vv", "-l", "--llmperf-url", url, f"--junitxml={junit}")
    result.assert_outcomes(failed=3)  # two points and the run
    out = result.stdout.str()
    assert "PerfRun(" in out and "api_key=SecretStr('**********')" in out  # the repr was shown
    assert junit.is_file()
    assert_absent(key, result, two.path)
