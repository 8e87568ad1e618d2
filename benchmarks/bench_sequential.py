"""Sequential verdicts against today's fixed re-runs, through the whole plugin path (figures only).

Every run is a real pytest session on the simulator (launch, HTTP, client, validity, verdicts,
relaunches exactly as the plugin does them) with GPU-like noise: ``--sim-noise gpu-shared``
(per-launch speed sd 15 %, within-run drift sd 10 %) with the drift redrawn every
``--drift-period`` seconds (default 3). The suite is one server at levels 1, 4, 16, judging
output throughput (5 % tolerance).

One baseline is recorded (``--llmperf-update``, ``baseline_repeat`` launches, each measuring the
whole sweep so that the launch residuals are recorded too) and shared by both procedures:

* **before**: today's defaults, ``sequential = false`` and ``adjust = "none"`` (a point is
  re-run up to ``max_reruns`` times while inconclusive);
* **after**: ``sequential = true`` and ``adjust = "auto"`` (launches added only while a point is
  undecided, up to ``launch_budget``).

Then ``--runs`` runs of each case: unchanged; C=16 25 % slower (``--sim-slowdown 9-16:1.362``,
steps whose batch holds 9-16 requests take 1.362 times as long); C=16 10 % slower
(``9-16:1.1266``). The factors are calibrated on the quiet simulator so that C=16's output
throughput drops by 25.7 % and 10.2 % (a level's first and last steps hold fewer requests, so
steps 4/3 and 10/9 as long drop it by only 23.5 % and 8.9 %).

``--passes N`` records and judges with ``baseline_passes = N``: each launch measures its levels
in N interleaved passes, and a launch-adjusted point is judged on its launches' median passes.
``--passes auto``, or no ``--passes`` (the plugin's default), leaves the choice to the plugin,
which takes one pass for the simulator's 1 s launches; ``--load-time S`` makes every simulated
launch really take ``S`` seconds to load (``--sim-load-time``), so that ``auto`` has a start-up
to choose from (the cost column then counts 300 s a launch instead of the ``S`` the wall
already holds).
Printed per procedure and case: runs with a false failure (any failed point, unchanged case),
undecided points, runs caught exactly (only C=16 failed), server launches per run (distinct
launch ids in results.json) and wall time per run, and ``wall + launches x 300 s``: the cost of
a run where each launch costs 300 s (a big model's load). That cost is virtual: added by
arithmetic, the simulator does not wait for it.

``--engine sglang`` runs on the real SGLang server on this CPU instead
(``LLMPERF_SGLANG_PYTHON``; levels 1, 2, 4 of 32 in / 16 out), with the noise this box gives.
Its cases are ``unchanged`` and caps on running requests (``real_cases.py``): ``cap3``
launches the judged runs' server with ``--max-running-requests 3`` (the cap speculative decoding
brings, on a small scale), so at C=4 one request of four waits while C=1 and C=2 are untouched;
caught exactly means only C=4 failed. ``capK`` queues one request at C=K+1 and ``capK@L`` L-K at
C=L; the sweep then has that level too, recording included. The drop each makes is whatever
this CPU gives, printed per run from the fail message; every point that did not pass prints
what it said.
``--launch-budget N`` sets ``launch_budget`` for the recording and the runs alike.

    python benchmarks/bench_sequential.py --runs 3
    LLMPERF_SGLANG_PYTHON=.../venv/bin/python python benchmarks/bench_sequential.py \
        --engine sglang --runs 5 --procedures after
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
# the level each case slows (caught exactly: only it failed)
SLOW_AT = {"25": 16, "10": 16}
SUITE = """
[[server]]
name = "plain"
model = "sim/qwen-moe"
args = ["--stream-interval", "4"]

[sweep]
levels = [1, 4, 16]
input_len = 128
output_len = 64
metrics = ["output_throughput"]
{lines}
"""
# ``--engine sglang``: the real SGLang server on this CPU (LLMPERF_SGLANG_PYTHON, its model32k
# next to the venv), at levels 1, 2, 4 of 32 in / 16 out. A case adds server flags ({extra}).
SUITE_REAL = """
[[server]]
name = "plain"
model = {model}
python = {python}
env = {{ SGLANG_USE_CPU_ENGINE = "1" }}
args = ["--device", "cpu", "--attention-backend", "torch_native", "--sampling-backend",
        "pytorch", "--disable-cuda-graph", "--max-total-tokens", "65536", "--sleep-on-idle",
        "--enable-metrics"{extra}]
