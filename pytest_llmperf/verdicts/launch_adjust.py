"""Launch-adjusted verdicts: cancel the speed every launch draws, keep what one level changed.

On a shared GPU box (and the simulator's ``--sim-noise gpu-shared``) each server launch runs
at its own speed: every level of one launch is 10-20 % faster or slower together. Against a
stored baseline that per-launch factor is noise no tolerance can sit above (a 25 % drop at
one level hides inside it). But it is *shared by the levels of a launch*, so it can be
estimated and removed, as A/B mode's ``adjust = "launch"`` does for paired rounds
(``paired.remove_launch_factor``, on this module's ``remove_common_factor``):

* each level's value is taken relative to its baseline centre, ``q_C = ln(v_C / base_C)``;
* the launch factor is the median of ``q`` over the launch's levels (the median, so that one
  level's regression does not leak into the others; at least ``MIN_LEVELS`` levels);
* the residual ``q_C - median`` is what is left of level C, free of the launch's speed.

The baseline records the mean and spread of the residuals of its own launches (each launch
measures the whole sweep when recording with ``adjust = "launch"``); a run's residuals are
judged against them with the usual rule (``stats.decide``: tolerance, then a z·se margin from
the measured spread). The price: a regression that hits every level alike is cancelled here;
the unadjusted verdict still sees it when it is larger than the launch noise.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache

import numpy as np

from pytest_llmperf.base.metric_defs import metric as metric_def
from pytest_llmperf.base.results import LevelResult, SweepResult
from pytest_llmperf.verdicts.baseline_file import BaselineEntry, LaunchResidual, MetricSummary
from pytest_llmperf.verdicts.sequential import Look
from pytest_llmperf.verdicts.stats import Decision, LaunchNoise, NoiseRule, decide

__all__ = [
    "MIN_LEVELS",
    "ResidualSummary",
    "remove_common_factor",
    "adjustable",
    "current_residuals",
    "decide_adjusted",
    "launch_residuals",
    "launches_of",
    "outlier_inflation",
    "pool_residuals",
    "pooled_residual_noise",
    "prefer_adjusted",
    "summarize_residuals",
]

MIN_LEVELS = 3  # with two levels the median is the mean and a regression leaks into both


def adjustable(name: str) -> bool:
    """Metrics that scale with a launch's speed: rates (tok/s, req/s) and latencies (ms)."""
    unit = metric_def(name).unit
    return unit.endswith("/s") or unit == "ms"


def remove_common_factor(q: Mapping[int, float]) -> dict[int, float] | None:
    """The one launch-factor removal, for baselines and paired A/B rounds alike: each level's
    log-ratio ``q`` minus the median over the finite levels of one launch (or round). None
    when fewer than ``MIN_LEVELS`` levels are finite (a NaN level stays NaN)."""
    finite = [v for v in q.values() if math.isfinite(v)]
    if len(finite) < MIN_LEVELS:
        return None
    center = statistics.median(finite)
    return {c: v - center for c, v in q.items()}


def launch_residuals(
    by_launch: Mapping[str, Mapping[int, float]],
    centers: Mapping[int, float],
    concurrency: int,
) -> list[float]:
    """Level ``concurrency``'s residual in every launch that measured it and at least
    ``MIN_LEVELS`` levels with a positive centre (other launches cannot be adjusted)."""
    out: list[float] = []
    for values in by_launch.values():
        q = {
            c: math.log(v / centers[c])
            for c, v in values.items()
            if v > 0 and centers.get(c, 0) > 0
        }
        residuals = remove_common_factor(q) if concurrency in q else None
        if residuals is not None:
            out.append(residuals[concurrency])
    return out


# A level's residual summary is the type the baseline file stores; one type, not two.
ResidualSummary = LaunchResidual


def summarize_residuals(residuals: Sequence[float]) -> LaunchResidual | None:
    if not residuals:
        return None
    sd = statistics.stdev(residuals) if len(residuals) >= 2 else None
    return LaunchResidual(mean=statistics.fmean(residuals), sd=sd, n=len(residuals))


def decide_adjusted(
    name: str,
    residuals: Sequence[float],
    base: LaunchResidual,
    tolerance: float,
    rule: NoiseRule | None = None,
    within_se: Sequence[float | None] = (),
    look: Look | None = None,
    noise: LaunchNoise | None = None,
) -> Decision:
    """The rule of ``stats.decide`` on launch-adjusted ratios ``exp(r - base.mean)`` against 1:
    each current residual is one launch; the baseline's residual spread is its noise, and the
    current samples' within-run errors add to it (a stall inside one level shows there, so
    that level is re-measured rather than failed). (z, not
    Student's t: this spread is small beside a tolerance, so even a baseline that happened to
    underestimate it twofold leaves false alarms rare, while t would leave most points
    unresolved after three launches.) ``look``: the sequential rule's look, with ``noise`` the
    residual spread pooled over the sweep's levels (``pooled_residual_noise``) when known."""
    ratios = [math.exp(r - base.mean) for r in residuals]
    return decide(
        ratios,
        base_mean=1.0,
        base_std=base.sd or 0.0,
        base_n=base.n,
        tolerance=tolerance,
        direction=metric_def(name).direction,
        rule=rule,
        current_launches=[f"launch-{i}" for i in range(len(ratios))],
        current_within_se=within_se,
        base_launches=base.n,
        look=look,
        noise=noise,
    )


