"""Launch noise in a run: launch-adjusted residuals, and the launch spread baselines recorded.

The arithmetic is ``verdicts/launch_adjust.py``; this module feeds it from a ``PerfRun``
(samples grouped by launch) and a ``BaselineStore`` (each level's centre), for the point
check's comparison and for what it records; ``launch_noise`` gives gates and the crossover
each config's recorded launch-to-launch spread, so a one-launch side is not assumed quiet.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pytest_llmperf.base.results import Workload
from pytest_llmperf.run.perfrun import PerfRun
from pytest_llmperf.verdicts.baseline import BaselineStore
from pytest_llmperf.verdicts.baseline_file import BaselineEntry, EntryKey, LaunchResidual
from pytest_llmperf.verdicts.gates import NoisePrior
from pytest_llmperf.verdicts.launch_adjust import (
    MIN_LEVELS,
    Launches,
    adjustable,
    current_residuals,
    launch_values,
    pass_residuals,
    summarize_passes,
)
from pytest_llmperf.verdicts.stats import LaunchNoise

__all__ = [
    "baseline_residuals",
    "can_adjust",
    "current_residuals",
    "entry_lookup",
    "launch_noise",
]


def can_adjust(levels: Sequence[int], concurrency: int) -> bool:
    """A launch must measure at least ``MIN_LEVELS`` levels, this one among them."""
    return concurrency in levels and len(set(levels)) >= MIN_LEVELS


def baseline_residuals(
    by_launch: Launches, concurrency: int, metrics: Sequence[str]
) -> dict[str, LaunchResidual]:
    """What a recording stores for level ``concurrency``: its residuals over the recorded
    launches, centred on the mean of each level's recorded samples."""
    out: dict[str, LaunchResidual] = {}
    for name in metrics:
        if not adjustable(name):
            continue
        values = launch_values(by_launch, name)
        per_level: dict[int, list[float]] = {}
        for passes in values.values():
            for got in passes:
                for c, v in got.items():
                    per_level.setdefault(c, []).append(v)
        centers = {c: sum(vs) / len(vs) for c, vs in per_level.items()}
        summary = summarize_passes(pass_residuals(values, centers, concurrency))
        if summary is not None:
            out[name] = summary
    return out


def launch_noise(store: BaselineStore, run: PerfRun, workload: Workload) -> NoisePrior:
    """Each config's recorded launch-to-launch spread at a level (the gates' noise prior)."""

    def noise(config: str, c: int, metric: str) -> LaunchNoise | None:
        key = EntryKey(run.hardware_for(config), config, workload.key(), c)
        return store.launch_noise(key, metric)

    return noise


def entry_lookup(
    store: BaselineStore, run: PerfRun, workload: Workload
) -> Callable[[str, int], BaselineEntry | None]:
    """A config's baseline entry at a level, without marking it used (a gate explaining a
    speculative loss reads the accept length its config recorded)."""

    def entry(config: str, c: int) -> BaselineEntry | None:
        key = EntryKey(run.hardware_for(config), config, workload.key(), c)
        return store.get(key, mark_used=False)

    return entry
