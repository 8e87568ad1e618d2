"""Fast but wrong never passes: the A/B's greedy consistency probes, end to end on the
simulator (``run/ab.py``, ``verdicts/consistency.py``, ``sim/greedy.py``).

An unchanged pair passes, even with batching drift on both sides; a candidate whose answers
changed for a quarter of the prompts fails every level, naming the share, the A/A spread and
the first differing probe and position; with deterministic inference declared, one drifting
answer is enough to fail.
"""

from __future__ import annotations

import json
import re

import pytest

from .conftest import FAST, light

SUITE = """
[[server]]
name = "old"
model = "sim/qwen-moe"

[[server]]
name = "new"
model = "sim/qwen-moe"

[sweep]
levels = [1]

[[ab]]
candidate = "new"
reference = "old"
rounds = 2
tolerance = 0.9
"""


def _run(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict[int, dict]]:
    pytester.makefile(".toml", llmperf=light(SUITE))
    pytester.makepyfile(test_ab="def test_ab(llmperf_ab):\n    llmperf_ab.check()\n")
    out_dir = pytester.path / "out"
    result = pytester.runpytest_subprocess(
        *FAST,
        "--llmperf-output-len",  # longer than FAST: a busy box then keeps each level valid
        "64",
        "--llmperf-output-dir",
        str(out_dir),
        # A level a loaded box could not measure validly is skipped, not failed: these tests
        # are about the answers, and a consistency fail fails whatever the speed sample was.
        "--llmperf-invalid",
        "skip",
        *args,
        timeout=300,
    )
    data = json.loads((out_dir / "ab.json").read_text())
    return result, {p["concurrency"]: p for p in data["points"]}


def test_unchanged_pair_passes_consistency(pytester: pytest.Pytester) -> None:
    result, points = _run(pytester, "--llmperf-sim-args", "--sim-nondeterminism 0.02")
    out = result.stdout.str()
    assert result.ret == 0, out[-3000:]
    for p in points.values():
        assert p["consistency"] == "pass" and p["probes_compared"] == 64, p
        assert p["probes_aa_compared"] == 32
        assert "consistency:" in p["message"]
    assert "greedy outputs" in out  # the A/B table's column


def test_changed_answers_fail_naming_share_and_first_probe(pytester: pytest.Pytester) -> None:
    result, points = _run(pytester, "--llmperf-sim-args", "new: --sim-diverge-share 0.25")
    out = result.stdout.str()
    result.assert_outcomes(failed=1)
    msg = re.search(
        r"consistency: (\d+) of 64 greedy probe answers \(32 x 2\) differ between old and new "
        r"\(A/A: 0 of 32\); more often than A/A \(one-sided exact p=\S+\); first difference: "
        r"probe (\d+) at token (\d+) \((\d+) vs (\d+)\)",
        out,
    )
    assert msg, out[-3000:]
    differing = int(msg.group(1))
    assert 8 <= differing <= 32  # about a quarter of 32 prompts, in each of the 2 rounds
    for p in points.values():
        assert p["verdict"] == "fail" and p["consistency"] == "fail"
        assert p["probes_differing"] == differing and p["probes_aa_differing"] == 0


def test_deterministic_inference_fails_any_difference(pytester: pytest.Pytester) -> None:
    # Drift on every answer of new only; both declare deterministic inference, which turns
    # the simulator's drift off, so only a changed-answer share can differ: a small one.
    result, points = _run(
        pytester,
        "--llmperf-probes",
        "8",
        "--llmperf-sim-args",
        "--enable-deterministic-inference; new: --sim-diverge-share 0.15",
    )
    out = result.stdout.str()
    p = points[1]
    if p["probes_differing"] == 0:  # the seeded draw gave none of 8 prompts a change
        pytest.fail(f"the seeded share picked no prompt of 8: {p}")
    assert p["consistency"] == "fail", p
    assert "deterministic inference declared: any difference fails" in out
    result.assert_outcomes(failed=1)
