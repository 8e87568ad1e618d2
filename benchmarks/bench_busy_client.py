"""How much headroom the shipped suite leaves its client at its heaviest levels (figures only).

Runs ``pytest perf_tests -k "test_sweep and C<level>"`` (default: C=128, both configs; the
suite's own servers and workload, 1000 in / 1000 out) as real pytest sessions, once per stream
interval given (the suite's ``sim_args`` say ``--stream-interval 8``; ``--llmperf-sim-args`` on
the command line wins over them), and prints per level: the client's CPU (% of one core), its
event-loop lag p99, the share of ITL gaps that came from one network read (coalesced), the
machine's busy share, and the simulated server's CPU (% of one core over its lifetime, launch and
warm-up included, sampled with psutil). Verdicts against baselines are not the point here: a
failed test is printed, never asserted.

    python benchmarks/bench_busy_client.py                       # intervals 1 and 8, C=128
    python benchmarks/bench_busy_client.py --intervals 8 --levels 64,128
    python benchmarks/bench_busy_client.py --burn 1              # plus one busy-loop process
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]


def _server_cpu(proc: subprocess.Popen[bytes]) -> dict[int, tuple[float, float, float]]:
    """Sample the simulated servers under ``proc`` until it exits: pid -> (start, end, cpu s)."""
    seen: dict[int, tuple[float, float, float]] = {}
    parent = psutil.Process(proc.pid)
    deadline = time.monotonic() + 1800
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            children = parent.children(recursive=True)
        except psutil.NoSuchProcess:
            break
        for child in children:
            try:
                if "pytest_llmperf.sim" not in child.cmdline():
                    continue
                t = child.cpu_times()
                cpu = t.user + t.system
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            start = seen.get(child.pid, (time.monotonic(), 0.0, 0.0))[0]
            seen[child.pid] = (start, time.monotonic(), cpu)
        time.sleep(0.25)
    return seen


def _levels(results: Path) -> list[dict[str, Any]]:
    data = json.loads(results.read_text())
    out = []
    for sweep in data.get("sweeps", []):
        for lv in sweep.get("levels", []):
            out.append({"config": sweep.get("config"), **lv})
    return out


def run_once(interval: int, levels: list[int], burn: int) -> None:
    burners = [
        subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(max(0, burn))
    ]
    try:
        with tempfile.TemporaryDirectory(prefix="bench-busy-") as tmp:
            expr = " or ".join(f"C{c}]" for c in levels)
            argv = [
                sys.executable, "-m", "pytest", "perf_tests", "-q", "-p", "no:randomly",
                "-p", "no:cacheprovider", "-k", f"test_sweep and ({expr})",
                "--llmperf-output-dir", tmp,
                "--llmperf-sim-args", f"--stream-interval {interval}",
            ]  # fmt: skip
            t0 = time.monotonic()
            proc = subprocess.Popen(
                argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
            servers = _server_cpu(proc)
            out = proc.communicate(timeout=60)[0].decode(errors="replace")
            wall = time.monotonic() - t0
            summary = [line for line in out.splitlines() if " in " in line and "passed" in line]
            summary += [line for line in out.splitlines() if line.startswith("FAILED")]
            results = Path(tmp) / "results.json"
            rows = _levels(results) if results.is_file() else []
    finally:
        for b in burners:
            b.kill()
            b.wait(timeout=10)
    print(f"\n--stream-interval {interval}, {burn} burner(s): {wall:.0f} s wall")
    for line in summary:
        print(f"  {line}")
    print(
        f"  {'config':<6} {'C':>4} {'tok/s÷N':>9} {'client CPU %':>12} {'lag p99 ms':>10} "
        f"{'coalesced':>9} {'machine %':>9}"
    )
    for lv in rows:
        c = lv.get("client") or {}
        dur = lv.get("duration") or 0.0
        share = lv.get("coalesced_itl_share")
        tokens = lv.get("total_output_tokens") or 0
        # events/s at most (at N=1 an mtp event carries ~3 tokens)
        events = tokens / max(1, interval) / dur if dur else 0.0
        print(
            f"  {lv['config']:<6} {lv['max_concurrency']:>4} {events:>9.0f} "
            f"{c.get('cpu_percent', 0.0):>12.1f} {c.get('loop_lag_p99_ms', 0.0):>10.2f} "
            f"{'-' if share is None else f'{100 * share:.1f} %':>9} "
            f"{c.get('system_cpu_percent') or 0.0:>9.0f}"
        )
    for pid, (start, end, cpu) in servers.items():
        life = max(1e-9, end - start)
        print(f"  server pid {pid}: {cpu:.1f} s CPU over {life:.0f} s = {100 * cpu / life:.0f} %")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--intervals", default="1,8", help="stream intervals to run, e.g. 1,4,8")
    ap.add_argument("--levels", default="128", help="concurrency levels, e.g. 64,128")
    ap.add_argument("--burn", type=int, default=0, help="extra busy-loop processes meanwhile")
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",") if x.strip()]
    for interval in (int(x) for x in args.intervals.split(",") if x.strip()):
        run_once(interval, levels, args.burn)


if __name__ == "__main__":
    main()
