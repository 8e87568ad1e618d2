"""The whole plugin path on the simulator with GPU-like noise (figures only).

Each run is a real pytest session: launch, HTTP, client, validity, re-runs and relaunches
exactly as the plugin does them, with ``--sim-noise gpu-shared`` (per-launch speed sd 15 %,
within-run drift sd 10 %, step jitter, stalls).

``--mode suite`` (default): the shipped ``perf_tests`` at C=1,16,64, 512 in / 128 out. One
baseline is recorded (``--llmperf-update``, default ``baseline_repeat``), then RUNS unchanged
runs, RUNS with plain 25 % slower at C=64 only (``--sim-slowdown 33-64:1.33``) and RUNS with a
10 % drop there (``33-64:1.11``). Printed: runs with any failed test, runs where exactly
``test_sweep[plain-C64]`` failed, runs with an inconclusive verdict, failures by test; and from
the unchanged runs the run-to-run CV of each judged metric per point: bench_serving's whole-run
number (before), the steady-state window's (after), and the launch-adjusted residual.

``--mode attach --url URL``: a one-server suite attached to a real OpenAI-compatible engine
(e.g. llama.cpp's llama-server), levels 1,4,16, 128 in / 64 out: one recording (one
``--llmperf-update`` session, or ``--record-runs K``: ``llmperf calibrate -n K --record``),
RUNS unchanged runs (runs with any failed test), and the same CV table (no injected drop: the
engine's own run-to-run noise).

``--mode ab``: a suite of two servers "old" and "new" (the same simulated server) with
``[[ab]] candidate = "new" reference = "old" rounds = ROUNDS adjust = ADJUST``; the drop is
in "new". Printed: runs with any failure, runs where exactly ``test_ab[new-vs-old-C64]`` failed.
With ``--llama BINARY`` the two servers are real llama-servers launched from their ``command``
(levels 1,4,16, 128 in / 64 out, 16 slots each); cases ``unchanged`` (the same command) and
``cap`` ("new" gets ``-np 4``: four slots, like SGLang capping ``max_running_requests``, so it
can only lose at C=16; printed: runs where exactly ``test_ab[new-vs-old-C16]`` failed).

    python benchmarks/bench_noise.py --runs 20  # adjust = "launch" in perf_tests' [sweep]
    python benchmarks/bench_noise.py --mode ab --runs 20 --rounds 6
    python benchmarks/bench_noise.py --mode ab --cases unchanged,cap --runs 5 --rounds 4 \
        --llama ~/.cache/llmperf-peers/llama.cpp/build/bin/llama-server
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LEVELS = (1, 16, 64)
ATTACH_SUITE = """
[[server]]
name = "engine"
model = "small"
args = []

[sweep]
levels = [1, 4, 16]
input_len = 128
output_len = 64
backend = "openai"
"""
AB_SUITE = """
[[server]]
name = "old"
model = "Qwen/Qwen3.5-122B-A10B"
args = ["--tp-size", "4"]

[[server]]
name = "new"
model = "Qwen/Qwen3.5-122B-A10B"
args = ["--tp-size", "4"]

[sweep]
levels = [1, 16, 64]
input_len = 512
output_len = 128

[[ab]]
candidate = "new"
reference = "old"
rounds = {rounds}
adjust = "{adjust}"
"""
LLAMA_AB_SUITE = """
[[server]]
name = "old"
model = "small"
command = {old}
launch_timeout_s = 120

[[server]]
name = "new"
model = "small"
command = {new}
launch_timeout_s = 120

[sweep]
levels = [1, 4, 16]
input_len = 128
output_len = 64
backend = "openai"