def pooled_residual_noise(entries: Iterable[BaselineEntry | None], name: str) -> LaunchNoise | None:
    """The residual spread of ``name`` pooled over the levels of one sweep's baseline (and of a
    calibration's runs, which record into the same entries): a sequential look's noise, known
    to more degrees of freedom than one level's few launches give, so Student's t is not wide.

    Pooling assumes the levels' residual noise alike: what is left of a launch once its shared
    speed is removed (drift, stalls, jitter) hits every level of it alike. Residuals of one
    launch are not independent (the median is removed, so with three levels one of them is 0):
    of a launch's ``L`` residuals only ``L - 1`` are free, and the degrees of freedom are
    counted so. None with fewer than two levels' spreads."""
    spreads = []
    for entry in entries:
        summary = entry.metrics.get(name) if entry is not None else None
        if summary is not None and summary.launch_residual is not None:
            spreads.append(summary.launch_residual)
    return pool_residuals(spreads)


def pool_residuals(summaries: Sequence[LaunchResidual]) -> LaunchNoise | None:
    """``pooled_residual_noise`` over the levels' residual summaries."""
    spreads = [r for r in summaries if r.sd is not None and r.n >= 2]
    if len(spreads) < 2:
        return None
    levels = len(spreads)
    dof = sum(r.n - 1 for r in spreads)
    var = sum((r.n - 1) * (r.sd or 0.0) ** 2 for r in spreads) / dof
    return LaunchNoise(
        math.sqrt(var * outlier_inflation(levels)), max(1, dof * (levels - 1) // levels) + 1
    )


@lru_cache(maxsize=32)
def outlier_inflation(levels: int) -> float:
    """How much larger a level's residual variance is when that level alone moved far (it is
    then the launch's outlier, and its residual is its own noise minus a median of the others)
    than the levels' average residual variance when nothing moved (what a baseline pools):
    2.15 for three levels, falling towards 1 with more. The pooled noise is scaled by it, so a
    regressed level is not judged with a spread only its unchanged neighbours have. Computed
    once per level count from seeded Gaussian draws (exact to about 1 %)."""
    rng = np.random.default_rng(0)
    e = rng.standard_normal((50_000, max(levels, MIN_LEVELS)))
    null = (e - np.median(e, axis=1, keepdims=True)).var(axis=0).mean()
    e[:, 0] -= 100.0
    moved = (e[:, 0] - np.median(e, axis=1)).var()
    return float(max(1.0, moved / null))


def prefer_adjusted(summary: MetricSummary) -> tuple[bool, float | None]:
    """Whether this metric's launch-adjusted comparison is the sharper one at this point, and
    the ratio of its launch noise to its residual noise (None: one of them unmeasured).

    Both comparisons judge a mean over ``k`` current launches against a baseline of ``n``
    launches; their predicted standard errors are ``σ_L·√(1/k + 1/n)`` (plain: ``σ_L`` the
    baseline's launch-to-launch spread, ``std / mean``) and ``σ_R·√(1/k + 1/n_R)`` (adjusted:
    ``σ_R`` the spread of the level's residuals once each launch's median speed is removed,
    over ``n_R`` launches). The smaller wins, at ``k = 1``, the first look. With no residuals
    recorded the plain one is all there is; with residuals but no measured launch spread the
    adjusted one is taken, as its noise is measured and the plain one's would be assumed."""
    res = summary.launch_residual
    if res is None or res.sd is None:
        return False, None
    k_b = summary.launches if summary.launches is not None else summary.n
    if k_b < 2 or summary.mean == 0:
        return True, None
    sigma_l = summary.std / abs(summary.mean)
    se_plain = sigma_l * math.sqrt(1 + 1 / k_b)
    se_adj = res.sd * math.sqrt(1 + 1 / res.n)
    ratio = sigma_l / res.sd if res.sd > 0 else math.inf
    return se_adj < se_plain, ratio


Launches = Mapping[str, Mapping[int, LevelResult]]


def launches_of(sweep: SweepResult) -> dict[str, dict[int, LevelResult]]:
    """A sweep's samples grouped by the launch that measured them: {launch: {C: first sample
    of that launch}} (samples without a launch id cannot be adjusted)."""
    out: dict[str, dict[int, LevelResult]] = {}
    for lv in sweep.levels:
        for sample in sweep.samples(lv.max_concurrency):
            if sample.launch is not None:
                out.setdefault(sample.launch, {}).setdefault(sample.max_concurrency, sample)
    return out


def launch_values(by_launch: Launches, name: str) -> dict[str, dict[int, float]]:
    """{launch: {C: judged value of ``name``}}."""
    out: dict[str, dict[int, float]] = {}
    for lid, levels in by_launch.items():
        for c, lv in levels.items():
            v = lv.judged_value(name)
            if v is not None:
                out.setdefault(lid, {})[c] = v
    return out


def current_residuals(
    by_launch: Launches,
    entry_for: Callable[[int], BaselineEntry | None],
    concurrency: int,
    metrics: Sequence[str],
) -> dict[str, list[float]]:
    """A run's residuals of level ``concurrency`` per metric, centred on the baseline
    entries' means (levels without an entry are left out of the launch's median)."""
    levels = sorted({c for got in by_launch.values() for c in got})
    entries = {c: entry_for(c) for c in levels}
    out: dict[str, list[float]] = {}
    for name in metrics:
        if not adjustable(name):
            continue
        centers = {c: e.metrics[name].mean for c, e in entries.items() if e and name in e.metrics}
        res = launch_residuals(launch_values(by_launch, name), centers, concurrency)
        if res:
            out[name] = res
    return out
