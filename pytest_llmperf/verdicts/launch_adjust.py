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
* the residual ``q_C - median`` is what is left of level C, free of the launch's speed;
* a launch that measured its sweep in several passes has a factor per pass, found by median
  polish of its levels × passes table (``polish``), and a level's residual is the median of
  its passes' (``launch_centre``).

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
from scipy import stats as _scipy_stats

from pytest_llmperf.base.metric_defs import metric as metric_def
from pytest_llmperf.base.results import LevelResult, SweepResult
from pytest_llmperf.verdicts.baseline_file import BaselineEntry, LaunchResidual, MetricSummary
from pytest_llmperf.verdicts.sequential import BACKSTOP_SHARE, Look
from pytest_llmperf.verdicts.stats import Decision, LaunchNoise, NoiseRule, decide

__all__ = [
    "MIN_LEVELS",
    "ResidualSummary",
    "remove_common_factor",
    "adjustable",
    "current_residuals",
    "decide_adjusted",
    "last_look_gap",
    "next_launch_gain",
    "launch_residuals",
    "median_variance",
    "within_to_launch",
    "launch_centre",
    "launch_means",
    "launches_of",
    "pass_residuals",
    "polish",
    "outlier_inflation",
    "pool_residuals",
    "pool_within",
    "pooled_residual_noise",
    "prefer_adjusted",
    "moved_together",
    "shared_shift",
    "summarize_passes",
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


POLISH_STEPS = 10  # median polish: sweeps of rows then columns; it settles in two or three


def polish(passes: Sequence[Mapping[int, float]]) -> list[dict[int, float] | None]:
    """The launch factor removed from each pass of one launch (or A/B round), by median
    polish of its levels × passes table of log-ratios (Tukey): each pass's factor is the
    median over the levels of what is left once each level's own median over the passes is
    removed, repeated until it settles. With one pass this is ``remove_common_factor``; with
    several, a level stalled in one pass no longer moves that pass's factor: with three
    levels, one regressed and another stalled, the median of the pass is the regressed level
    itself, and one step would hide the regression in that pass. A pass with fewer than
    ``MIN_LEVELS`` finite levels cannot be adjusted (None); a NaN level stays NaN."""
    q = [{c: v for c, v in p.items() if math.isfinite(v)} for p in passes]
    cols = [j for j, p in enumerate(q) if len(p) >= MIN_LEVELS]
    if not cols:
        return [None] * len(passes)
    resid = {j: dict(q[j]) for j in cols}
    factor = dict.fromkeys(cols, 0.0)
    levels = sorted({c for j in cols for c in resid[j]})
    for step in range(POLISH_STEPS):
        moved = 0.0
        if step:  # each level's own median over the passes, then again the passes' factors
            for c in levels:
                row = [resid[j][c] for j in cols if c in resid[j]]
                r = statistics.median(row)
                moved = max(moved, abs(r))
                for j in cols:
                    if c in resid[j]:
                        resid[j][c] -= r
        for j in cols:
            s = statistics.median(resid[j].values())
            moved = max(moved, abs(s))
            factor[j] += s
            resid[j] = {c: v - s for c, v in resid[j].items()}
        if step and moved < 1e-12:
            break
    out: list[dict[int, float] | None] = [None] * len(passes)
    for j in cols:
        out[j] = {c: v - factor[j] if math.isfinite(v) else v for c, v in passes[j].items()}
    return out


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


def summarize_passes(per_launch: Sequence[Sequence[float]]) -> LaunchResidual | None:
    """``summarize_residuals`` of each launch's median pass (``launch_centre``), and with more
    than one pass a launch the passes' own spread (``within_sd``, ``within_dof``, ``passes``:
    the fewest a launch had), what ``pool_residuals`` needs to tell a launch's own effect on a
    level from the passes' noise. The spread leaves out passes beyond ``OUTLIER_SDS`` robust
    standard deviations of their launch's median (a stall inside one short level: the median
    of the launch ignores it, so the spread must not count it either)."""
    runs = [list(r) for r in per_launch if r]
    summary = summarize_residuals([launch_centre(r) for r in runs])
    if summary is None or all(len(r) < 2 for r in runs):
        return summary
    # A robust sd, unbiased for Gaussian passes: the median absolute difference of two passes
    # of one launch is 0.6745 * sqrt(2) sd (deviations from a few passes' own median would
    # be shrunk, and trim sound passes).
    pairs = [abs(a - b) for r in runs for i, a in enumerate(r) for b in r[i + 1 :]]
    scale = statistics.median(pairs) / (0.6745 * math.sqrt(2))
    kept = [
        [x for x in r if scale == 0 or abs(x - statistics.median(r)) <= OUTLIER_SDS * scale]
        for r in runs
    ]
    dof = sum(len(r) - 1 for r in kept if r)
    if dof < 1:
        return summary
    ss = sum((x - statistics.fmean(r)) ** 2 for r in kept if r for x in r)
    return summary.model_copy(
        update={"within_sd": math.sqrt(ss / dof), "within_dof": dof,
                "passes": min(len(r) for r in runs)}
    )  # fmt: skip


OUTLIER_SDS = 4.0


def launch_centre(passes: Sequence[float]) -> float:
    """A launch's residual of a level: the median of its passes' (one stalled pass of four
    moves a mean by a quarter of the stall, a median hardly at all)."""
    return statistics.median(passes)


@lru_cache(maxsize=32)
def median_variance(passes: int) -> float:
    """``Var(median of P standard normals) x P``: how much noisier a launch's median pass is
    than a mean of its passes would be (1 at P = 1 and 2, 1.35 at 3, 1.19 at 4, towards
    pi/2). Seeded draws, exact to about 1 %."""
    if passes <= 2:
        return 1.0
    rng = np.random.default_rng(0)
    med = np.median(rng.standard_normal((100_000, passes)), axis=1)
    return float(med.var() * passes)


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
    pooled, dof_p = _with_passes(spreads, var, dof)
    # passes recorded but not pooled: the F-test found the launches differ beyond them
    effect = dof_p == dof and all(r.within_sd is not None and r.within_dof > 0 for r in spreads)
    return LaunchNoise(
        math.sqrt(pooled * outlier_inflation(levels)),
        max(1, dof_p * (levels - 1) // levels) + 1,
        launch_effect=effect,
    )


def last_look_gap(noise: LaunchNoise, recorded: int, looks: int) -> float:
    """What a later run's last look leaves between its bounds, ``(c_K + p_K)·se_K``: ``K =
    looks`` launches against the ``recorded`` ones, ``se_K = σ·√(1/K + 1/recorded)``, Student's
    t at the recorded and the run's own degrees of freedom. Where it is at most ``(DETECT - 1)``
    tolerances, every launch-adjusted point is decided by the budget's last look: a deficit
    short of the fail bound lies under the pass bound. Wider, a regression between the
    tolerance and twice it can end the budget undecided."""
    look = Look(max(1, looks), max(1, looks)).share(1 - BACKSTOP_SHARE)
    dof = max(1, noise.launches - 1) + max(1, looks) - 1
    se = _sigma(noise) * math.sqrt(1 / max(1, looks) + 1 / max(1, recorded))
    return (look.critical(dof) + look.critical_pass(dof)) * se


def next_launch_gain(noise: LaunchNoise, recorded: int, looks: int) -> float:
    """By how much one more recording launch would narrow ``last_look_gap`` (a fraction): the
    noise's degrees of freedom grow by a recorded launch's share, ``dof / (recorded - 1)``
    (what each launch after the first adds when the launch medians alone are the noise: ``L -
    1`` for ``L`` levels), and the baseline's mean gets one launch more; the spread is assumed
    to stay. At a budget of 6, from three launches to four: about 13 % where the launches
    differed beyond their passes (4 degrees of freedom to 6), 10 % where the passes pooled into
    the noise (its degrees of freedom many, so only ``1/recorded`` narrows); then 7 % and
    5.5 % in the pooled case."""
    dof = max(1, noise.launches - 1)
    grown = LaunchNoise(noise.sd, dof + 1 + round(dof / max(1, recorded - 1)))
    return 1 - last_look_gap(grown, recorded + 1, looks) / last_look_gap(noise, recorded, looks)


def _sigma(noise: LaunchNoise) -> float:
    return max(noise.sd, NoiseRule().noise_floor)


# An F-test at this level decides whether launches differ beyond their passes' noise.
LAUNCH_EFFECT_ALPHA = 0.1


def _with_passes(spreads: Sequence[LaunchResidual], var: float, dof: int) -> tuple[float, int]:
    """The launch means' variance ``var`` (``dof``), pooled with the passes' own spread scaled
    to a launch mean (``within_sd² / passes``) when every level recorded one and an F-test
    finds no effect of a launch on a level beyond that spread: the launch means then hold
    nothing the passes do not, and the passes give the degrees of freedom that a few
    launches cannot. Otherwise the launch means alone, as they are the noise a launch has."""
    within = [r for r in spreads if r.within_sd is not None and r.within_dof > 0]
    if len(within) != len(spreads):
        return var, dof
    passes = min(r.passes for r in within)
    dof_w = sum(r.within_dof for r in within)
    var_w = sum(r.within_dof * (r.within_sd or 0.0) ** 2 for r in within) / dof_w
    return pool_within(var, dof, var_w * median_variance(passes) / passes, dof_w)


def within_to_launch(spreads: Sequence[LaunchResidual]) -> float | None:
    """``σ_W / σ_L`` as recorded: a pass's own spread against a launch's own effect on a level,
    the latter what the launch medians' variance holds beyond their passes' noise, both pooled
    over the levels (``run/passes.py`` chooses passes from it). None unless some level spans two
    or more launches of two or more passes; ``inf`` when the launch medians vary no more than
    their passes explain, by the F-test ``pool_within`` applies (a further pass is then worth
    all it costs)."""
    rows = [
        r
        for r in spreads
        if r.within_sd is not None and r.within_dof > 0 and r.sd is not None and r.n >= 2
    ]
    if not rows:
        return None
    dof = sum(r.n - 1 for r in rows)
    var_m = sum((r.n - 1) * (r.sd or 0.0) ** 2 for r in rows) / dof
    dof_w = sum(r.within_dof for r in rows)
    var_w = sum(r.within_dof * (r.within_sd or 0.0) ** 2 for r in rows) / dof_w
    passes = min(r.passes for r in rows)
    explained = var_w * median_variance(passes) / passes
    if var_w <= 0 or var_m / explained <= _f_critical(dof, dof_w):
        return math.inf  # the F-test of ``pool_within``: no launch effect found
    return math.sqrt(var_w / (var_m - explained))


def pool_within(var: float, dof: int, var_w: float, dof_w: int) -> tuple[float, int]:
    """The one pooling rule, for baselines and A/B rounds alike: ``var`` (``dof``), the
    variance of a launch's (or round's) median pass over launches, pooled with ``var_w``
    (``dof_w``), the passes' own spread already scaled to a median pass, when an F-test at
    ``LAUNCH_EFFECT_ALPHA`` finds no excess of the first over the second; else ``var`` alone."""
    if var_w <= 0 or dof < 1 or dof_w < 1 or var / var_w > _f_critical(dof, dof_w):
        return var, dof
    return (dof * var + dof_w * var_w) / (dof + dof_w), dof + dof_w


@lru_cache(maxsize=256)
def _f_critical(dof_num: int, dof_den: int) -> float:
    return float(_scipy_stats.f.isf(LAUNCH_EFFECT_ALPHA, dof_num, dof_den))


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


def _launch_spread(summary: MetricSummary) -> tuple[float, int]:
    """The plain comparison's recorded noise: the relative launch-to-launch spread, and the
    launches it came from."""
    k_b = summary.launches if summary.launches is not None else summary.n
    return (summary.std / abs(summary.mean) if summary.mean else 0.0), k_b


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
    sigma_l, k_b = _launch_spread(summary)
    if k_b < 2 or summary.mean == 0:
        return True, None
    se_plain = sigma_l * math.sqrt(1 + 1 / k_b)
    se_adj = res.sd * math.sqrt(1 + 1 / res.n)
    ratio = sigma_l / res.sd if res.sd > 0 else math.inf
    return se_adj < se_plain, ratio


# How far beyond the plain comparison's standard error a run's shared speed must be before
# the recorded launch noise is taken not to describe the run's launches.
MOVED_Z = 3.0


def shared_shift(mean: float, base_mean: float, residuals: Sequence[float], base_residual: float
                 ) -> float:  # fmt: skip
    """The log change of a level that its launches' shared speed made: the plain log change
    less the residual's (both means positive)."""
    return math.log(mean / base_mean) - (statistics.fmean(residuals) - base_residual)


def moved_together(
    values: Sequence[float], summary: MetricSummary, residuals: Sequence[float], tolerance: float
) -> float | None:
    """The run's shared speed against the recording's (a relative change), when it is beyond
    both the tolerance and ``MOVED_Z`` standard errors of the plain comparison; else None.

    ``prefer_adjusted`` predicts each comparison's noise from the recording; a recording made
    in one sitting cannot know how far a later sitting's box or launches move every level
    together. When this run's levels moved together that far, the plain comparison measures
    that move, not the level (real SGLang on a CPU ran 2.1x faster than its recording of the
    day before, and a capped C=4, 21 % below its neighbours, was +70 %: a pass). The shared
    speed is what the residuals removed: the level's plain log change less its residual's."""
    res = summary.launch_residual
    if res is None or not values or not residuals or summary.mean <= 0:
        return None
    mean = statistics.fmean(values)
    if mean <= 0:
        return None
    shift = shared_shift(mean, summary.mean, residuals, res.mean)
    sigma_l, k_b = _launch_spread(summary)
    se = sigma_l * math.sqrt(1 / len(residuals) + 1 / max(k_b, 1))
    moved = math.expm1(shift)
    return moved if abs(moved) > max(tolerance, MOVED_Z * se) else None


# {launch: {C: that launch's samples of level C, in the order measured}}. A launch measures
# its sweep in ``passes`` (1, 4, 16, 1, 4, 16, ...): the j-th sample of each level is pass j.
Launches = Mapping[str, Mapping[int, Sequence[LevelResult]]]
# {launch: its passes, each {C: value}}
PassValues = Mapping[str, Sequence[Mapping[int, float]]]


def launches_of(sweep: SweepResult) -> dict[str, dict[int, list[LevelResult]]]:
    """A sweep's samples grouped by the launch that measured them (``Launches``; samples
    without a launch id cannot be adjusted)."""
    out: dict[str, dict[int, list[LevelResult]]] = {}
    for lv in sweep.levels:
        for sample in sweep.samples(lv.max_concurrency):
            if sample.launch is not None:
                out.setdefault(sample.launch, {}).setdefault(sample.max_concurrency, [])
                out[sample.launch][sample.max_concurrency].append(sample)
    return out


def launch_values(by_launch: Launches, name: str) -> dict[str, list[dict[int, float]]]:
    """{launch: its passes, each {C: judged value of ``name``}}."""
    out: dict[str, list[dict[int, float]]] = {}
    for lid, levels in by_launch.items():
        passes: list[dict[int, float]] = []
        for c, samples in levels.items():
            for j, lv in enumerate(samples):
                while len(passes) <= j:
                    passes.append({})
                v = lv.judged_value(name)
                if v is not None:
                    passes[j][c] = v
        out[lid] = passes
    return out


def pass_residuals(values: PassValues, centers: Mapping[int, float], concurrency: int
                   ) -> list[list[float]]:  # fmt: skip
    """Per launch, level ``concurrency``'s residual in each of its passes that can be
    adjusted (each pass's own launch factor removed, ``polish``: a pass is free of the
    launch's speed)."""
    out: list[list[float]] = []
    for passes in values.values():
        q = [
            {c: math.log(v / centers[c]) for c, v in p.items() if v > 0 and centers.get(c, 0) > 0}
            for p in passes
        ]
        got = [r[concurrency] for r in polish(q) if r is not None and concurrency in r]
        if got:
            out.append(got)
    return out


def launch_means(values: PassValues, centers: Mapping[int, float], concurrency: int
                 ) -> list[float]:  # fmt: skip
    """Level ``concurrency``'s residual per launch (``launch_centre`` of its passes)."""
    return [launch_centre(r) for r in pass_residuals(values, centers, concurrency)]


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
        res = launch_means(launch_values(by_launch, name), centers, concurrency)
        if res:
            out[name] = res
    return out
