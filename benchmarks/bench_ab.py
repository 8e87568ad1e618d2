"""Does the same-job A/B mode stay quiet when nothing changed, and catch a drop at one level?

Measured on the simulator's virtual-time engine (``pytest_llmperf.sim.virtual``)
with the ``gpu-shared`` noise preset: every launch draws its own speed factor (sd 0.15), its
own drift (sd 0.10, period 30 s), step jitter and stalls. An A/B run is ``ROUNDS`` rounds; each
round launches "old" and "new" afresh (fresh launch nonces; order alternating per round, as
``run/ab.py`` does) and sweeps every level on each. Each level is judged by
``verdicts/paired.py`` exactly as the ``llmperf_ab`` fixture judges it, in both modes:

* ``adjust = none``: the paired log-ratios as measured;
* ``adjust = launch``: each round's median log-ratio over the levels removed (cancels the
  per-launch speed factor; blind to a regression that hits every level alike).

Scenarios, ``--runs`` A/B runs each: unchanged; 'new' 25 % slower at C=64 only
(``--sim-slowdown 33-64:1.333``); 'new' 10 % slower at C=64 only (``33-64:1.111``). Reported per
mode and per rounds (the first 4 rounds of each run, and all of them): runs with any FAIL, runs
whose only FAIL is C=64. Virtual time, so a level costs CPU, not its simulated seconds.

Usage: python benchmarks/bench_ab.py [--runs 20] [--rounds 8] [--tolerance 0.05]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from itertools import count

from pytest_llmperf.run.ab import round_order
from pytest_llmperf.run.suite import ABSpec
from pytest_llmperf.sim.knobs import ServerKnobs
from pytest_llmperf.sim.virtual import run_virtual_sweep
from pytest_llmperf.verdicts.paired import judge_paired, remove_launch_factor
from pytest_llmperf.verdicts.verdict import Verdict

PROFILE = "sglang-rtxpro6000x4-qwen35-122b-a10b"
LEVELS = (1, 4, 16, 32, 64, 128)
SCENARIOS = {
    "unchanged": (),
    "new 25% slower at C=64": ((33, 64, 1.3333),),
    "new 10% slower at C=64": ((33, 64, 1.1111),),
}
_NONCES = count()


def launch(slowdown: tuple[tuple[int, int, float], ...]) -> dict[int, float]:
    """One fresh simulated launch: output throughput per level."""
    knobs = ServerKnobs(
        sim_profile=PROFILE,
        sim_seed=0,
        sim_noise="gpu-shared",
        sim_launch_nonce=f"bench-ab-{next(_NONCES)}",
        sim_slowdown=slowdown,
    )
    return run_virtual_sweep(knobs, concurrencies=LEVELS).throughput()


def ab_run(spec: ABSpec, rounds: int, slowdown: tuple[tuple[int, int, float], ...]):
    """Per level: the paired log-ratios ln(new / old), one per round."""
    d: dict[int, list[float]] = {c: [] for c in LEVELS}
    for r in range(rounds):
        got = {}
        for config in round_order(spec, r):
            got[config] = launch(slowdown if config == "new" else ())
        for c in LEVELS:
            d[c].append(math.log(got["new"][c] / got["old"][c]))
    return d


def failures(d: dict[int, list[float]], n: int, adjust: str, tol: float) -> list[int]:
    part = {c: v[:n] for c, v in d.items()}
    if adjust == "launch":
        part = remove_launch_factor(part)
    return [
        c
        for c in LEVELS
        if judge_paired(
            part[c],
            candidate="new",
            reference="old",
            metric_name="output_throughput",
            concurrency=c,
            tolerance=tol,
            adjusted=adjust == "launch",
        ).verdict
        == Verdict.FAIL
    ]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--tolerance", type=float, default=0.05)
    args = ap.parse_args(argv)
    spec = ABSpec(candidate="new", reference="old", rounds=args.rounds)
    prefixes = sorted({min(4, args.rounds), args.rounds})
    t0 = time.monotonic()
    print(
        f"profile {PROFILE}, noise gpu-shared, levels {LEVELS}, {args.runs} A/B runs per "
        f"scenario, up to {args.rounds} rounds, tolerance {args.tolerance:.0%}, 95 % CI",
        flush=True,
    )
    for name, slowdown in SCENARIOS.items():
        tallies = {(a, n): [0, 0] for a in ("none", "launch") for n in prefixes}
        for _ in range(args.runs):
            d = ab_run(spec, args.rounds, slowdown)
            for (adjust, n), tally in tallies.items():
                failed = failures(d, n, adjust, args.tolerance)
                tally[0] += bool(failed)
                tally[1] += failed == [64]
        for (adjust, n), (anyfail, only64) in sorted(tallies.items()):
            print(
                f"{name:24s} adjust={adjust:6s} rounds={n}: runs with any FAIL {anyfail}/"
                f"{args.runs}; runs failing exactly C=64 {only64}/{args.runs}",
                flush=True,
            )
        print(f"  ({time.monotonic() - t0:.0f} s so far)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
