"""A regression that creeps in 2 % a run, caught by the drift rule over real simulated runs.

Two histories of ``--runs`` (30) pytest sessions of a one-point suite on the simulator: in the
*drift* one, from run ``--start`` (15) on, each run's server is ``--drift`` (2 %) slower than
the undrifted speed per drifted run (``--sim-time-scale 1 / (1 - 0.02·k)``); the *unchanged*
one never changes. Every run gets realistic run-to-run noise: a fresh launch speed
(``--sim-launch-speed-sd``, 1.5 %) on top of what a busy machine does to a real-time server.
Each session appends itself to its history store (``--llmperf-history``, one SQLite file per
history under ``--out``, its commit from ``LLMPERF_GIT_COMMIT``); the rule then reads the
point's ``output_throughput`` series back from the store (also written to
``--out``/series.json; ``--reuse`` judges the stores again without measuring). A run the busy
machine starved the client of is measured again (``TRIES``); one still invalid leaves no value
in the store, as in any history.

The drift rule (verdicts/drift.py) then judges each history. Printed: each run's verdict,
the run the rule predicts the drift is declared at (``predicted_detection`` from the drift and
the threshold the window gave at the drift's first run), the run it was declared at, the
change point and bisect range, and the alarms in the unchanged history (there should be none).

    python benchmarks/bench_drift.py [--runs 30] [--start 15] [--drift 0.02] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_llmperf.history.records import PointKey
from pytest_llmperf.history.store import HistoryStore
from pytest_llmperf.verdicts.drift import (
    BisectRange,
    DriftRule,
    RunPoint,
    bisect_range,
    change_points,
    detect,
    predicted_detection,
)
from pytest_llmperf.verdicts.verdict import Verdict

LEVEL = 4
TRIES = 3  # sessions per run when the busy machine starves the client
SUITE = f"""
[[server]]
name = "plain"
model = "sim/qwen-moe"
args = []

[sweep]
levels = [{LEVEL}]
input_len = 64
output_len = 64
requests = 16
metrics = ["output_throughput"]
"""
TEST = """
def test_sweep(llmperf_point):
    llmperf_point.assert_baseline()
"""


def measure(suite: Path, history: Path, commit: str, seed: int, scale: float, sd: float) -> bool:
    """One pytest session of the suite, appended to ``history``; False when its point was
    invalid or the machine too busy to measure it ``TRIES`` times over (a starved client: the
    store keeps no value for it, as a real history would not)."""
    flags = f"--sim-seed {seed} --sim-launch-speed-sd {sd} --sim-time-scale {scale}"
    cmd = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--llmperf-update",
        "--llmperf-baseline-repeat", "1", "--llmperf-history", str(history),
        "--llmperf-sim-args", flags,
    ]  # fmt: skip
    env = {**os.environ, "LLMPERF_GIT_COMMIT": commit}
    for _ in range(TRIES):
        done = subprocess.run(cmd, cwd=suite, timeout=600, capture_output=True, text=True, env=env)
        if done.returncode == 0:
            return True
        if "INVALID" not in done.stdout and "TOO BUSY" not in done.stdout:
            out = f"{done.stdout[-3000:]}\n{done.stderr[-2000:]}"
            raise SystemExit(f"run failed ({flags}):\n{out}")
    return False


def stored_series(out: Path) -> dict[str, list[dict[str, object]]]:
    """Each history's series of the one point as its store gives it back (oldest first)."""
    series: dict[str, list[dict[str, object]]] = {}
    for name in ("drift", "unchanged"):
        with HistoryStore.open(str(out / f"{name}.sqlite")) as db:
            runs = db.runs(limit=1)
            if not runs:
                raise SystemExit(f"{out / name}.sqlite holds no run")
            where = runs[0].provenance["servers"]["plain"]
            key = PointKey("plain", where["workload"], LEVEL, where["hardware_key"])
            series[name] = [
                {"commit": p.git_commit, "value": p.value, "run_id": p.run_id}
                for p in db.series(key, "output_throughput")
            ]
    return series


def simulate(args: argparse.Namespace, out: Path) -> dict[str, list[dict[str, object]]]:
    """Both histories measured run by run (interleaved, so the machine's load hits both alike),
    each in its own store; their series as the store gives them back."""
    stores = {name: out / f"{name}.sqlite" for name in ("drift", "unchanged")}
    for path in stores.values():
        path.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        suite = Path(tmp)
        (suite / "llmperf.toml").write_text(SUITE)
        (suite / "test_perf.py").write_text(TEST)
        for i in range(1, args.runs + 1):
            for name, store in stores.items():
                k = max(0, i - args.start + 1) if name == "drift" else 0
                scale = args.time_scale / (1 - args.drift * k)
                commit = f"{name[0]}{i:02d}"
                seed = 1000 * (name == "drift") + i
                ok = measure(suite, store, commit, seed, scale, args.launch_sd)
                state = "measured" if ok else "INVALID (not kept)"
                print(f"  {name:9} run #{i:2}: time scale {scale:.3f} {state}", flush=True)
    return stored_series(out)


