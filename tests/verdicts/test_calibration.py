"""`llmperf calibrate`: its arithmetic (verdicts/calibration.py) and runner (run/calibrate.py)."""

from __future__ import annotations

import math
import statistics
import subprocess
from pathlib import Path
from typing import Any

import pytest
from scipy.stats import norm

from pytest_llmperf.base.errors import InputError
from pytest_llmperf.report.results_file import RunFile, save_run
from pytest_llmperf.run.calibrate import CalibrateError, calibrate_suite, gate_settings
from pytest_llmperf.run.recording import record_runs
from pytest_llmperf.run.suite import suite_from_data
from pytest_llmperf.verdicts.baseline import BaselineStore, entry_from_levels
from pytest_llmperf.verdicts.baseline_file import EntryKey
from pytest_llmperf.verdicts.calibration import calibrate, render
from pytest_llmperf.verdicts.compare import Verdict, compare_point

from . import WORKLOAD, make_level, make_sweep

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

    cal, recording = calibrate_suite(
        ["perf_tests", "-q"], runs=3, output_dir=tmp_path, suite=None, timeout_s=30, runner=fake
    )
    assert recording is None
    assert [c[c.index("--llmperf-output-dir") + 1] for c in calls] == [
        str(tmp_path / f"run-{i}") for i in (1, 2, 3)
    ]
    assert calls[0][1:5] == ["-m", "pytest", "perf_tests", "-q"]
    assert {p.concurrency for p in cal.points} == {1, 64}

    slept: list[float] = []
    calls.clear()
    calibrate_suite(
        ["t"], runs=3, output_dir=tmp_path / "i", suite=None, timeout_s=30, runner=fake,
        interval_s=90, sleep=slept.append,
    )  # fmt: skip
    assert slept == [90, 90]  # between runs, not before the first or after the last
    with pytest.raises(CalibrateError, match="--interval must be between 0 and 86400 s"):
        calibrate_suite(["t"], runs=2, output_dir=tmp_path / "j", suite=None, interval_s=1e6)

    def broken(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[bytes]:
        return subprocess.CompletedProcess(argv, 4, b"usage error: bad flag")

    with pytest.raises(CalibrateError, match="exited with 4"):
        calibrate_suite([], runs=2, output_dir=tmp_path / "b", suite=None, runner=broken)


# --record: baselines from the calibration's runs, each run one launch (run/recording.py).
ATTACHED = {1: (30.0, 33.0, 27.0), 4: (100.0, 110.0, 90.0), 16: (300.0, 330.0, 270.0)}


def _attached_run(i: int, *, saturated_at: int | None = None) -> list[RunFile]:
    """Run ``i`` of an attached server: every run's samples carry the same launch id."""
    sweep = make_sweep("engine", {c: v[i] for c, v in ATTACHED.items()})
    for lv in sweep.levels:
        lv.launch = "engine@same"  # a session token repeated: runs must still count apart
    sweep.repeats[1] = [make_level(1, ATTACHED[1][i] * 1.01)]
    sweep.repeats[1][0].launch = "engine@same"
    if saturated_at is not None:
        sweep.levels = [
            make_level(c, lv.output_throughput, saturated=True) if c == saturated_at else lv
            for lv in sweep.levels
            for c in [lv.max_concurrency]
        ]
    return [RunFile(hardware="hw", sweeps=[sweep])]


def test_record_counts_each_run_as_one_launch_and_keeps_what_it_did_not_measure(
    tmp_path: Path,
) -> None:
    store = BaselineStore(tmp_path)
    wl = WORKLOAD.key()
    kept = entry_from_levels([make_level(64, 900.0)], ["output_throughput"])
    store.queue_update(EntryKey("hw", "engine", wl, 64), kept)
    hand_set = entry_from_levels([make_level(1, 1.0)], ["output_throughput"])
    store.queue_update(
        EntryKey("hw", "engine", wl, 1), hand_set.model_copy(update={"tolerance": 0.2})
    )
    store.flush()

    runs = [_attached_run(i, saturated_at=16) for i in range(3)]
    recording = record_runs(runs, BaselineStore(tmp_path))

    fresh = BaselineStore(tmp_path)
    c1 = fresh.get(EntryKey("hw", "engine", wl, 1))
    assert c1 is not None and c1.tolerance == 0.2  # hand-set tolerance kept
    tput = c1.metrics["output_throughput"]
    assert tput.n == 6 and tput.launches == 3  # two samples in run 1 share its launch
    means = [30.0 * 1.005, 33.0 * 1.005, 27.0 * 1.005]
    assert tput.std == pytest.approx(statistics.stdev(means), rel=1e-9)
    c4 = fresh.get(EntryKey("hw", "engine", wl, 4))
    assert c4 is not None and c4.metrics["output_throughput"].launches == 3
    # C=16 invalid leaves two levels a run: too few to remove a launch's speed.
    assert c4.metrics["output_throughput"].launch_residual is None
    # A point invalid in every run is named, not written; one not measured is not deleted.
    assert fresh.get(EntryKey("hw", "engine", wl, 16)) is None
    assert recording.skipped == [f"engine {wl} C=16: no valid sample in 3 runs"]
    assert fresh.get(EntryKey("hw", "engine", wl, 64)) is not None
    assert recording.launches[EntryKey("hw", "engine", wl, 4)] == 3
    assert "C=16: no valid sample" in recording.render()


def test_a_recorded_run_to_run_noise_keeps_an_unchanged_run_from_failing(
    tmp_path: Path,
) -> None:
    """The attached-server case: a session's own repeats are one launch, so a one-session
    baseline assumes 2 % noise and fails a run 13 % slower; the same numbers recorded over
    three runs carry their 10 % spread, and the point is inconclusive instead."""
    one_session = entry_from_levels(
        [make_level(1, 30.0).model_copy(update={"launch": "engine@a"}) for _ in range(3)],
        ["output_throughput"],
    )
    slower = make_level(1, 26.0).model_copy(update={"launch": "engine@b"})
    plain = compare_point("engine", [slower], one_session, workload=WORKLOAD)
    assert plain.verdict == Verdict.FAIL

    record_runs([_attached_run(i) for i in range(3)], BaselineStore(tmp_path))
    entry = BaselineStore(tmp_path).get(EntryKey("hw", "engine", WORKLOAD.key(), 1))
    judged = compare_point("engine", [slower], entry, workload=WORKLOAD)
    assert judged.verdict == Verdict.INCONCLUSIVE
    assert "noise assumed" not in judged.message()
    # Three valid levels a run: the launch residuals are recorded too, over the 3 runs.
    residual = entry.metrics["output_throughput"].launch_residual if entry else None
    assert residual is not None and residual.n == 3


def test_calibrate_record_writes_from_every_run(tmp_path: Path) -> None:
    def fake(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[bytes]:
        out = Path(argv[argv.index("--llmperf-output-dir") + 1])
        out.mkdir(parents=True)
        i = int(out.name.split("-")[1]) - 1
        save_run(_attached_run(i)[0], out / "results-gw0.json")
        return subprocess.CompletedProcess(argv, 0, b"")

    store = BaselineStore(tmp_path / "baselines")
    _, recording = calibrate_suite(
        ["t"], runs=3, output_dir=tmp_path / "cal", suite=None, runner=fake, record=store
    )
    assert recording is not None
    assert set(recording.launches.values()) == {3}
    assert len(recording.flushed.created) == 3


def test_calibrate_finds_the_suite_file_pytest_uses(tmp_path: Path) -> None:
    from pytest_llmperf.run.calibrate import describe_gate, find_suite_for
    from pytest_llmperf.run.suite import load_suite

    suite_dir = tmp_path / "perf_tests"
    suite_dir.mkdir()
    (suite_dir / "test_sweep.py").write_text("")
    suite = suite_dir / "llmperf.toml"
    suite.write_text(
        '[[server]]\nname = "plain"\nmodel = "m"\n\n[sweep]\n'
        'tolerance = { median_ttft_ms = "40%" }\n'
    )
    # From the repo root, `pytest perf_tests` judges with perf_tests/llmperf.toml.
    path, where = find_suite_for(["perf_tests", "-q"], tmp_path, env={})
    assert path == suite and "perf_tests" in where
    path, _ = find_suite_for(["perf_tests/test_sweep.py::test_sweep"], tmp_path, env={})
    assert path == suite
    line = describe_gate(load_suite(suite), where)
    assert "median_ttft_ms 40 %" in line and "output_throughput 5 %" in line
    # --llmperf-config and LLMPERF_CONFIG win, as in the plugin.
    other = tmp_path / "other.toml"
    assert find_suite_for(["perf_tests", "--llmperf-config", "other.toml"], tmp_path)[0] == other
    assert find_suite_for(["perf_tests"], tmp_path, env={"LLMPERF_CONFIG": "other.toml"})[0] == (
        other
    )
    # Nothing found: the report says it judges at the defaults instead of doing so silently.
    path, where = find_suite_for(["tests"], tmp_path, env={})
    assert path is None
    assert describe_gate(None, where).startswith("tolerances from the defaults (no llmperf.toml")
