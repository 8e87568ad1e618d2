"""Issue 9's proof: the whole plugin path on the simulator with GPU-like noise (figures only).

Each run is a real ``pytest perf_tests`` session: launch, HTTP, client, validity, re-runs and
relaunches exactly as the plugin does them, with ``--sim-noise gpu-shared`` (per-launch speed
sd 15 %, within-run drift sd 10 %). One baseline is recorded (default ``baseline_repeat``, each
sample a fresh launch), then RUNS unchanged runs, RUNS with plain 25 % slower at C=64 only
(``--sim-slowdown 33-64:1.33``), and RUNS with a 10 % drop there (``33-64:1.11``). Printed:
runs with any failed test, runs where exactly ``test_sweep[plain-C64]`` failed, and the
inconclusive verdicts. It replaces ``bench_verdicts.py``'s virtual-time figures.

    python benchmarks/bench_noise.py --runs 20        # about 1 min per run on 2 shared cores
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = "test_sweep[plain-C64]"


def pytest_run(base: Path, out: Path, sim_args: str, *, update: bool, extra: list[str]) -> dict:
    junit = out / "junit.xml"
    cmd = [
        sys.executable, "-m", "pytest", str(ROOT / "perf_tests"), "-q", "-p", "no:cacheprovider",
        "--llmperf-simulate", "--llmperf-levels", "1,16,64", "--llmperf-input-len", "512",
        "--llmperf-output-len", "128", "--llmperf-baseline-dir", str(base),
        "--llmperf-output-dir", str(out), "--llmperf-sim-args", sim_args,
        f"--junitxml={junit}", *extra,
    ]  # fmt: skip
    if update:
        cmd.append("--llmperf-update")
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
    failed, inconclusive = [], 0
    if junit.exists():
        for case in ET.parse(junit).getroot().iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                failed.append(case.get("name", "?"))
    inconclusive = proc.stdout.count("inconclusive")
    return {"failed": failed, "inconclusive": inconclusive, "s": time.monotonic() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--noise", default="--sim-noise gpu-shared --sim-time-scale 4")
    ap.add_argument("--extra", default="", help="extra pytest flags for every run")
    args = ap.parse_args()
    extra = args.extra.split()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "baselines"
        rec = pytest_run(base, Path(tmp) / "rec", args.noise, update=True, extra=extra)
        print(f"baseline recorded in {rec['s']:.0f} s (failed while recording: {rec['failed']})")
        cases = {
            "unchanged": args.noise,
            "plain 25 % slower at C=64": f"{args.noise}; plain: --sim-slowdown 33-64:1.33",
            "plain 10 % slower at C=64": f"{args.noise}; plain: --sim-slowdown 33-64:1.11",
        }
        for label, sim in cases.items():
            any_fail = exact = incon = 0
            fails: dict[str, int] = {}
            secs = 0.0
            for i in range(args.runs):
                r = pytest_run(base, Path(tmp) / f"{label[:5]}{i}", sim, update=False, extra=extra)
                any_fail += bool(r["failed"])
                exact += r["failed"] == [TARGET]
                incon += r["inconclusive"] > 0
                secs += r["s"]
                for name in r["failed"]:
                    fails[name] = fails.get(name, 0) + 1
            print(
                f"{label}: {args.runs} runs ({secs / args.runs:.0f} s each): any failed test "
                f"{any_fail}, exactly {TARGET} failed {exact}, runs with an inconclusive "
                f"verdict {incon}; failures by test: {fails}",
                flush=True,
            )


if __name__ == "__main__":
    main()