@dataclass
class Judged:
    declared: int | None  # the first run judged a regression
    fail_runs: int
    bad_runs: int  # runs beyond the threshold (a lone one is inconclusive)
    noise: float  # run-to-run relative stdev of the runs before the drift
    thresholds: list[float] = field(default_factory=list)  # each drifted run's until declared
    bisect: BisectRange | None = None


def judge(name: str, rows: list[dict[str, Any]], args: argparse.Namespace) -> Judged:
    rule = DriftRule()
    # the label is the simulated history's run number (its commit), so the printed runs are
    # the ones the drift was applied to even where an invalid run left a gap
    points = [RunPoint(f"run #{int(r['commit'][1:])}", r["value"], r["commit"]) for r in rows]
    subject = f"output_throughput at C={LEVEL} of plain ({name})"
    decisions = detect(points, "higher", rule, subject=subject, unit="tok/s")
    print(f"\n{name}:")
    for d in decisions:
        mark = " <- change point" if d.index in change_points(decisions) else ""
        print(f"  {d.point.label:8} {d.verdict.value:12} {d.sentence}{mark}")
    number = {d.index: int(d.point.label[5:]) for d in decisions}
    declared = next((number[d.index] for d in decisions if d.verdict is Verdict.FAIL), None)
    before = [p.value for p in points if int(p.label[5:]) < args.start]
    return Judged(
        declared=declared,
        fail_runs=sum(d.verdict is Verdict.FAIL for d in decisions),
        bad_runs=sum(d.bad for d in decisions),
        noise=statistics.stdev(before) / statistics.fmean(before),
        thresholds=[
            d.threshold
            for d in decisions
            if d.threshold is not None and args.start <= number[d.index] <= (declared or args.runs)
        ],
        bisect=bisect_range(points, decisions),
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--start", type=int, default=15, help="first drifted run (1-based)")
    ap.add_argument("--drift", type=float, default=0.02, help="slowdown per drifted run")
    ap.add_argument("--launch-sd", type=float, default=0.015, help="per-launch speed noise")
    ap.add_argument(
        "--time-scale", type=float, default=8.0, help="the undrifted --sim-time-scale: a slower "
        "model keeps a busy machine's client lag small next to TTFT and ITL",
    )  # fmt: skip
    ap.add_argument("--out", type=Path, default=Path("drift-bench"), help="stores and series")
    ap.add_argument(
        "--reuse", action="store_true", help="judge the stores in --out again, measuring nothing"
    )
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    values = stored_series(args.out) if args.reuse else simulate(args, args.out)
    (args.out / "series.json").write_text(json.dumps(values, indent=1))
    drift = judge("drift", values["drift"], args)
    flat = judge("unchanged", values["unchanged"], args)
    rule = DriftRule()

    def predicted(threshold: float) -> str:
        run = predicted_detection(args.start, args.drift, threshold, rule.consecutive, rule.window)
        return f"#{run} at {100 * threshold:.1f} %"

    print(
        f"\nrun-to-run noise before run #{args.start}: drift series {100 * drift.noise:.1f} %, "
        f"unchanged series {100 * flat.noise:.1f} %"
    )
    ts = drift.thresholds
    print(
        f"drift {100 * args.drift:g} %/run from run #{args.start}: predicted declaration "
        f"{predicted(ts[0])} (the threshold at run #{args.start}); the threshold moved "
        f"between {100 * min(ts):.1f} and {100 * max(ts):.1f} % until declared: "
        f"{predicted(min(ts))} .. {predicted(max(ts))}; declared at run #{drift.declared}"
    )
    if drift.bisect is not None:
        br = drift.bisect
        print(
            f"change point {br.bad.label}; bisect {[p.label for p in br.between]} ({br.command()})"
        )
    print(
        f"kept runs: drift {len(values['drift'])}/{args.runs}, "
        f"unchanged {len(values['unchanged'])}/{args.runs} (the rest were invalid)"
    )
    print(
        f"unchanged: {flat.fail_runs} regression verdicts, {flat.bad_runs} lone bad runs "
        f"in {args.runs} runs"
    )
    ok = drift.declared is not None and flat.fail_runs == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
