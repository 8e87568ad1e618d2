"""A server that stalls after the warm-up, end to end: a real pytest run against the simulator.

The idle timeout (``idle_timeout`` in ``[sweep]``) ends each stalled request; a level in which no
request completed ends its config's sweep with the reason, and the config's later levels are
not measured (each would cost the same timeouts again). The healthy config is measured.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from .conftest import LIGHT_SIM, SWEEP_TEST, assert_no_servers_left, read_json, run

SUITE = """
[[server]]
name = "mtp"
model = "sim/qwen-moe"
args = ["--speculative-algorithm", "NEXTN"]

[[server]]
name = "plain"
model = "sim/qwen-moe"
args = []

[sweep]
levels = [1, 2, 4]
requests = 2
idle_timeout = 1
"""


STALLED = r"(?:\d+x )?the stream stalled: no event for 1s after (\d+) tokens \(idle-read timeout\)"


@pytest.fixture
def suite(pytester: pytest.Pytester) -> Any:
    pytester.makefile(".toml", llmperf=SUITE)
    pytester.makepyfile(test_perf=SWEEP_TEST)
    yield pytester
    assert_no_servers_left(pytester.path)


# The warm-up request takes 16 tokens (output_len 16): a threshold of 16 stalls every measured
# request before its first token (a server that hangs after the warm-up), 24 stalls the first
# one after some tokens with its connection open (a stream that stops).
@pytest.mark.parametrize(("after", "streamed"), [(16, False), (24, True)])
def test_a_stalled_server_ends_its_sweep_with_the_reason(
    suite: pytest.Pytester, after: int, streamed: bool
) -> None:
    result = run(
        suite,
        "-v",
        "--llmperf-update",
        "--llmperf-sim-args",
        f"{LIGHT_SIM}; mtp: --sim-fault hang-stream-after-tokens={after}",
    )
    stalled = "the stream stalled: no event for 1s after * tokens (idle-read timeout)"
    ended = f"config 'mtp': no request completed at C=1: *{stalled}*; its remaining levels are not "
    # Recording with adjust = "auto" (the default) and 3 levels, mtp's launch measures its whole
    # sweep before its first test: C=1 stalls there, so every mtp test is an error at setup
    # that says why (C=2 and C=4 are not measured), and plain is measured after it.
    result.assert_outcomes(errors=3, passed=3)
    result.stdout.fnmatch_lines(
        [
            "*test_sweep[[]mtp-C1[]] ERROR*",
            "*test_sweep[[]mtp-C2[]] ERROR*",
            "*test_sweep[[]mtp-C4[]] ERROR*",
            "*test_sweep[[]plain-C4[]] PASSED*",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*ERROR at setup of test_sweep[[]mtp-C1[]]*",
            ended + "measured",
            "*ERROR at setup of test_sweep[[]mtp-C2[]]*",
            ended + "measured",
            "*ERROR at setup of test_sweep[[]mtp-C4[]]*",
            ended + "measured",
        ]
    )
    result.stdout.fnmatch_lines([f"NOT MEASURED: mtp: {ended}measured"])

    results = read_json(suite.path / "llmperf-results" / "results.json")
    levels = {
        (s["config"], lv["max_concurrency"]): lv for s in results["sweeps"] for lv in s["levels"]
    }
    assert sorted(levels) == [("mtp", 1), ("plain", 1), ("plain", 2), ("plain", 4)]
    c1 = levels[("mtp", 1)]
    assert (c1["completed"], c1["failed"], c1["total_output_tokens"]) == (0, 2, 0)
    # The first request stalls; the rest of the level is not sent (it would stall as well).
    not_sent, stalled = c1["errors"]  # most frequent first, then alphabetical
    m = re.fullmatch(STALLED, stalled)
    assert m, c1["errors"]
    assert (int(m.group(1)) > 0) == streamed
    assert not_sent == (
        "not sent: every request before it stalled (1) and none completed, so the server "
        "stalls every stream"
    )
    assert all(levels[("plain", c)]["failed"] == 0 for c in (1, 2, 4))
    assert sorted(p.name for p in (suite.path / "baselines").rglob("*.json")) == ["plain.json"]
