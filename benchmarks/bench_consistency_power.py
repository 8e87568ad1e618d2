"""What the consistency rule can catch, by the number of launches on each side (figures only).

Drawn answers, judged by the plugin's own rule (``verdicts/consistency.judge_consistency``): a
baseline of ``--old`` launches (3, ``baseline_repeat``'s default) against 1, 2 or 3 launches of
the run, ``--probes`` probes (32, the default, and 64). A changed model answers a ``share`` of the
probes differently in every one of its launches; on top of that each answer of either side
drifts with probability ``drift`` (batching's nondeterminism; ``--sim-nondeterminism`` in the
simulator), to an answer of its own. Printed: how often the changed model PASSES (a miss), and
how often an unchanged one (share 0) fails (a false alarm, at most 1 % by construction).

Why one launch of the run is weak: the permutation test asks whether the run's launch is the
odd one out on more probes than chance. Against three baseline launches a changed probe is
then worth at best 1/4, so three changed probes (p = 1/64) can never fail at 1 %, and every
probe the baseline itself disagreed on dilutes the evidence further. Each launch of the run
that answers multiplies it: the sequential loop's added launches answer too.

    python benchmarks/bench_consistency_power.py --trials 1000
"""

from __future__ import annotations

import argparse
import random

from pytest_llmperf.base.probes import ProbeSet
from pytest_llmperf.verdicts.consistency import judge_consistency


def launch(rng: random.Random, probes: int, changed: int, drift: float) -> ProbeSet:
    """One launch's answers: probe ``i``'s answer is ``[i, 0]``, ``[i, 1]`` for the first
    ``changed`` probes of a changed model, or an answer of its own where it drifted."""
    outs: list[list[int] | str] = []
    for i in range(probes):
        answer = [i, 1] if i < changed else [i, 0]
        if rng.random() < drift:
            answer = [i, 2 + rng.randrange(10**9)]
        outs.append(answer)
    return ProbeSet(seed=0, max_new_tokens=16, outputs=outs)


def pass_rate(trials: int, old: int, new: int, probes: int, changed: int, drift: float,
              seed: int) -> float:  # fmt: skip
    rng = random.Random(seed)
    passed = 0
    for _ in range(trials):
        base = [launch(rng, probes, 0, drift) for _ in range(old)]
        run = [launch(rng, probes, changed, drift) for _ in range(new)]
        got = judge_consistency(base, run, old_label="the baseline", new_label="this run")
        passed += got.verdict.value == "pass"
    return passed / trials


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--old", type=int, default=3, help="the baseline's launches")
    ap.add_argument("--probes", default="32,64")
    ap.add_argument("--shares", default="0,0.1,0.25")
    ap.add_argument("--drifts", default="0,0.02,0.05")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    news = (1, 2, 3)
    print(f"{args.trials} drawn trials a cell; a baseline of {args.old} launches; cells: how "
          f"often the run PASSES (share 0: an unchanged model; else a miss)")  # fmt: skip
    print("probes | changed share (probes) | drift | " +
          " | ".join(f"{n} launch{'es' if n > 1 else ''} of the run" for n in news))  # fmt: skip
    for probes in (int(p) for p in args.probes.split(",")):
        for share in (float(s) for s in args.shares.split(",")):
            changed = round(share * probes)
            for drift in (float(d) for d in args.drifts.split(",")):
                cells = [
                    pass_rate(args.trials, args.old, n, probes, changed, drift, args.seed)
                    for n in news
                ]
                print(f"{probes} | {share:g} ({changed}) | {drift:g} | "
                      + " | ".join(f"{c:.1%}" for c in cells), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
