"""The round loop of a sequential A/B: add rounds one at a time while a level is undecided.

Each round relaunches both servers and measures every level (``run/ab.py``): the launch factor
needs all levels of a round, and a round is what costs (two launches), not a level. After round
2 (the first look: a paired t needs two rounds) and every later one, the undecided levels are
judged by the sequential rule (``verdicts/paired_sequential.py``); a level keeps the verdict of
the look that decided it. The loop stops when every level is decided, or the budget is spent:
``rounds`` rounds, or ``time_budget`` minutes of rounds (``planned_launches``, counting rounds
as the launches of a config are counted; never fewer than two), whichever comes first.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pytest_llmperf.run.plan_time import planned_launches

__all__ = ["FIXED_ROUNDS", "round_budget", "run_rounds"]

FIXED_ROUNDS = 4  # [[ab]] rounds when not given and not sequential (the budget is then
# launch_budget: a budget costs only what the noise needs, so it can be larger)


def round_budget(rounds: int | None, sequential: bool, launch_budget: int) -> int:
    """The most rounds of an ``[[ab]]``: its ``rounds``, else ``launch_budget`` (sequential,
    never fewer than two) or ``FIXED_ROUNDS``."""
    if rounds is not None:
        return rounds
    return max(2, launch_budget) if sequential else FIXED_ROUNDS


def run_rounds(
    budget: int,
    do_round: Callable[[int], None],
    look: Callable[[int], bool] | None,
    time_budget_min: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[int, bool]:
    """Run rounds ``0 .. budget - 1``; after each from the second on, ``look(rounds so far)``
    says whether every level is decided (None: fixed rounds, never stop early). Returns the
    rounds run and whether the time budget cut them short."""
    start = clock()
    for r in range(budget):
        do_round(r)
        n = r + 1
        if look is not None and n >= 2 and look(n):
            return n, False
        if look is not None and n < budget:
            per_round = (clock() - start) / n
            if n >= max(2, planned_launches(budget, time_budget_min, per_round)):
                return n, True
    return budget, False
