"""adjust = "launch" end to end on a simulator whose every launch draws its own speed."""

from __future__ import annotations

import json

import pytest

from .conftest import SUITE, light, run, with_sweep

# Each launch 15 % faster or slower (sd), levels 1, 4, 16 in one launch each.
NOISY = "--sim-launch-speed-sd 0.15 --sim-seed 3"
ARGS = [
    "--llmperf-levels", "1,4,16",
    "--llmperf-output-len", "64",
    "-k", "test_sweep and plain",
]  # fmt: skip


@pytest.fixture(autouse=True)
def _light(suite):
    """The plugin's real validity limits, on a light load (the suite's own sim_args)."""
    (suite.path / "llmperf.toml").write_text(
        light(with_sweep(SUITE, 'metrics = ["output_throughput"]', 'adjust = "launch"'))
    )


def test_recording_measures_whole_sweeps_per_launch(suite):
    rec = run(
        suite,
        *ARGS,
        "--llmperf-update",
        "--llmperf-baseline-repeat",
        "3",
        f"--llmperf-sim-args={NOISY}",
    )
    rec.assert_outcomes(passed=3)
    path = next(suite.path.rglob("baselines/**/plain.json"))
    (levels,) = json.loads(path.read_text())["workloads"].values()
    for c in ("1", "4", "16"):
        thr = levels[c]["metrics"]["output_throughput"]
        assert thr["n"] == 3 and thr["launches"] == 3
        res = thr["launch_residual"]
        assert res["n"] == 3 and res["sd"] is not None
    # 3 launches for 3 levels x 3 samples: each launch measured the whole sweep.
    results = json.loads((suite.path / "llmperf-results" / "results.json").read_text())
    (sweep,) = results["sweeps"]
    launches = {lv["launch"] for lv in sweep["levels"]}
    launches |= {lv["launch"] for reps in sweep["repeats"].values() for lv in reps}
    assert len(launches) == 3

    # The same server in a new launch: passes (its speed is removed).
    same = run(suite, *ARGS, f"--llmperf-sim-args={NOISY} --sim-seed 11")
    same.assert_outcomes(passed=3)
    # 33 % longer steps at batch sizes 9-16 only: exactly C=16 fails, after the launch's speed
    # is removed, and the message says so.
    slow = run(suite, *ARGS, f"--llmperf-sim-args={NOISY} --sim-slowdown 9-16:1.33")
    slow.assert_outcomes(passed=2, failed=1)
    slow.stdout.fnmatch_lines(
        ["*_ test_sweep[[]plain-C16[]] _*", "*launch-adjusted:*below baseline*speed removed*"]
    )
