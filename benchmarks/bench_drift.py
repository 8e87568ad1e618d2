"""A regression that creeps in 2 % a run, caught by the drift rule over real simulated runs.

Two histories of ``--runs`` (30) pytest sessions of a one-point suite on the simulator: in the
*drift* one, from run ``--start`` (15) on, each run's server is ``--drift`` (2 %) slower than
the undrifted speed per drifted run (``--sim-time-scale 1 / (1 - 0.02·k)``); the *unchanged*
one never changes. Every run gets realistic run-to-run noise: a fresh launch speed
(``--sim-launch-speed-sd``, 1.5 %) on top of what a busy machine does to a real-time server.
Each run's p50-free ``output_throughput`` at the one level is read from its results.json and
kept in ``--values`` (JSON; ``--reuse`` judges a kept file again without measuring).

The drift rule (verdicts/drift.py) then judges each history. Printed: each run's verdict,
the run the rule predicts the drift is declared at (``predicted_detection`` from the drift and
the threshold the window gave at the drift's first run), the run it was declared at, the
change point and bisect range, and the alarms in the unchanged history (there should be none).

    python benchmarks/bench_drift.py [--runs 30] [--start 15] [--drift 0.02] [--values F]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from pytest_llmperf.verdicts.drift import (
    DriftRule,
    RunPoint,
    bisect_range,
    change_points,
    detect,
    predicted_detection,
)
from pytest_llmperf.verdicts.verdict import Verdict

LEVEL = 4
SUITE = f"""
[[server]]
name = "plain"
model = "sim/qwen-moe"
args = []

[sweep]
levels = [{LEVEL}]
input_len = 64
output_len = 128
requests = 32
metrics = ["output_throughput"]
"""
TEST = """
def test_sweep(llmperf_point):
    llmperf_point.assert_baseline()
"""


def measure(suite: Path, seed: int, time_scale: float, launch_sd: float) -> float:
    """One pytest session of the suite; its point's output_throughput."""
    flags = f"--sim-seed {seed} --sim-launch-speed-sd {launch_sd} --sim-time-scale {time_scale}"
    cmd = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--llmperf-update",
        "--llmperf-baseline-repeat", "1", "--llmperf-sim-args", flags,
    ]  # fmt: skip
    done = subprocess.run(cmd, cwd=suite, timeout=600, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"run failed ({flags}):\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}")
    run = json.loads((suite / "llmperf-results" / "results.json").read_text())
    level = next(lv for lv in run["sweeps"][0]["levels"] if lv["max_concurrency"] == LEVEL)
    return float(level["output_throughput"])


def simulate(args: argparse.Namespace) -> dict[str, list[float]]:
    values: dict[str, list[float]] = {"drift": [], "unchanged": []}
    with tempfile.TemporaryDirectory() as tmp:
        suite = Path(tmp)
        (suite / "llmperf.toml").write_text(SUITE)
        (suite / "test_perf.py").write_text(TEST)
        for i in range(1, args.runs + 1):
            for name in values:
                k = max(0, i - args.start + 1) if name == "drift" else 0
                scale = 1 / (1 - args.drift * k)
                v = measure(suite, seed=1000 * (name == "drift") + i, time_scale=scale,
                            launch_sd=args.launch_sd)  # fmt: skip
                values[name].append(v)
                print(f"  {name:9} run #{i:2}: time scale {scale:.3f} -> {v:.1f} tok/s", flush=True)
    return values


def judge(name: str, values: list[float], args: argparse.Namespace) -> dict[str, object]:
    rule = DriftRule()
    points = [
        RunPoint(f"run #{i}", v, commit=f"{name[:1]}{i:02d}") for i, v in enumerate(values, 1)
    ]
    subject = f"output_throughput at C={LEVEL} of plain ({name})"
    decisions = detect(points, "higher", rule, subject=subject, unit="tok/s")
    print(f"\n{name}:")
    for d in decisions:
        mark = " <- change point" if d.index in change_points(decisions) else ""
        print(f"  {d.point.label:8} {d.verdict.value:12} {d.sentence}{mark}")
    declared = next((d.index + 1 for d in decisions if d.verdict is Verdict.FAIL), None)
    alarms = sum(d.verdict is Verdict.FAIL for d in decisions)
    out: dict[str, object] = {"declared": declared, "fail_runs": alarms}
    if name == "drift":
        at_start = decisions[args.start - 1].threshold or rule.floor
        out["threshold_at_start"] = at_start
        out["predicted"] = predicted_detection(args.start, args.drift, at_start, rule.consecutive)
        br = bisect_range(points, decisions)
        if br is not None:
            out["bisect"] = [p.label for p in br.between]
            out["bisect_command"] = br.command()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--start", type=int, default=15, help="first drifted run (1-based)")
    ap.add_argument("--drift", type=float, default=0.02, help="slowdown per drifted run")
    ap.add_argument("--launch-sd", type=float, default=0.015, help="per-launch speed noise")
    ap.add_argument("--values", type=Path, default=Path("drift_values.json"))
    ap.add_argument("--reuse", action="store_true", help="judge --values without measuring")
    args = ap.parse_args()
    if args.reuse:
        values = json.loads(args.values.read_text())
    else:
        values = simulate(args)
        args.values.write_text(json.dumps(values, indent=1))
    drift = judge("drift", values["drift"], args)
    flat = judge("unchanged", values["unchanged"], args)
    print(
        f"\ndrift {100 * args.drift:g} %/run from run #{args.start}: threshold at run "
        f"#{args.start} {100 * float(drift['threshold_at_start']):.1f} % -> predicted "  # type: ignore[arg-type]
        f"declaration at run #{drift['predicted']}, declared at run #{drift['declared']}; "
        f"bisect runs {drift.get('bisect')} ({drift.get('bisect_command')})"
    )
    print(f"unchanged: {flat['fail_runs']} regression verdicts in {args.runs} runs")
    ok = drift["declared"] is not None and flat["fail_runs"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
