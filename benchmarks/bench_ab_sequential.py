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
10.2 %). ``--passes N`` sets ``[[ab]] passes`` for the "after" procedure (``auto``, also
when ``--passes`` is not given, the plugin's default: the plugin chooses, one pass for the
simulator's 1 s launches; ``--load-time S`` makes every simulated launch really load for ``S``
seconds, ``--sim-load-time``, so that it has a start-up to choose from; the cost column then
counts 300 s a launch instead of the ``S`` the wall holds).
Printed per procedure and case: runs with a false failure (any failed level, unchanged case),
undecided (inconclusive) points, runs caught exactly (only C=16 failed), server launches per
run (two a round, from ``ab.json``), wall time per run, and ``wall + launches x 300 s``: the
cost of a run where each launch costs 300 s (a big model's load). That cost is virtual: added
by arithmetic, the simulator does not wait for it.

``--engine sglang`` runs both sides on the real SGLang server on this CPU instead
(``LLMPERF_SGLANG_PYTHON``, sglang-cpu.sh's venv; 32 in / 16 out), with the noise this box
gives. Its cases: ``unchanged`` and caps on running requests (``real_cases.py``): ``cap3``,
"new" launched with ``--max-running-requests 3`` at levels 1, 2, 4 (C=4 queues one request of
four); ``capK`` queues one request at C=K+1 and ``capK@L`` L-K at C=L, that level added.
Caught exactly: only the capped level failed.

    python benchmarks/bench_ab_sequential.py --runs 5
    LLMPERF_SGLANG_PYTHON=.../venv/bin/python python benchmarks/bench_ab_sequential.py \
        --engine sglang --cases unchanged,cap7 --runs 2 --procedures after
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import real_cases

LEVELS: tuple[int, ...] = (1, 4, 16)
# the judgement both engines' suites end with
AB = """
[[ab]]
candidate = "new"
reference = "old"
tolerance = 0.05
{ab}
"""
# the level each case slows (caught exactly: only it failed)
SLOW_AT = {"25": 16, "10": 16}
SUITE = (
    """
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
"""
    + AB
)
# ``--engine sglang``: both sides the real SGLang server on this CPU; a case adds "new"'s flags
REAL_SERVER = """
[[server]]
name = "{name}"
model = {model}
python = {python}
env = {{{{ SGLANG_USE_CPU_ENGINE = "1" }}}}
args = ["--device", "cpu", "--attention-backend", "torch_native", "--sampling-backend",
        "pytorch", "--disable-cuda-graph", "--max-total-tokens", "65536", "--sleep-on-idle",
        "--enable-metrics"{extra}]
launch_timeout_s = 300
"""
REAL_SWEEP = (
    """
[sweep]
levels = {levels}
input_len = 32
output_len = 16
metrics = ["output_throughput"]
{sweep}
"""
    + AB
)
PROCEDURES = {
    "before": {"sweep": "sequential = false", "ab": 'adjust = "none"\nrounds = 4'},
    "after": {"sweep": "", "ab": ""},
}
LAUNCH_COST_S = 300.0


def pytest_run(target: Path, out: Path, sim: str | None) -> dict:
    """One pytest session; ``sim``: the simulator's noise arguments (None: the real server)."""
    cmd = [
        sys.executable, "-m", "pytest", str(target), "-q", "-p", "no:cacheprovider",
        "-p", "no:randomly", "--llmperf-output-dir", str(out),
    ]  # fmt: skip
    if sim is not None:
        cmd += ["--llmperf-simulate", "--llmperf-sim-args", sim]
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
    said = [f"C={p['concurrency']}: {p['message']}" for p in points if p["verdict"] != "pass"]
    return {"verdicts": verdicts, "launches": 2 * rounds, "adjusted": adjusted, "wall": wall,
            "passes": passes, "rc": proc.returncode, "tail": (proc.stdout + proc.stderr)[-3000:],
            "said": said}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20, help="runs per procedure and case")
    ap.add_argument("--drift-period", type=float, default=3.0)
    ap.add_argument("--time-scale", type=float, default=4.0, help="--sim-time-scale")
    ap.add_argument("--cases", default="unchanged,25,10")
    ap.add_argument("--procedures", default="before,after")
    ap.add_argument(
        "--verbose",
        action="store_true",
        help="print what each point that did not pass said, and the end of odd runs",
    )
    ap.add_argument("--passes", default=None,
                    help="[[ab]] passes of 'after': a number, or auto (unset: the plugin's "
                    "default, auto)")  # fmt: skip
    ap.add_argument("--load-time", type=float, default=0.0,
                    help="--sim-load-time: seconds each simulated launch really loads")  # fmt: skip
    ap.add_argument("--engine", choices=("sim", "sglang"), default="sim")
    args = ap.parse_args()
    global LEVELS
    suite_text = SUITE
    if args.engine == "sglang":
        python = os.environ.get("LLMPERF_SGLANG_PYTHON", "")
        if not python:
            raise SystemExit("--engine sglang needs LLMPERF_SGLANG_PYTHON (sglang-cpu.sh's venv)")
        if args.cases == ap.get_default("cases"):
            args.cases = "unchanged,cap3"
        names = args.cases.split(",")
        LEVELS = real_cases.levels(names)
        SLOW_AT.update({n: real_cases.slow_at(n) for n in names if n != "unchanged"})
        model = json.dumps(str(Path(python).parent.parent.parent / "model32k"))
        server = REAL_SERVER.replace("{model}", model).replace("{python}", json.dumps(python))
        sweep = REAL_SWEEP.replace("{levels}", json.dumps(list(LEVELS)))
    noise = (f"--sim-noise gpu-shared --sim-drift-period {args.drift_period} "
             f"--sim-time-scale {args.time_scale}")  # fmt: skip
    if args.load_time:
        noise += f" --sim-load-time {args.load_time}"
    passes = None
    if args.passes is not None:
        passes = json.dumps(args.passes) if args.passes == "auto" else str(int(args.passes))
    cases: dict[str, str | None] = {
        "unchanged": noise if args.engine == "sim" else None,
        "25": f"{noise}; new: --sim-slowdown 9-16:1.362",
        "10": f"{noise}; new: --sim-slowdown 9-16:1.1266",
    }  # a real-server case: None, "new" launched with real_cases' flags
    if args.engine == "sim" and not set(args.cases.split(",")) <= set(cases):
        raise SystemExit(f"--cases: the simulator's cases are {', '.join(cases)}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        target = root / "suite"
        target.mkdir()
        (target / "test_ab.py").write_text("def test_ab(llmperf_ab):\n    llmperf_ab.check()\n")
        suite = target / "llmperf.toml"
        for proc in args.procedures.split(","):
            spec = dict(PROCEDURES[proc])
            if proc == "after" and passes is not None:
                spec["ab"] = f"passes = {passes}"
            for label in args.cases.split(","):
                if args.engine == "sglang":
                    extra = real_cases.flags(label)
                    suite_text = (server.format(name="old", extra="")
                                  + server.format(name="new", extra=extra) + sweep)  # fmt: skip
                suite.write_text(suite_text.format(**spec))
                runs = []
                for i in range(args.runs):
                    r = pytest_run(target, root / f"{proc}-{label}-{i}", cases.get(label))
                    runs.append(r)
                    print(f"  {proc} {label} run {i + 1}: {r['wall']:.0f} s, {r['launches']} "
                          f"launches, {r['passes']} passes, {r['adjusted']} adjusted, "
                          f"{r['verdicts']}",
                          flush=True)  # fmt: skip
                    if args.verbose:
                        for line in r["said"]:
                            print(f"    {line}", flush=True)
                        if r["rc"] not in (0, 1) or len(r["verdicts"]) < len(LEVELS):
                            print(r["tail"], flush=True)
                rows.append((proc, label, runs))
    print()
    noise_said = (
        f"gpu-shared noise, drift redrawn every {args.drift_period} s"
        if args.engine == "sim"
        else "real SGLang on this CPU, its own noise"
    )
    said_passes = "the default (auto)" if args.passes is None else args.passes
    print(f"{args.runs} runs each; 'after' with passes = {said_passes}; {noise_said}; "
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
        caught = "-" if label == "unchanged" else sum(f == [SLOW_AT[label]] for f in fails)
        und = f"{undecided}" + (f" (+{missing} unjudged)" if missing else "")
        print(" | ".join(str(x) for x in (
            proc, label, false_fail, und, caught, f"{launches:.1f}", f"{wall:.0f}",
            f"{wall + launches * (LAUNCH_COST_S - args.load_time):.0f}")))  # fmt: skip


if __name__ == "__main__":
    main()
