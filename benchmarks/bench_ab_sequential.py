"""Sequential A/B rounds against fixed rounds, through the whole plugin path (figures only).

Every run is a real pytest session on the simulator (launch, HTTP, client, validity, rounds and
verdicts exactly as the plugin does them): two servers "old" and "new" (the same simulated
server) at levels 1, 4, 16, judged on output throughput at 5 % tolerance by ``[[ab]] candidate
= "new" reference = "old"``, with GPU-like noise: ``--sim-noise gpu-shared`` (per-launch speed
sd 15 %, within-run drift sd 10 %) with the drift redrawn every ``--drift-period`` seconds
(default 3). Two procedures:

* **before**: ``sequential = false``, ``adjust = "none"``, ``rounds = 4`` (the fixed rounds and
  the paired CI rule);
* **after**: the defaults (``sequential = true``: rounds added until every level is decided, at
  most ``launch_budget`` = 6; ``adjust = "auto"``).

Cases: unchanged; "new" 25 % slower at C=16 (``new: --sim-slowdown 9-16:1.362``, steps whose
batch holds 9-16 requests take 1.362 times as long, calibrated to a 25.7 % drop of output
throughput at C=16 as ``bench_sequential.py`` measured); "new" 10 % slower (``9-16:1.1266``,
10.2 %). ``--passes N`` sets ``[[ab]] passes`` for the "after" procedure (``auto``: the
plugin chooses, one pass for the simulator's 1 s launches; ``--load-time S`` makes every
simulated launch really load for ``S`` seconds, ``--sim-load-time``, so that it has a start-up
to choose from; the cost column then counts 300 s a launch instead of the ``S`` the wall holds).
Printed per procedure and case: runs with a false failure (any failed level, unchanged case),
undecided (inconclusive) points, runs caught exactly (only C=16 failed), server launches per
run (two a round, from ``ab.json``), wall time per run, and ``wall + launches x 300 s``: the
cost of a run where each launch costs 300 s (a big model's load). That cost is virtual: added
by arithmetic, the simulator does not wait for it.

    python benchmarks/bench_ab_sequential.py --runs 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LEVELS = (1, 4, 16)
SLOW = 16
SUITE = """
[[server]]
name = "old"
model = "sim/qwen-moe"
args = ["--stream-interval", "4"]

[[server]]
name = "new"
model = "sim/qwen-moe"
args = ["--stream-interval", "4"]

[sweep]
levels = [1, 4, 16]
input_len = 128
output_len = 64
{sweep}

[[ab]]
candidate = "new"
reference = "old"
tolerance = 0.05
{ab}
"""
PROCEDURES = {
    "before": {"sweep": "sequential = false", "ab": 'adjust = "none"\nrounds = 4'},
    "after": {"sweep": "", "ab": ""},
}
LAUNCH_COST_S = 300.0


def pytest_run(target: Path, out: Path, sim: str) -> dict:
    cmd = [
        sys.executable, "-m", "pytest", str(target), "-q", "-p", "no:cacheprovider",
        "-p", "no:randomly", "--llmperf-simulate", "--llmperf-output-dir", str(out),
        "--llmperf-sim-args", sim,
    ]  # fmt: skip
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False,
                          cwd=target)  # fmt: skip
    wall = time.monotonic() - t0
    path = out / "ab.json"
    points = json.loads(path.read_text())["points"] if path.exists() else []
    verdicts = {p["concurrency"]: p["verdict"] for p in points}
    rounds = max((len(p["order"]) for p in points), default=0)
    adjusted = sum(bool(p.get("adjusted")) for p in points)
    passes = max((p.get("passes") or 1 for p in points), default=0)
    return {"verdicts": verdicts, "launches": 2 * rounds, "adjusted": adjusted, "wall": wall,
            "passes": passes, "rc": proc.returncode, "tail": proc.stdout[-3000:]}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20, help="runs per procedure and case")
    ap.add_argument("--drift-period", type=float, default=3.0)
    ap.add_argument("--time-scale", type=float, default=4.0, help="--sim-time-scale")
    ap.add_argument("--cases", default="unchanged,25,10")
    ap.add_argument("--procedures", default="before,after")
    ap.add_argument("--verbose", action="store_true", help="print the end of odd runs")
    ap.add_argument("--passes", default="1", help="[[ab]] passes of 'after': a number, or auto")
    ap.add_argument("--load-time", type=float, default=0.0,
                    help="--sim-load-time: seconds each simulated launch really loads")  # fmt: skip
    args = ap.parse_args()
    noise = (f"--sim-noise gpu-shared --sim-drift-period {args.drift_period} "
             f"--sim-time-scale {args.time_scale}")  # fmt: skip
    if args.load_time:
        noise += f" --sim-load-time {args.load_time}"
    passes = json.dumps(args.passes) if args.passes == "auto" else str(int(args.passes))
    cases = {
        "unchanged": noise,
        "25": f"{noise}; new: --sim-slowdown 9-16:1.362",
        "10": f"{noise}; new: --sim-slowdown 9-16:1.1266",
    }
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        target = root / "suite"
        target.mkdir()
        (target / "test_ab.py").write_text("def test_ab(llmperf_ab):\n    llmperf_ab.check()\n")
        suite = target / "llmperf.toml"
        for proc in args.procedures.split(","):
            spec = dict(PROCEDURES[proc])
            if proc == "after" and passes != "1":
                spec["ab"] = f"passes = {passes}"
            suite.write_text(SUITE.format(**spec))
            for label in args.cases.split(","):
                runs = []
                for i in range(args.runs):
                    r = pytest_run(target, root / f"{proc}-{label}-{i}", cases[label])
                    runs.append(r)
                    print(f"  {proc} {label} run {i + 1}: {r['wall']:.0f} s, {r['launches']} "
                          f"launches, {r['passes']} passes, {r['adjusted']} adjusted, "
                          f"{r['verdicts']}",
                          flush=True)  # fmt: skip
                    if args.verbose and (r["rc"] not in (0, 1) or len(r["verdicts"]) < 3):
                        print(r["tail"], flush=True)
                rows.append((proc, label, runs))
    print()
    print(f"{args.runs} runs each; 'after' with {args.passes} pass(es); gpu-shared noise, "
          f"drift redrawn every {args.drift_period} s; "
          f"cost = wall + launches x ({LAUNCH_COST_S:.0f} s - the {args.load_time:g} s load the "
          f"wall holds) (virtual, by arithmetic)")  # fmt: skip
    head = ("procedure", "case", "false fail", "undecided pts", "caught exactly", "launches/run",
            "wall s/run", "cost s/run")  # fmt: skip
    print(" | ".join(head))
    for proc, label, runs in rows:
        fails = [sorted(c for c, v in r["verdicts"].items() if v == "fail") for r in runs]
        undecided = sum(v == "inconclusive" for r in runs for v in r["verdicts"].values())
        missing = sum(len(LEVELS) - len(r["verdicts"]) for r in runs)
        launches = statistics.fmean(r["launches"] for r in runs)
        wall = statistics.fmean(r["wall"] for r in runs)
        false_fail = sum(bool(f) for f in fails) if label == "unchanged" else "-"
        caught = "-" if label == "unchanged" else sum(f == [SLOW] for f in fails)
        und = f"{undecided}" + (f" (+{missing} unjudged)" if missing else "")
        print(" | ".join(str(x) for x in (
            proc, label, false_fail, und, caught, f"{launches:.1f}", f"{wall:.0f}",
            f"{wall + launches * (LAUNCH_COST_S - args.load_time):.0f}")))  # fmt: skip


if __name__ == "__main__":
    main()