[[ab]]
candidate = "new"
reference = "old"
rounds = {rounds}
adjust = "{adjust}"
"""


def llama_command(binary: str, model: str, slots: int) -> str:
    """A llama-server argv as a TOML array (placeholders filled in by the launcher)."""
    argv = [binary, "-m", model, "-a", "{model}", "--host", "{host}", "--port", "{port}"]
    argv += ["-np", str(slots), "-c", str(512 * slots), "-t", "1", "--no-webui", "--metrics"]
    return json.dumps(argv)


def pytest_run(
    target: Path, base: Path, out: Path, sim_args: str, *, update: bool, extra: list[str]
) -> dict:
    junit = out / "junit.xml"
    cmd = [
        sys.executable, "-m", "pytest", str(target), "-q", "-p", "no:cacheprovider",
        "--llmperf-baseline-dir", str(base), "--llmperf-output-dir", str(out),
        f"--junitxml={junit}", *extra,
    ]  # fmt: skip
    if sim_args:
        cmd += [
            "--llmperf-simulate", "--llmperf-levels", "1,16,64", "--llmperf-input-len", "512",
            "--llmperf-output-len", "128", "--llmperf-sim-args", sim_args,
        ]  # fmt: skip
    if update:
        cmd.append("--llmperf-update")
    t0 = time.monotonic()
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=1800, check=False, cwd=target
    )
    failed = []
    if junit.exists():
        for case in ET.parse(junit).getroot().iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                failed.append(case.get("name", "?"))
    results = out / "results.json"
    return {
        "failed": failed,
        # any casing: A/B messages say INCONCLUSIVE, the warnings summary
        # LLMPerfInconclusiveWarning, baseline points "inconclusive"
        "inconclusive": proc.stdout.lower().count("inconclusive"),
        "s": time.monotonic() - t0,
        "results": json.loads(results.read_text()) if results.exists() else None,
        "tail": proc.stdout[max(proc.stdout.find("problems:"), len(proc.stdout) - 4000, 0) :],
    }


def _first_samples(results: dict) -> dict[tuple[str, int], dict]:
    """(config, C) -> first sample, of each config's main sweep (the workload with the most
    levels; the suite's shared-prefix and multi-turn tests run other workloads)."""
    out = {}
    mains: dict[str, dict] = {}
    for sweep in results["sweeps"]:
        best = mains.get(sweep["config"])
        if best is None or len(sweep["levels"]) > len(best["levels"]):
            mains[sweep["config"]] = sweep
    for sweep in mains.values():
        for lv in sweep["levels"]:
            out[(sweep["config"], lv["max_concurrency"])] = lv
    return out


