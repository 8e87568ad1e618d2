"""The two ways a speculative regression fails the suite (issue: cross-config gates).

(a) mtp falls below its own baseline at high C after an "upgrade" makes SGLang cap speculative
    decoding at 48 running requests (the baseline was recorded on a release without the cap).
(b) the policy "mtp never loses to plain", run against the profile calibrated to the seed
    benchmark, fails at exactly C=64 and C=128.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from .conftest import assert_no_servers_left, light

REPO = Path(__file__).resolve().parents[2]


SUITE = """
[[server]]
name = "plain"
model = "sim/qwen-moe"

[[server]]
name = "mtp"
model = "sim/qwen-moe"
args = ["--speculative-algorithm", "NEXTN"]

[sweep]
levels = [1, 16, 64]
input_len = 256
output_len = 256
metrics = ["output_throughput", "median_ttft_ms"]
# The quiet simulator's launch-to-launch noise is well under 1 %, and the cap costs mtp about
# 7-9 % at C=64 with these short outputs: a 2 % tolerance resolves it (the noise margin is
# measured from the 3-launch baseline and the run, see docs/verdicts.md).
tolerance = { output_throughput = "2%", median_ttft_ms = "40%" }
"""


def _failed_ids(result: pytest.RunResult) -> set[str]:
    return set(re.findall(r"^FAILED \S+::(\S+)", result.stdout.str(), re.M))


def test_upgrade_that_caps_speculative_decoding_fails_mtp_at_c64(pytester: pytest.Pytester):
    pytester.makefile(".toml", llmperf=light(SUITE))
    pytester.makepyfile(
        test_perf="def test_sweep(llmperf_point):\n    llmperf_point.assert_baseline()\n"
    )
    # "Before the upgrade": this release did not cap speculative decoding.
    before = pytester.runpytest_subprocess(
        "--llmperf-update", "--llmperf-sim-args", "mtp: --max-running-requests 128", timeout=300
    )
    before.assert_outcomes(passed=6)
    # "After": the same flags, but the server now resets the cap to 48 for speculative decoding.
    after = pytester.runpytest_subprocess(timeout=300)
    assert _failed_ids(after) == {"test_sweep[mtp-C64]"}, after.stdout.str()[-3000:]
    after.assert_outcomes(passed=5, failed=1)
    after.stdout.fnmatch_lines(
        ["*mtp at C=64:*baseline*server capped running requests at 48 (C=64 queues)*"]
    )
    assert_no_servers_left(pytester.path)


# A session whose load generator the machine starved says so in one TOO BUSY line and measures
# nothing at those points; the claim below cannot be checked on it, so it is run again (the
# plugin's own advice), at most this many sessions in all.
SESSIONS_WHEN_TOO_BUSY = 2


@pytest.mark.slow
def test_policy_mtp_never_loses_fails_at_exactly_c64_and_c128(pytester: pytest.Pytester):
    policy = REPO / "perf_tests" / "policies" / "mtp_never_loses.toml"
    shutil.copy(policy, pytester.path / "llmperf.toml")
    pytester.makepyfile(test_gates="def test_gate(llmperf_gate):\n    llmperf_gate.check()\n")
    busy: list[str] = []
    for _ in range(SESSIONS_WHEN_TOO_BUSY):
        # The seed's workload (1000/1000) on the seed-003 profile, run 2x faster than real time
        # (the model's own clock; relative numbers are unchanged). Not 5x: on the 2-CPU CI
        # runner, a virtual machine whose hypervisor stole about as much CPU time as its
        # processes used, plain C=128 at 5x (14,000 tok/s) starved the load generator in 3
        # sessions of 3 (loop lag p99 13-19 ms); at 2x it halves the load and measured.
        result = pytester.runpytest_subprocess(
            "--llmperf-sim-profile",
            "sglang-rtxpro6000x4-qwen35-122b-a10b",
            "--llmperf-sim-args",
            "--sim-time-scale 0.5",
            timeout=1500,
        )
        too_busy = [ln for ln in result.outlines if ln.startswith("TOO BUSY:")]
        if not too_busy:
            break
        busy += too_busy
        # the starved point ends undecided, never passed, and the session exits non-zero
        assert result.ret == pytest.ExitCode.TESTS_FAILED
    else:
        pytest.fail(f"every session was too busy to measure: {busy}")
    assert _failed_ids(result) == {
        "test_gate[mtp-never-loses-C64]",
        "test_gate[mtp-never-loses-C128]",
    }, result.stdout.str()[-3000:]
    result.assert_outcomes(passed=4, failed=2)
    result.stdout.fnmatch_lines(
        ["*mtp at C=64:*below plain*server capped running requests at 48 (C=64 queues)*"]
    )
    assert_no_servers_left(pytester.path)
