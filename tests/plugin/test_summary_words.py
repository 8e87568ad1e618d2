"""What a new user reads in the terminal summary: plain words, never a Python ``None``."""

from __future__ import annotations

import pytest

from tests.plugin.conftest import SUITE, assert_no_servers_left, light, run

CROSSOVER_SUITE = light(SUITE) + '\n[[crossover]]\nconfig = "mtp"\nreference = "plain"\n'

CROSSOVER_TEST = """
def test_crossover(llmperf_crossover):
    llmperf_crossover.check()
"""


def test_recording_a_crossover_says_it_had_no_baseline(pytester: pytest.Pytester) -> None:
    """The first --llmperf-update of a [[crossover]] has nothing to compare with: the summary
    line says 'no baseline', then names the recorded value on the next run."""
    pytester.makefile(".toml", llmperf=CROSSOVER_SUITE)
    pytester.makepyfile(test_cross=CROSSOVER_TEST)
    first = run(pytester, "--llmperf-update")
    first.assert_outcomes(passed=1)
    out = first.stdout.str()
    assert "None" not in out
    first.stdout.fnmatch_lines(["crossover mtp-vs-plain: C=* (no baseline) recorded"])
    second = run(pytester)
    second.stdout.fnmatch_lines(["crossover mtp-vs-plain: C=* (baseline *) *"])
    assert "None" not in second.stdout.str()
    assert_no_servers_left(pytester.path)
