"""A recording's launches: ``baseline_repeat`` of them, then one more at a time while the noise
they recorded would leave a later run's first look unable to fail a regression of twice the
tolerance because the recording was short, up to the launch budget.

A later run judges a launch-adjusted point with the residual spread its baseline recorded,
pooled over the sweep's levels (``launch_adjust.pool_residuals``). When the recording's launches
differ beyond what their passes explain (the F-test of ``pool_within``), that spread comes from
the launch medians alone: three launches of three levels give it four degrees of freedom, and
the first look's critical value is Student's t at four (about 5.5 where the normal gives 2.7).
Every later run then pays for the recording's few launches, a look or more each. Measuring the
recording's noise until it is known well enough is an internal pilot (Stein's two-stage
procedure; Wittes & Brittain 1990): launches are added on the spread alone, never on a level's
mean, so no verdict is steered by them. The rule: add a launch while
``launch_adjust.first_look_margin`` of ``output_throughput`` exceeds its tolerance **and** one
more launch would narrow it by at least ``GAIN`` (``next_launch_gain``; where the passes pooled
into the noise its degrees of freedom are many, only the later run's own launches narrow the
margin, and a launch more buys the recording about 6 %), while the config can be relaunched
and ``planned_launches`` (``launch_budget``, ``time_budget``) allows another. From three
launches of three levels with a launch effect that adds two (23 %, then 12 %).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pytest_llmperf.base.results import LevelResult, Workload
from pytest_llmperf.run.adjust import baseline_residuals
from pytest_llmperf.run.passes import Passes
from pytest_llmperf.run.perfrun import PerfRun
from pytest_llmperf.run.plan_time import planned_launches
from pytest_llmperf.run.recording import valid_samples
from pytest_llmperf.run.sequential import launch_seconds
from pytest_llmperf.verdicts.launch_adjust import (
    first_look_margin,
    next_launch_gain,
    pool_residuals,
)
from pytest_llmperf.verdicts.stats import LaunchNoise
from pytest_llmperf.verdicts.validity import ValidityPolicy

__all__ = ["GAIN", "METRIC", "record_launches", "recorded_noise"]

METRIC = "output_throughput"  # whose recorded noise decides (as ``baseline_passes`` = auto's)
GAIN = 0.10  # how much narrower a later first look's margin must get for another launch

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
) -> Launches:
    """``run.ensure_launches`` of ``launches``, then one more launch at a time as the module
    says; each added launch measures the whole sweep in the same passes. The first launch's
    samples are noted with what was added and why."""
    by = run.ensure_launches(config, workload, levels, launches, passes, ratio)
    first_margin: float | None = None
    added = 0
    why = "launch_budget reached"
    for _ in range(max(0, launch_budget - launches)):
        noise, k = recorded_noise(by, levels, workload, policy)
        if not run.can_relaunch(config):
            why = "the server cannot be relaunched"
            break
        if noise is None or k < launches:
            why = "a launch had no valid sample of some level"
            break
        margin = first_look_margin(noise, k, launch_budget)
        first_margin = margin if first_margin is None else first_margin
        seconds, used = launch_seconds(by)
        if margin <= tolerance:
            why = "within the tolerance"
            break
        if next_launch_gain(noise, k, launch_budget) < GAIN:
            why = f"a launch more would narrow it by under {100 * GAIN:.0f} %"
            break
        if used >= planned_launches(launch_budget, time_budget_min, seconds / max(used, 1)):
            why = "launch_budget or time_budget reached"
            break
        before = len(by)
        by = run.ensure_launches(config, workload, levels, before + 1, passes, ratio)
        if len(by) <= before:
            why = "a launch failed to start or measure"
            break
        added += 1
    if added:
        noise, k = recorded_noise(by, levels, workload, policy)
        now = first_look_margin(noise, k, launch_budget) if noise is not None else None
        _note(by, _added_text(added, k, first_margin, now, tolerance, why))
    return by


def _added_text(
    added: int,
    launches: int,
    before: float | None,
    now: float | None,
    tolerance: float,
    why: str,
) -> str:
    after = f"{100 * now:.1f} %" if now is not None else "unknown"
    return (
        f"recording: {added} launch{'es' if added != 1 else ''} added ({launches} valid in all): "
        f"with the launches first recorded, a later run's first look would have judged "
        f"{METRIC} with a margin of {100 * (before or 0.0):.1f} %, wider than the tolerance "
        f"{100 * tolerance:.3g} %; now {after} (stopped: {why})"
    )


def _note(by_launch: Launches, text: str) -> None:
    """On the first launch's first sample of each level, where the passes' note is."""
    first = next(iter(by_launch.values()), {})
    for samples in first.values():
        if samples and text not in samples[0].notes:
            samples[0].notes.append(text)
