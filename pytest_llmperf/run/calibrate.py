"""``llmperf calibrate``: run the suite N times unchanged, then measure its noise.

Each run is ``python -m pytest <args> --llmperf-output-dir DIR/run-I`` in a subprocess (no
shell, a timeout per run); the results files it writes are read back and handed to
``verdicts/calibration.py``. The gated metrics, their tolerances and the repeats come from the
suite file's ``[sweep]`` (or the defaults), so the report speaks about the gate as configured.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from pytest_llmperf.base.errors import LLMPerfError
from pytest_llmperf.report.results_file import RunFile, load_run
from pytest_llmperf.run.recording import Recording, git_commit, record_runs
from pytest_llmperf.run.settings import SETTINGS_BY_NAME
from pytest_llmperf.run.suite import SUITE_FILE_NAME, Suite, find_suite_file
from pytest_llmperf.verdicts.baseline import BaselineStore
from pytest_llmperf.verdicts.calibration import DEFAULT_TARGET, Calibration, calibrate
from pytest_llmperf.verdicts.compare import DEFAULT_METRICS, resolve_tolerance

MAX_RUNS = 1000
MAX_INTERVAL_S = 86_400.0  # a pause between runs longer than a day is a typo
# pytest's exit codes for "tests ran" (0 passed, 1 some failed): other codes mean the run broke.
_RAN = (0, 1)


class CalibrateError(LLMPerfError, RuntimeError):
    """A calibration run did not complete or wrote no results."""


def run_suite(
    pytest_args: Sequence[str],
    out: Path,
    *,
    timeout_s: float,
    runner: Callable[..., subprocess.CompletedProcess[bytes]] = subprocess.run,
) -> list[RunFile]:
    """One unchanged run of the suite: every results file it wrote (one per xdist worker)."""
    argv = [sys.executable, "-m", "pytest", *pytest_args, "--llmperf-output-dir", str(out)]
    try:
        done = runner(argv, timeout=timeout_s, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except subprocess.TimeoutExpired:
        raise CalibrateError(f"{' '.join(argv)}: did not finish within {timeout_s:g} s") from None
    tail = done.stdout.decode(errors="replace")[-2000:] if done.stdout else ""
    if done.returncode not in _RAN:
        raise CalibrateError(f"{' '.join(argv)} exited with {done.returncode}:\n{tail}")
    files = sorted(out.glob("results*.json"))
    if not files:
        raise CalibrateError(f"{' '.join(argv)} wrote no results file in {out}:\n{tail}")
    return [load_run(f) for f in files]


SUITE_FLAG = "--llmperf-config"
PROBE_FLAG = SETTINGS_BY_NAME["probe_every_launch"].cli_flag
SUITE_ENV = "LLMPERF_CONFIG"


def find_suite_for(
    pytest_args: Sequence[str], cwd: Path, env: Mapping[str, str] = os.environ
) -> tuple[Path | None, str]:
    """The suite file the pytest run of ``pytest_args`` judges with, found as the plugin finds
    it (``--llmperf-config``, then ``LLMPERF_CONFIG``, then the nearest ``llmperf.toml`` from
    the first test path up to ``cwd``, the rootdir), and where it was found, for the report."""
    args = list(pytest_args)
    for i, arg in enumerate(args):
        if arg == SUITE_FLAG and i + 1 < len(args):
            return cwd / args[i + 1], f"{SUITE_FLAG} {args[i + 1]}"
        if arg.startswith(SUITE_FLAG + "="):
            value = arg.partition("=")[2]
            return cwd / value, f"{SUITE_FLAG}={value}"
    if env.get(SUITE_ENV):
        return cwd / env[SUITE_ENV], f"{SUITE_ENV}={env[SUITE_ENV]}"
    for arg in args:
        if arg.startswith("-"):
            continue
        target = cwd / arg.split("::", 1)[0]
        if target.exists():
            found = find_suite_file(target, cwd)
            if found is not None:
                return found, f"the nearest {SUITE_FILE_NAME} to the test path {arg}"
    here = cwd / SUITE_FILE_NAME
    if here.is_file():
        return here, f"{SUITE_FILE_NAME} in {cwd}"
    return None, f"no {SUITE_FILE_NAME} for the test paths or in {cwd}"


def describe_gate(suite: Suite | None, where: str) -> str:
    """One line naming the tolerances the report judges at and where they came from."""
    metrics, tolerances, repeats = gate_settings(suite)
    tols = ", ".join(f"{m} {100 * tolerances[m]:g} %" for m in metrics)
    source = f"the suite's [sweep] ({where})" if suite is not None else f"the defaults ({where})"
    return f"tolerances from {source}: {tols}; repeat {repeats}"


def gate_settings(suite: Suite | None) -> tuple[list[str], dict[str, float], int]:
    """The gated metrics, their tolerances and the repeats the suite is configured with."""
    sweep = suite.sweep if suite is not None else None
    metrics = list(sweep.get("metrics") if sweep and sweep.get("metrics") else DEFAULT_METRICS)
    test = sweep.get("tolerance") if sweep else None
    tolerances = {m: resolve_tolerance(m, test=test) for m in metrics}
    repeats = sweep.get("repeat") if sweep and sweep.get("repeat") else 1
    return metrics, tolerances, repeats


def calibrate_suite(
    pytest_args: Sequence[str],
    *,
    runs: int,
    output_dir: Path,
    suite: Suite | None,
    target: float = DEFAULT_TARGET,
    timeout_s: float = 3600.0,
    progress: Callable[[str], None] | None = None,
    runner: Callable[..., subprocess.CompletedProcess[bytes]] = subprocess.run,
    record: BaselineStore | None = None,
    interval_s: float = 0.0,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[Calibration, Recording | None]:
    """Run the suite ``runs`` times; its calibration, and with ``record`` the baselines
    written from all runs (each run one launch: ``run/recording.py``).

    ``interval_s`` pauses between runs: a shared box's noise is not stationary (quiet
    stretches, then whole runs 20-30 % slower), so runs taken back to back can all fall in one
    stretch and under-state the spread the gate will meet."""
    if not 2 <= runs <= MAX_RUNS:
        raise CalibrateError(f"-n/--runs must be between 2 and {MAX_RUNS}, got {runs}")
    if not 0 <= interval_s <= MAX_INTERVAL_S:
        raise CalibrateError(
            f"--interval must be between 0 and {MAX_INTERVAL_S:g} s, got {interval_s:g}"
        )
    metrics, tolerances, repeats = gate_settings(suite)
    results = []
    for i in range(runs):
        if i and interval_s:
            if progress is not None:
                progress(f"pausing {interval_s:g} s before the next run (--interval)")
            sleep(interval_s)
        out = output_dir / f"run-{i + 1}"
        if progress is not None:
            progress(f"calibration run {i + 1}/{runs} -> {out}")
        # a recording keeps each launch's probe answers, as --llmperf-update would
        args = [*pytest_args, PROBE_FLAG] if record is not None else list(pytest_args)
        results.append(run_suite(args, out, timeout_s=timeout_s, runner=runner))
    cal = calibrate(
        [[s for f in run for s in f.sweeps] for run in results],
        metrics=metrics,
        tolerances=tolerances,
        repeats=repeats,
        target=target,
    )
    if record is None:
        return cal, None
    return cal, record_runs(results, record, git_commit=git_commit())
