"""`llmperf calibrate`: its arithmetic (verdicts/calibration.py) and runner (run/calibrate.py)."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path
from typing import Any

import pytest
from scipy.stats import norm

from pytest_llmperf.base.errors import InputError
from pytest_llmperf.report.results_file import RunFile, save_run
from pytest_llmperf.run.calibrate import CalibrateError, calibrate_suite, gate_settings
from pytest_llmperf.run.suite import suite_from_data
from pytest_llmperf.verdicts.calibration import calibrate, render

from . import make_sweep

# Two points; C=1 steady, C=64 with 10 % CV.
RUNS = [[make_sweep("plain", {1: 100.0, 64: v})] for v in (900.0, 1000.0, 1100.0, 1000.0, 1000.0)]
CV64 = 0.0707106781 * 1000 / 1000  # stdev of (900, 1000, 1100, 1000, 1000) / 1000


def test_cv_false_alarm_mde_and_proposals_follow_the_documented_arithmetic() -> None:
    cal = calibrate(
        RUNS, metrics=["output_throughput"], tolerances={"output_throughput": 0.05}, repeats=2
    )
    assert cal.comparisons == 2 and cal.alpha == pytest.approx(0.005)
    p1, p64 = cal.points
    assert p1.cv == 0 and p1.false_alarm == 0
    assert p64.cv == pytest.approx(CV64, rel=1e-6)
    s = CV64 * math.sqrt(2 / 2)
    assert p64.false_alarm == pytest.approx(norm.sf(0.05 / s))
    assert p64.mde == pytest.approx(0.05 + norm.ppf(0.8) * s)
    z = norm.ppf(1 - 0.005)
    assert p64.proposed_tolerance == pytest.approx(math.ceil(z * s / 0.005) * 0.005)
    assert p64.proposed_repeats is None  # 2 * (z * cv / t)**2 = 31.8: more than 20
    assert cal.proposed_tolerance == {"output_throughput": p64.proposed_tolerance}
    assert cal.suite_false_alarm > 0.01
    text = render(cal)
    assert "MISSES the target" in text
    assert f'output_throughput = "{p64.proposed_tolerance * 100:g}%"' in text


def test_a_quiet_suite_meets_the_target_and_needs_one_repeat() -> None:
    quiet = [[make_sweep("plain", {4: 1000.0 + i})] for i in range(4)]
    cal = calibrate(
        quiet, metrics=["output_throughput"], tolerances={"output_throughput": 0.05}, repeats=1
    )
    assert cal.proposed_repeats == 1 and cal.suite_false_alarm < 1e-9
    assert "(meets the target)" in render(cal)


def test_bad_input() -> None:
    with pytest.raises(InputError, match="at least 2 runs"):
        calibrate(
            RUNS[:1],
            metrics=["output_throughput"],
            tolerances={"output_throughput": 0.05},
            repeats=1,
        )


def test_gate_settings_come_from_the_suite_sweep() -> None:
    suite = suite_from_data(
        {
            "server": [{"name": "plain", "model": "m"}],
            "sweep": {
                "metrics": ["output_throughput"],
                "tolerance": {"output_throughput": "7%"},
                "repeat": 3,
            },
        }
    )
    assert gate_settings(suite) == (["output_throughput"], {"output_throughput": 0.07}, 3)


def test_runner_runs_pytest_per_run_in_its_own_dir(tmp_path: Path) -> None:
    calls: list[list[str]] = []

    def fake(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[bytes]:
        calls.append(argv)
        assert kw["timeout"] == 30
        out = Path(argv[argv.index("--llmperf-output-dir") + 1])
        out.mkdir(parents=True)
        save_run(RunFile(hardware="sim", sweeps=RUNS[len(calls) - 1]), out / "results.json")
        return subprocess.CompletedProcess(argv, 1, b"1 failed")

    cal = calibrate_suite(
        ["perf_tests", "-q"], runs=3, output_dir=tmp_path, suite=None, timeout_s=30, runner=fake
    )
    assert [c[c.index("--llmperf-output-dir") + 1] for c in calls] == [
        str(tmp_path / f"run-{i}") for i in (1, 2, 3)
    ]
    assert calls[0][1:5] == ["-m", "pytest", "perf_tests", "-q"]
    assert {p.concurrency for p in cal.points} == {1, 64}

    def broken(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[bytes]:
        return subprocess.CompletedProcess(argv, 4, b"usage error: bad flag")

    with pytest.raises(CalibrateError, match="exited with 4"):
        calibrate_suite([], runs=2, output_dir=tmp_path / "b", suite=None, runner=broken)
