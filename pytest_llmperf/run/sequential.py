"""The launch loop of sequential verdicts: add launches to a config only while a point of it is
undecided and its budget lasts, each launch measuring only the points still undecided.

After a launch, every point of the config's sweep is judged (``verdicts/sequential.py``'s rule at
the look of the launches it has). A point is undecided when its verdict is inconclusive, or when
the machine was too busy to give it one valid sample. While some are and the budget allows, one
more launch of the config measures all the undecided points at once (and, adjusting, as few
decided ones as the launch's median speed needs: ``MIN_LEVELS`` levels in all); decided points are
not measured again, and no other config is relaunched. The loop stops when every point is
decided, the config cannot be relaunched (attached, or ``relaunch = never``), a launch fails, or
the budget is spent: ``launch_budget`` launches (the first included), or ``time_budget`` minutes of
this config's measuring, whichever comes first (``planned_launches``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from pytest_llmperf.base.results import LevelResult, Workload
from pytest_llmperf.run.busy import all_starved
from pytest_llmperf.run.perfrun import PerfRun, PointError
from pytest_llmperf.run.plan_time import planned_launches
from pytest_llmperf.verdicts.compare import PointComparison
from pytest_llmperf.verdicts.launch_adjust import MIN_LEVELS
from pytest_llmperf.verdicts.validity import ValidityPolicy
from pytest_llmperf.verdicts.verdict import Verdict

__all__ = ["launch_seconds", "settle_config", "undecided"]

DEFAULT_LAUNCH_BUDGET = 6


def launch_seconds(by_launch: Mapping[str, Mapping[int, Sequence[LevelResult]]]
                   ) -> tuple[float, int]:  # fmt: skip
    """(seconds measured so far, launches): each launch's start-up plus its samples' durations."""
    total = 0.0
    for levels in by_launch.values():
        first = next((s[0] for s in levels.values() if s), None)
        total += (first.startup_s or 0.0) if first is not None else 0.0
        total += sum(lv.duration for samples in levels.values() for lv in samples)
    return total, len(by_launch)


def undecided(pc: PointComparison, samples: Sequence[LevelResult], workload: Workload,
              policy: ValidityPolicy | None) -> bool:  # fmt: skip
    """Inconclusive, or no valid sample only because the machine was too busy."""
    if pc.verdict == Verdict.INCONCLUSIVE:
        return True
    return pc.verdict == Verdict.INVALID and all_starved(samples, workload, policy)


def settle_config(
    run: PerfRun,
    config: str,
    workload: Workload,
    levels: Sequence[int],
    judge: Callable[[int], PointComparison],
    *,
    adjusting: bool,
    launch_budget: int,
    time_budget_min: float | None = None,
    policy: ValidityPolicy | None = None,
    passes: int = 1,
) -> dict[int, PointComparison]:
    """Judge every point of ``levels`` of ``config``, adding launches as the module says;
    returns each point's last comparison. ``levels`` are measured in the live launch first
    where they have no sample yet. Adjusting, each added launch measures its levels in
    ``passes`` interleaved passes, as the baseline's launches did."""
    need = sorted(set(levels))
    for c in need:
        if not run.samples(config, workload, c):
            try:
                run.measure(config, workload, c)
            except PointError:
                break
    pcs: dict[int, PointComparison] = {}
    for _ in range(launch_budget + 1):  # each pass adds at most one launch
        pcs = {c: judge(c) for c in need if run.samples(config, workload, c)}
        open_ = [
            c
            for c, pc in pcs.items()
            if undecided(pc, run.samples(config, workload, c), workload, policy)
        ]
        if not open_ or not run.can_relaunch(config):
            break
        seconds, used = launch_seconds(run.by_launch(config, workload))
        if used >= planned_launches(launch_budget, time_budget_min, seconds / max(used, 1)):
            break
        todo = list(open_)
        if adjusting:
            # The launch's speed is the median over its levels: fill up with decided ones.
            todo += [c for c in need if c not in todo][: max(0, MIN_LEVELS - len(todo))]
        rounds = max(1, passes) if adjusting else 1
        try:
            for j in range(rounds):
                for i, c in enumerate(sorted(todo)):
                    run.measure(config, workload, c, fresh_launch=i == 0 and j == 0)
        except PointError:
            break
    return pcs