def _cv(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.fmean(values) if len(values) > 1 else math.nan


def _judged(level: dict, metric: str) -> float | None:
    """The value the verdicts judge: the steady window's throughput, else the whole run's."""
    steady = level.get("steady") or {}
    if metric == "output_throughput" and steady.get("output_throughput"):
        return float(steady["output_throughput"])
    v = level.get(metric)
    return float(v) if v else None


def _pct(x: float) -> str:
    return "      -" if math.isnan(x) else f"{100 * x:5.1f} %"


def cv_report(runs: list[dict | None], levels: tuple[int, ...] = LEVELS) -> None:
    """Run-to-run CV per point of each judged metric: whole-run, steady window, adjusted."""
    per = [_first_samples(r) for r in runs if r]
    if len(per) < 2:
        return
    points = sorted(set.intersection(*(set(p) for p in per)))
    print("run-to-run CV over the unchanged runs (first sample of each point):")
    print("  point       metric              whole-run   judged  launch-adjusted")
    for metric in ("output_throughput", "median_itl_ms", "median_ttft_ms"):
        judged = {pt: [_judged(p[pt], metric) for p in per] for pt in points}
        centers = {
            pt: statistics.fmean(v for v in vals if v) for pt, vals in judged.items() if any(vals)
        }
        for pt in points:
            whole = [p[pt].get(metric) for p in per]
            if any(not v for v in whole) or not all(judged[pt]):
                continue
            resid = []
            for i in range(len(per)):
                q = {
                    c: math.log(v / centers[(pt[0], c)])
                    for c in levels
                    if (pt[0], c) in judged and (v := judged[(pt[0], c)][i])
                }
                if pt[1] in q and len(q) >= 3:
                    resid.append(q[pt[1]] - statistics.median(q.values()))
            adj = statistics.stdev(resid) if len(resid) > 1 else math.nan
            print(
                f"  {pt[0]:>5} C={pt[1]:<3}  {metric:<18}  {_pct(_cv(whole))}  "
                f"{_pct(_cv(judged[pt]))}  {_pct(adj)}"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=("suite", "ab", "attach"), default="suite")
    ap.add_argument("--url", help="the engine to attach to (--mode attach)")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=6, help="A/B rounds (--mode ab)")
    ap.add_argument("--adjust", default="launch", help="A/B adjust (--mode ab)")
    ap.add_argument("--noise", default="--sim-noise gpu-shared --sim-time-scale 4")
    ap.add_argument("--extra", default="", help="extra pytest flags for every run")
    ap.add_argument("--verbose", action="store_true", help="print the end of failing runs")
    ap.add_argument("--cases", default="unchanged,25,10", help="which cases to run")
    ap.add_argument("--llama", help="--mode ab: a llama-server binary (real engines, not the sim)")
    ap.add_argument(
        "--llama-model",
        default=str(Path("~/.cache/llmperf-peers/models/small-llama.gguf").expanduser()),
    )
    ap.add_argument(
        "--record-runs",
        type=int,
        default=0,
        help="--mode attach: record the baseline with `llmperf calibrate -n K --record` "
        "(each run one launch) instead of one --llmperf-update session",
    )
    args = ap.parse_args()
    extra = args.extra.split()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "baselines"
        if args.mode == "attach":
            target = Path(tmp) / "attach"
            target.mkdir()
            (target / "llmperf.toml").write_text(ATTACH_SUITE)
            (target / "test_sweep.py").write_text(
                "def test_sweep(llmperf_point):\n    llmperf_point.assert_baseline()\n"
            )
            extra += [f"--llmperf-url=engine={args.url}"]
            if args.record_runs:
                t0 = time.monotonic()
                cal = [
                    sys.executable, "-m", "pytest_llmperf.cli",
                    "calibrate", "-n", str(args.record_runs), "--record", str(base),
                    "--output-dir", str(Path(tmp) / "cal"), "--suite", "llmperf.toml", "--",
                    str(target), "-q", "-p", "no:cacheprovider",
                    "--llmperf-baseline-dir", str(base), *extra,
                ]  # fmt: skip
                done = subprocess.run(
                    cal, capture_output=True, text=True, timeout=3600, check=False, cwd=target
                )
                print(done.stdout[-3000:], done.stderr[-1500:] if done.returncode else "")
                print(
                    f"baseline recorded by `llmperf calibrate -n {args.record_runs} --record` in "
                    f"{time.monotonic() - t0:.0f} s (exit {done.returncode})"
                )
            else:
                rec = pytest_run(target, base, Path(tmp) / "rec", "", update=True, extra=extra)
                print(f"baseline recorded in {rec['s']:.0f} s (failed: {rec['failed']})")
            results = []
            any_fail = incon = 0
            for i in range(args.runs):
                r = pytest_run(target, base, Path(tmp) / f"run{i}", "", update=False, extra=extra)
                results.append(r["results"])
                any_fail += bool(r["failed"])
                incon += r["inconclusive"] > 0
                print(f"  run {i + 1}: {r['s']:.0f} s, failed {r['failed']}", flush=True)
                if args.verbose and r["failed"]:
                    print(r["tail"], flush=True)
            print(
                f"unchanged against the attached engine: {args.runs} runs, any failed test "
                f"{any_fail}, runs with an inconclusive verdict {incon}"
            )
            cv_report(results, levels=(1, 4, 16))
            return
        if args.mode == "ab":
            target = Path(tmp) / "ab"
            target.mkdir()
            suite = AB_SUITE.format(rounds=args.rounds, adjust=args.adjust)
            (target / "llmperf.toml").write_text(suite)
            (target / "test_ab.py").write_text("def test_ab(llmperf_ab):\n    llmperf_ab.check()\n")
            who, wanted = "new", "test_ab[new-vs-old-C64]"
            if args.llama:
                llama_ab(args, target)
                return
        else:
            target, who, wanted = ROOT / "perf_tests", "plain", "test_sweep[plain-C64]"
            for attempt in range(3):  # a recording with failures is retried (they are shown)
                out = Path(tmp) / f"rec{attempt}"
                rec = pytest_run(target, base, out, args.noise, update=True, extra=extra)
                print(f"baseline recorded in {rec['s']:.0f} s (failed: {rec['failed']})")
                if not rec["failed"]:
                    break
                print(rec["tail"], flush=True)
        cases = {
            "unchanged": args.noise,
            "25": f"{args.noise}; {who}: --sim-slowdown 33-64:1.3333",
            "10": f"{args.noise}; {who}: --sim-slowdown 33-64:1.1111",
        }
        for label in args.cases.split(","):
            sim = cases[label]
            any_fail = exact = incon = 0
            fails: dict[str, int] = {}
            secs = 0.0
            results = []
            for i in range(args.runs):
                r = pytest_run(
                    target, base, Path(tmp) / f"{label}{i}", sim, update=False, extra=extra
                )
                any_fail += bool(r["failed"])
                exact += r["failed"] == [wanted]
                incon += r["inconclusive"] > 0
                secs += r["s"]
                results.append(r["results"])
                for name in r["failed"]:
                    fails[name] = fails.get(name, 0) + 1
                print(f"  {label} run {i + 1}: {r['s']:.0f} s, failed {r['failed']}", flush=True)
                if args.verbose and r["failed"]:
                    print(r["tail"], flush=True)
            name = label if label == "unchanged" else f"{who} {label} % slower at C=64"
            print(
                f"{name}: {args.runs} runs ({secs / args.runs:.0f} s each): any failed test "
                f"{any_fail}, exactly {wanted} failed {exact}, runs with an inconclusive "
                f"verdict {incon}; failures by test: {fails}",
                flush=True,
            )
            if label == "unchanged" and args.mode == "suite":
                cv_report(results)


