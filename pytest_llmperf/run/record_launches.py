"""A recording's launches: ``baseline_repeat`` of them, then one more at a time while the noise
they recorded would leave a later run's last look unable to decide every point because the
recording was short, up to the launch budget.

A later run judges a launch-adjusted point with the residual spread its baseline recorded,
pooled over the sweep's levels (``launch_adjust.pool_residuals``), and its standard error
keeps the recording's share however many launches the run adds: ``σ·√(1/k + 1/n)`` for ``k``
launches against ``n`` recorded. So a short recording sets a floor under every later run; where
the run's last look (``k`` = the launch budget) leaves more than a tolerance between its fail
and its pass bound (``launch_adjust.last_look_gap``), a regression between the tolerance and
twice it can end the budget undecided, or take every launch of it to fail. When the
recording's launches differ beyond what their passes explain (the F-test of ``pool_within``),
the spread comes from the launch medians alone, with few degrees of freedom, and Student's t
widens that gap further. Measuring the recording's noise until it is known well enough is an
internal pilot (Stein's two-stage procedure; Wittes & Brittain 1990): launches are added on
the spread alone, never on a level's mean, so no verdict is steered by them. The rule: add a
launch while ``last_look_gap`` of ``output_throughput`` exceeds ``(DETECT - 1)`` tolerances
**and** one more launch would narrow it by at least ``GAIN`` (``next_launch_gain``), while the
config can be relaunched and ``planned_launches`` (``launch_budget``, ``time_budget``) allows
another. At a budget of 6 a launch more narrows the gap by about 10 %, 7 % and 5.5 % from
three, four and five launches where the passes pooled into the noise, and by 13 %, 9 % and
7 % where the launch medians alone are the noise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pytest_llmperf.base.results import LevelResult, Workload
from pytest_llmperf.run.adjust import baseline_residuals
from pytest_llmperf.run.passes import Passes
from pytest_llmperf.run.perfrun import PerfRun, Redo
from pytest_llmperf.run.plan_time import planned_launches
from pytest_llmperf.run.recording import valid_samples
from pytest_llmperf.run.sequential import launch_seconds
from pytest_llmperf.verdicts.launch_adjust import (
    last_look_gap,
    next_launch_gain,
    pool_residuals,
)
from pytest_llmperf.verdicts.sequential import DETECT
from pytest_llmperf.verdicts.stats import LaunchNoise
from pytest_llmperf.verdicts.validity import ValidityPolicy

__all__ = ["GAIN", "METRIC", "record_launches", "recorded_noise"]

METRIC = "output_throughput"  # whose recorded noise decides (as ``baseline_passes`` = auto's)
GAIN = 0.05  # how much narrower a later last look's gap must get for another launch

Launches = Mapping[str, Mapping[int, Sequence[LevelResult]]]


def recorded_noise(
    by_launch: Launches,
    levels: Sequence[int],
    workload: Workload | None = None,
    policy: ValidityPolicy | None = None,
) -> tuple[LaunchNoise | None, int]:
    """(``METRIC``'s residual noise pooled over ``levels``, as the entries will record it; the
    launches that measured every level validly), from the valid samples only."""
    need = sorted(set(levels))
    full: dict[str, dict[int, list[LevelResult]]] = {}
    for lid, got in by_launch.items():
        kept = {c: valid_samples(got.get(c, ()), workload, policy)[0] for c in need}
        if all(kept.values()):
            full[lid] = kept
    spreads = [baseline_residuals(full, c, [METRIC]).get(METRIC) for c in need]
    return pool_residuals([s for s in spreads if s is not None]), len(full)


def record_launches(
    run: PerfRun,
    config: str,
    workload: Workload,
    levels: Sequence[int],
    launches: int,
    passes: Passes,
    ratio: float | None,
    *,
    tolerance: float,
    launch_budget: int,
    time_budget_min: float | None = None,
    policy: ValidityPolicy | None = None,
    redo: Redo | None = None,
) -> Launches:
    """``run.ensure_launches`` of ``launches``, then one more launch at a time as the module
    says; each added launch measures the whole sweep in the same passes. The first launch's
    samples are noted with what was added and why."""
    by = run.ensure_launches(config, workload, levels, launches, passes, ratio, redo)
    first_gap: float | None = None
    added = 0
    why = "launch_budget reached"
    # one turn more than the launches it may add, so that the last one added is judged too
    for _ in range(max(0, launch_budget - launches) + 1):
        noise, k = recorded_noise(by, levels, workload, policy)
        if not run.can_relaunch(config):
            why = "the server cannot be relaunched"
            break
        if noise is None or k < launches:
            why = "a launch had no valid sample of some level"
            break
        gap = last_look_gap(noise, k, launch_budget)
        first_gap = gap if first_gap is None else first_gap
        seconds, used = launch_seconds(by)
        if gap <= (DETECT - 1) * tolerance:
            why = "every point decided by the last look"
            break
        if used >= planned_launches(launch_budget, time_budget_min, seconds / max(used, 1)):
            why = "launch_budget or time_budget reached"
            break
        if next_launch_gain(noise, k, launch_budget) < GAIN:
            why = f"a launch more would narrow it by under {100 * GAIN:.0f} %"
            break
        before = len(by)
        by = run.ensure_launches(config, workload, levels, before + 1, passes, ratio, redo)
        if len(by) <= before:
            why = "a launch failed to start or measure"
            break
        added += 1
    if added:
        noise, k = recorded_noise(by, levels, workload, policy)
        now = last_look_gap(noise, k, launch_budget) if noise is not None else None
        _note(by, _added_text(added, k, launch_budget, first_gap, now, tolerance, why))
    return by


def _added_text(
    added: int,
    launches: int,
    budget: int,
    before: float | None,
    now: float | None,
    tolerance: float,
    why: str,
) -> str:
    after = f"{100 * now:.1f} %" if now is not None else "unknown"
    return (
        f"recording: {added} launch{'es' if added != 1 else ''} added ({launches} valid in all): "
        f"with the launches first recorded, a later run's last look (launch {budget}) would "
        f"have left {100 * (before or 0.0):.1f} % between its fail and pass bounds of {METRIC}, "
        f"wider than the {100 * (DETECT - 1) * tolerance:.3g} % from the tolerance to "
        f"{DETECT:g}x it; now {after} (stopped: {why})"
    )


def _note(by_launch: Launches, text: str) -> None:
    """On the first launch's first sample of each level, where the passes' note is."""
    first = next(iter(by_launch.values()), {})
    for samples in first.values():
        if samples and text not in samples[0].notes:
            samples[0].notes.append(text)
