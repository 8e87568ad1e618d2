"""How often do the default verdicts cry wolf, and do they catch a real 10 % drop?

Drives the simulator's virtual-time engine (pytest_llmperf.sim.virtual) with ±3 % run-to-run
speed jitter (uniform, drawn once per simulated server process, as ``--sim-jitter 0.03``):

1. record a baseline from ``--baseline-repeats`` runs (fresh seeds), through BaselineStore;
2. no change: 20 runs with new seeds, each compared at default settings; an inconclusive
   point is re-measured on a fresh simulated server (new seed) up to ``--max-reruns`` times
   and decided on all its samples; count runs with any FAIL (target 0);
3. a 10 % drop injected at C=64 only (``--sim-slowdown 33-64:1.111``: steps with a running batch
   of 33..64 take 11.1 % longer): count runs that fail exactly C=64 and nothing else (target 20).

Usage: python benchmarks/bench_verdicts.py [--runs 20] [--baseline-repeats 3] [--max-reruns 2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_llmperf.base.results import LevelResult, Workload
from pytest_llmperf.sim.knobs import ServerKnobs
from pytest_llmperf.sim.virtual import VirtualLevel, run_virtual_sweep, seed_num_requests
from pytest_llmperf.verdicts.baseline import BaselineStore, EntryKey, entry_from_levels
from pytest_llmperf.verdicts.compare import PointComparison, Verdict, compare_point

PROFILE = "sglang-rtxpro6000x4-qwen35-122b-a10b"
LEVELS = (1, 4, 16, 32, 64, 128)
METRICS = ("output_throughput", "per_request_throughput")
WORKLOAD = Workload(input_len=1000, output_len=1000)
HW = f"sim:{PROFILE}"
SLOWDOWN = ((33, 64, 1.111),)


def to_level(v: VirtualLevel, cap: int) -> LevelResult:
    """The virtual driver's aggregates as a LevelResult (achieved concurrency not measured)."""
    n = seed_num_requests(v.concurrency)
    return LevelResult(
        max_concurrency=v.concurrency,
        num_requests=n,
        completed=v.completed,
        failed=n - v.completed,
        duration=v.duration_s,
        total_input_tokens=v.completed * WORKLOAD.input_len,
        total_output_tokens=v.total_output_tokens,
        output_throughput=v.output_throughput,
        per_request_throughput=v.per_request_throughput,
        mean_ttft_ms=v.mean_ttft_ms,
        accept_length=v.accept_length,
        server_max_running_requests=cap,
        queueing=v.concurrency > cap,
    )


def sweep(seed: int, slowdown: tuple[tuple[int, int, float], ...] = ()) -> dict[int, LevelResult]:
    knobs = ServerKnobs(sim_profile=PROFILE, sim_seed=seed, sim_jitter=0.03, sim_slowdown=slowdown)
    vs = run_virtual_sweep(knobs, concurrencies=LEVELS)
    return {v.concurrency: to_level(v, vs.effective_max_running_requests) for v in vs.levels}


@dataclass
class RunOutcome:
    points: dict[int, PointComparison]
    reruns: int

    def failed_at(self) -> list[int]:
        return [c for c, p in self.points.items() if p.verdict == Verdict.FAIL]


def judge_run(
    store: BaselineStore,
    seed: int,
    slowdown: tuple[tuple[int, int, float], ...],
    max_reruns: int,
    next_seed: list[int],
) -> RunOutcome:
    samples = {c: [lv] for c, lv in sweep(seed, slowdown).items()}
    reruns = 0
    points: dict[int, PointComparison] = {}
    for c in LEVELS:
        entry = store.get(EntryKey(HW, "plain", WORKLOAD.key(), c))
        p = compare_point("plain", samples[c], entry, workload=WORKLOAD, metrics=METRICS)
        for _ in range(max_reruns):
            if not p.rerun:
                break
            # A re-run is a fresh server process (new seed): same-process repeats would not
            # average the run-to-run jitter the baseline spread describes.
            next_seed[0] += 1
            samples[c].append(sweep(next_seed[0], slowdown)[c])
            reruns += 1
            p = compare_point("plain", samples[c], entry, workload=WORKLOAD, metrics=METRICS)
        points[c] = p
    return RunOutcome(points, reruns)


def scenario(
    name: str,
    store: BaselineStore,
    runs: int,
    slowdown: tuple[tuple[int, int, float], ...],
    max_reruns: int,
) -> list[RunOutcome]:
    next_seed = [10_000 * (2 if slowdown else 1)]
    outcomes = [judge_run(store, k, slowdown, max_reruns, next_seed) for k in range(runs)]
    fails = Counter(c for o in outcomes for c in o.failed_at())
    inconclusive = Counter(
        c for o in outcomes for c, p in o.points.items() if p.verdict == Verdict.INCONCLUSIVE
    )
    print(f"  {name}:")
    print(f"    runs with any FAIL:            {sum(bool(o.failed_at()) for o in outcomes)}/{runs}")
    exact = sum(o.failed_at() == [64] for o in outcomes)
    print(f"    runs failing exactly C=64:     {exact}/{runs}")
    print(f"    FAIL count per C:              {dict(sorted(fails.items())) or '{}'}")
    print(f"    still inconclusive per C:      {dict(sorted(inconclusive.items())) or '{}'}")
    print(f"    re-runs spent:                 {sum(o.reruns for o in outcomes)}")
    deficits = [
        -o.points[64].metric("output_throughput").change  # type: ignore[union-attr]
        for o in outcomes
    ]
    print(
        f"    C=64 output_throughput deficit: min {100 * min(deficits):.1f} %, "
        f"max {100 * max(deficits):.1f} %"
    )
    return outcomes


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--baseline-repeats", type=int, nargs="+", default=[3, 1])
    ap.add_argument("--max-reruns", type=int, default=2)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    for repeats in args.baseline_repeats:
        with tempfile.TemporaryDirectory() as d:
            store = BaselineStore(d)
            recorded = [sweep(1000 + i) for i in range(repeats)]
            for c in LEVELS:
                entry = entry_from_levels([r[c] for r in recorded], METRICS)
                store.queue_update(EntryKey(HW, "plain", WORKLOAD.key(), c), entry)
            store.flush()
            store = BaselineStore(d)  # read back from disk, as a later CI run would
            e64 = store.get(EntryKey(HW, "plain", WORKLOAD.key(), 64), mark_used=False)
            s64 = e64.metrics["output_throughput"] if e64 else None
            spread = (
                "unknown (n=1)" if s64 is None or s64.n < 2 else f"{100 * s64.std / s64.mean:.2f} %"
            )
            print(
                f"baseline from {repeats} run(s), default tolerance 5 %, z=2, "
                f"max {args.max_reruns} re-runs per inconclusive point; recorded C=64 spread "
                f"{spread}:"
            )
            scenario("no change (±3 % jitter)", store, args.runs, (), args.max_reruns)
            scenario("10 % drop at C=64", store, args.runs, SLOWDOWN, args.max_reruns)
    print(f"({time.perf_counter() - t0:.0f} s, virtual time)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