def llama_ab(args: argparse.Namespace, target: Path) -> None:
    """A/B of two real llama-servers: unchanged, and "new" capped to 4 slots (loses at C=16)."""
    wanted = "test_ab[new-vs-old-C16]"
    for label in args.cases.split(","):
        slots = {"unchanged": 16, "cap": 4}[label]
        (target / "llmperf.toml").write_text(
            LLAMA_AB_SUITE.format(
                old=llama_command(args.llama, args.llama_model, 16),
                new=llama_command(args.llama, args.llama_model, slots),
                rounds=args.rounds,
                adjust=args.adjust,
            )
        )
        any_fail = exact = incon = 0
        secs = 0.0
        for i in range(args.runs):
            out = target.parent / f"{label}{i}"
            r = pytest_run(target, target.parent / "baselines", out, "", update=False, extra=[])
            any_fail += bool(r["failed"])
            exact += r["failed"] == [wanted]
            incon += r["inconclusive"] > 0
            secs += r["s"]
            print(f"  {label} run {i + 1}: {r['s']:.0f} s, failed {r['failed']}", flush=True)
            ab_file = out / "ab.json"
            if not ab_file.exists():
                print(r["tail"][-2500:], flush=True)
                continue
            for point in json.loads(ab_file.read_text())["points"]:
                print(f"    {point['verdict']}: {point['message']}", flush=True)
        print(
            f"llama-server A/B {label} ({args.rounds} rounds, adjust {args.adjust}): {args.runs} "
            f"runs ({secs / args.runs:.0f} s each): any failed test {any_fail}, exactly {wanted} "
            f"failed {exact}, runs with an inconclusive verdict {incon}",
            flush=True,
        )


if __name__ == "__main__":
    main()
