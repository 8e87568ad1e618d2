"""``--llmperf-bisect``: the exit status ``git bisect run`` needs (0 good, 1 bad, 125 skip)."""

from __future__ import annotations

import pytest

from .conftest import LIGHT, LIGHT_SIM, SWEEP_TEST, run

SUITE = """
[[server]]
name = "plain"
model = "sim/qwen-moe"
args = []

[sweep]
levels = [4]
metrics = ["output_throughput"]
"""
ARGS = ["--llmperf-output-len", "128", *LIGHT]


@pytest.fixture
def one(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makefile(".toml", llmperf=SUITE)
    pytester.makepyfile(test_perf=SWEEP_TEST)
    run(pytester, "--llmperf-update", *ARGS).assert_outcomes(passed=1)
    return pytester


def test_good_commit_exits_0(one: pytest.Pytester) -> None:
    assert run(one, "--llmperf-bisect", *ARGS).ret == 0


def test_regression_exits_1(one: pytest.Pytester) -> None:
    slower = ["--llmperf-sim-args", f"{LIGHT_SIM} --sim-slowdown 1-64:1.6"]
    result = run(one, "--llmperf-bisect", *ARGS, *slower)
    result.stdout.fnmatch_lines(["*output_throughput*below baseline*"])
    assert result.ret == 1


def test_server_that_does_not_start_exits_125(one: pytest.Pytester) -> None:
    broken = ["--llmperf-sim-args", f"{LIGHT_SIM} --sim-fault crash-on-start"]
    result = run(one, "--llmperf-bisect", *ARGS, *broken)
    result.stdout.fnmatch_lines(["*NOT MEASURED: plain:*"])
    assert result.ret == 125
    assert run(one, *ARGS, *broken).ret == 1  # without the flag: an ordinary failure


def test_require_real_without_sglang_exits_125(pytester: pytest.Pytester) -> None:
    """A build where SGLang cannot be found is untestable, not bad (``git bisect run`` skips it)."""
    pytester.makefile(".toml", llmperf=SUITE)
    pytester.makepyfile(test_perf=SWEEP_TEST)
    # SGLang is not installed in the plugin's own environment (the simulator stands in)
    result = run(pytester, "--llmperf-bisect", "--llmperf-require-real")
    result.stdout.fnmatch_lines(["*--llmperf-require-real refuses the simulated server*exit 125*"])
    assert result.ret == 125
    assert run(pytester, "--llmperf-require-real").ret == pytest.ExitCode.USAGE_ERROR