launch_timeout_s = 300

[sweep]
levels = {levels}
input_len = 32
output_len = 16
metrics = ["output_throughput"]
{lines}
"""
PROCEDURES = {
    "before": ["sequential = false", 'adjust = "none"'],
    "after": ["sequential = true", 'adjust = "auto"'],
}
LAUNCH_COST_S = 300.0
NOTED = ("baseline_passes = auto", "recording:")  # what a recording says it chose


def pytest_run(target: Path, base: Path, out: Path, sim: str | None, *, update: bool) -> dict:
    """One pytest session; ``sim``: the simulator's noise arguments (None: the real server).
    Keeps what each point that did not pass said."""
    cmd = [
        sys.executable, "-m", "pytest", str(target), "-q", "-p", "no:cacheprovider",
        "-p", "no:randomly", "--llmperf-baseline-dir", str(base), "--llmperf-output-dir", str(out),
    ]  # fmt: skip
    if sim is not None:
        cmd += ["--llmperf-simulate", "--llmperf-sim-args", sim]
    if update:
        cmd.append("--llmperf-update")
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False,
                          cwd=target)  # fmt: skip
    wall = time.monotonic() - t0
    path = out / "results.json"
    results = json.loads(path.read_text()) if path.exists() else None
    verdicts: dict[int, str] = {}
    launches: set[str] = set()
    notes: set[str] = set()
    said: list[str] = []
    if results is not None:
        for check in results.get("checks", []):
            if check["kind"] == "point":
                verdicts[check["concurrency"]] = check["verdict"]
                if check["verdict"] != "pass":
                    said.append(f"C={check['concurrency']}: {check['green_means']}")
        for sweep in results["sweeps"]:
            levels = list(sweep["levels"])
            for reps in sweep.get("repeats", {}).values():
                levels += reps
            launches |= {lv["launch"] for lv in levels if lv.get("launch")}
            notes |= {n for lv in levels for n in lv.get("notes", []) if n.startswith(NOTED)}
    tail = (proc.stdout + proc.stderr)[-3000:]  # a session that never started says why on stderr
    return {"verdicts": verdicts, "launches": len(launches), "wall": wall, "rc": proc.returncode,
            "tail": tail, "said": said, "notes": sorted(notes)}  # fmt: skip


def recorded_passes(base: Path) -> set[int]:
    """The passes a launch the recorded entries say they measured (1: no pass fields)."""
    found: set[int] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("launch_residual"), dict):
                found.add(int(node["launch_residual"].get("passes", 1)))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    for path in base.rglob("*.json"):
        walk(json.loads(path.read_text()))
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20, help="runs per procedure and case")
    ap.add_argument("--drift-period", type=float, default=3.0)
    ap.add_argument("--time-scale", type=float, default=4.0, help="--sim-time-scale")
    ap.add_argument("--cases", default="unchanged,25,10")
    ap.add_argument("--procedures", default="before,after")
    ap.add_argument("--verbose", action="store_true", help="print the end of odd runs")
    ap.add_argument("--passes", default=None,
                    help="baseline_passes: a number, or auto (unset: the plugin's default, "
                    "auto)")  # fmt: skip
    ap.add_argument("--launch-budget", type=int, default=None,
                    help="launch_budget (unset: the plugin's default)")  # fmt: skip
    ap.add_argument("--load-time", type=float, default=0.0,
                    help="--sim-load-time: seconds each simulated launch really loads")  # fmt: skip
    ap.add_argument("--engine", choices=("sim", "sglang"), default="sim")
    ap.add_argument("--recordings", type=int, default=1,
                    help="recordings made, each its own baseline; the runs judge against the "
                    "first that added launches, else the last")  # fmt: skip
    ap.add_argument("--rerecord", action="store_true",
                    help="each recording after the first re-records the first's baseline "
                    "(--llmperf-update over its entries, as a user re-records), so auto "
                    "passes follow the ratio its entries show; the runs judge against the "
                    "last")  # fmt: skip
    ap.add_argument("--until-grown", action="store_true",
                    help="stop making recordings once one added launches")  # fmt: skip
    args = ap.parse_args()
    global LEVELS, SUITE
    if args.engine == "sglang":
        python = os.environ.get("LLMPERF_SGLANG_PYTHON", "")
        if not python:
            raise SystemExit("--engine sglang needs LLMPERF_SGLANG_PYTHON (sglang-cpu.sh's venv)")
        model = str(Path(python).parent.parent.parent / "model32k")
        if args.cases == ap.get_default("cases"):
            args.cases = "unchanged,cap3"
        names = args.cases.split(",")
        LEVELS = real_cases.levels(names)  # the recording holds every case's level
        SLOW_AT.update({n: real_cases.slow_at(n) for n in names if n != "unchanged"})
        SUITE = (
            SUITE_REAL.replace("{model}", json.dumps(model))
            .replace("{python}", json.dumps(python))
            .replace("{levels}", json.dumps(list(LEVELS)))
        )
    if args.launch_budget is not None:
        for lines in PROCEDURES.values():
            lines.append(f"launch_budget = {int(args.launch_budget)}")
    if args.passes is not None:
        passes = json.dumps(args.passes) if args.passes == "auto" else str(int(args.passes))
        for lines in PROCEDURES.values():
            lines.append(f"baseline_passes = {passes}")
    noise = (f"--sim-noise gpu-shared --sim-drift-period {args.drift_period} "
             f"--sim-time-scale {args.time_scale}")  # fmt: skip
    if args.load_time:
        noise += f" --sim-load-time {args.load_time}"
    cases: dict[str, str | None] = {
        "unchanged": noise if args.engine == "sim" else None,
        "25": f"{noise} --sim-slowdown 9-16:1.362",
        "10": f"{noise} --sim-slowdown 9-16:1.1266",
    }  # a real-server case: None, its flags from real_cases
    if args.engine == "sim" and not set(args.cases.split(",")) <= set(cases):
        raise SystemExit(f"--cases: the simulator's cases are {', '.join(cases)}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        base = root / "baselines"
        target = root / "suite"
        target.mkdir()
        (target / "test_sweep.py").write_text(
            "def test_sweep(llmperf_point):\n    llmperf_point.assert_baseline()\n"
        )
        suite = target / "llmperf.toml"
        suite.write_text(SUITE.format(lines="\n".join(PROCEDURES["after"]), extra=""))
        chosen = None
        for j in range(args.recordings):
            base = root / f"baselines-{0 if args.rerecord else j}"
            rec = pytest_run(target, base, root / f"rec-{j}", cases["unchanged"], update=True)
            print(f"baseline {j + 1} recorded in {rec['wall']:.0f} s, {rec['launches']} launches "
                  f"(exit {rec['rc']})", flush=True)  # fmt: skip
            for note in rec["notes"]:
                print(f"  {note}", flush=True)
            print(f"  passes a launch recorded: {sorted(recorded_passes(base))}", flush=True)
            if rec["rc"] != 0:
                print(rec["tail"])
                raise SystemExit(1)
            if args.rerecord:
                chosen = base
            elif chosen is None and any(n.startswith("recording:") for n in rec["notes"]):
                chosen = base
                if args.until_grown:
                    break
        base = chosen or base
        print(f"  the runs judge against {base.name}", flush=True)
        print(f"  passes a launch recorded: {sorted(recorded_passes(base))}", flush=True)
        # Cases take turns run by run, so a box that drifts over the sitting weighs on each alike.
        for proc in args.procedures.split(","):
            labels = args.cases.split(",")
            done: dict[str, list[dict]] = {label: [] for label in labels}
            for i in range(args.runs):
                for label in labels:
                    suite.write_text(
                        SUITE.format(
                            lines="\n".join(PROCEDURES[proc]),
                            extra=real_cases.flags(label) if args.engine == "sglang" else "",
                        )
                    )
                    r = pytest_run(target, base, root / f"{proc}-{label}-{i}", cases.get(label),
                                   update=False)  # fmt: skip
                    done[label].append(r)
                    print(f"  {proc} {label} run {i + 1}: {r['wall']:.0f} s, {r['launches']} "
                          f"launches, {r['verdicts']}", flush=True)  # fmt: skip
                    for line in r["said"]:
                        print(f"    {line}", flush=True)
                    if args.verbose and (r["rc"] not in (0, 1) or len(r["verdicts"]) < len(LEVELS)):
                        print(r["tail"], flush=True)
            rows.extend((proc, label, done[label]) for label in labels)
    print()
    noise = (
        f"gpu-shared noise, drift redrawn every {args.drift_period} s"
        if args.engine == "sim"
        else "real SGLang on this CPU, its own noise"
    )
    print(f"{args.runs} runs each; {noise}; "
          f"cost = wall + launches x ({LAUNCH_COST_S:.0f} s - the {args.load_time:g} s load "
          f"the wall holds) (virtual, by arithmetic)")  # fmt: skip
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
