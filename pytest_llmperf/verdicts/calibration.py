"""How noisy is this suite on this box, and what tolerance / repeats keep a gate honest?

``llmperf calibrate`` runs the suite N times unchanged; this module turns the N results into
per-point noise and proposals. The arithmetic, for one point (config, workload, C) and one
gated metric:

* ``cv``: the sample standard deviation of the N per-run means over their mean (relative
  noise of one suite run at the configured repeats ``n``).
* A baseline comparison fails when the relative deficit exceeds the tolerance ``t``. With the
  baseline and the run each a mean of ``n`` runs' worth of samples, the deficit's noise is
  ``s = cv * sqrt(1/n_base + 1/n_run) = cv * sqrt(2 / n)`` (normal approximation).
* One point's false-alarm probability is ``P = 1 - Phi(t / s)`` (one-sided: only a regression
  fails). For the whole suite of ``K`` gated comparisons, the union bound (Bonferroni) keeps the
  chance of any false alarm per suite run at most ``target`` when each is at most
  ``alpha = target / K``, i.e. ``t >= z(1 - alpha) * s``: the proposed tolerance.
* The repeats that keep the current tolerance instead: ``n >= 2 * (z(1 - alpha) * cv / t)**2``.
* Minimum detectable effect (80 % power) at the configured ``t`` and ``n``: a true drop ``d``
  fails with probability ``Phi((d - t) / s)``, so ``MDE = t + z(0.8) * s``.

Assumption, stated in the report: repeats are independent samples (true when each repeat is a
fresh launch; optimistic when one launch's speed factor is shared by its repeats, in which case
prefer raising the tolerance). The verdicts' noise rule (``verdicts/stats.py``) only ever turns
a would-be failure into INCONCLUSIVE, so the plain tolerance rule bounds the false alarms.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scipy.stats import norm

from pytest_llmperf.base.errors import InputError
from pytest_llmperf.base.metric_defs import metric
from pytest_llmperf.base.results import SweepResult

DEFAULT_TARGET = 0.01  # at most one false alarm per 100 suite runs
POWER_Z = float(norm.ppf(0.8))
MAX_PROPOSED_REPEATS = 20


@dataclass(frozen=True)
class PointNoise:
    """The calibration of one (config, workload, C, metric)."""

    config: str
    workload: str
    concurrency: int
    metric: str
    runs: int
    mean: float
    cv: float
    tolerance: float
    repeats: int
    false_alarm: float  # per suite run, this point alone, at the configured t and n
    mde: float  # 80 % power, at the configured t and n
    proposed_tolerance: float  # at the configured n, for the suite-wide target
    proposed_repeats: int | None  # at the configured t (None: more than MAX_PROPOSED_REPEATS)


@dataclass(frozen=True)
class Calibration:
    points: list[PointNoise]
    target: float
    comparisons: int
    alpha: float  # per comparison
    suite_false_alarm: float  # union bound at the configured settings, capped at 1
    proposed_tolerance: dict[str, float]  # per metric, the largest point's need
    proposed_repeats: int | None


def _round_up(x: float, step: float = 0.005) -> float:
    return math.ceil(x / step - 1e-9) * step


def point_means(
    runs: Sequence[Sequence[SweepResult]], metric_name: str
) -> dict[tuple[str, str, int], list[float]]:
    """(config, workload key, C) -> the per-run mean of ``metric_name``; only points measured
    in every run (a point missing from a run says nothing about its noise)."""
    out: dict[tuple[str, str, int], list[float]] = {}
    for sweeps in runs:
        for sweep in sweeps:
            samples: dict[int, list[float]] = {}
            for lv in [*sweep.levels, *(x for xs in sweep.repeats.values() for x in xs)]:
                v = lv.metric_value(metric_name)
                if v is not None and math.isfinite(v):
                    samples.setdefault(lv.max_concurrency, []).append(float(v))
            for c, vs in samples.items():
                out.setdefault((sweep.config, sweep.workload.key(), c), []).append(
                    statistics.fmean(vs)
                )
    return {k: v for k, v in out.items() if len(v) == len(runs)}


def calibrate(
    runs: Sequence[Sequence[SweepResult]],
    *,
    metrics: Sequence[str],
    tolerances: Mapping[str, float],
    repeats: int,
    target: float = DEFAULT_TARGET,
) -> Calibration:
    """Noise per point and metric over ``runs`` (each run: its sweeps), and the proposals."""
    if len(runs) < 2:
        raise InputError(f"calibration needs at least 2 runs of the suite, got {len(runs)}")
    if not 0 < target < 1:
        raise InputError(f"--target must be in (0, 1), got {target!r}")
    if repeats < 1:
        raise InputError(f"repeats must be at least 1, got {repeats!r}")
    means = {m: point_means(runs, m) for m in metrics}
    k = sum(len(v) for v in means.values())
    if k == 0:
        raise InputError("no point was measured in every run; nothing to calibrate")
    alpha = target / k
    z = float(norm.ppf(1 - alpha))
    scale = math.sqrt(2 / repeats)
    points = []
    for m in metrics:
        metric(m)  # unknown names fail here, naming the metric
        t = tolerances[m]
        for (config, wl, c), vs in sorted(means[m].items()):
            mean = statistics.fmean(vs)
            cv = statistics.stdev(vs) / mean if mean > 0 else math.inf
            s = cv * scale
            false_alarm = float(norm.sf(t / s)) if s > 0 else 0.0
            need = 2 * (z * cv / t) ** 2 if t > 0 else math.inf
            n_needed = max(1, math.ceil(need)) if need <= MAX_PROPOSED_REPEATS else None
            points.append(
                PointNoise(
                    config=config,
                    workload=wl,
                    concurrency=c,
                    metric=m,
                    runs=len(vs),
                    mean=mean,
                    cv=cv,
                    tolerance=t,
                    repeats=repeats,
                    false_alarm=false_alarm,
                    mde=t + POWER_Z * s,
                    proposed_tolerance=_round_up(z * s),
                    proposed_repeats=n_needed,
                )
            )
    tol = {
        m: max(p.proposed_tolerance for p in points if p.metric == m)
        for m in metrics
        if any(p.metric == m for p in points)
    }
    needs = [p.proposed_repeats for p in points]
    rep = None if any(n is None for n in needs) else max(n for n in needs if n is not None)
    return Calibration(
        points=points,
        target=target,
        comparisons=k,
        alpha=alpha,
        suite_false_alarm=min(1.0, sum(p.false_alarm for p in points)),
        proposed_tolerance=tol,
        proposed_repeats=rep,
    )


def render(cal: Calibration) -> str:
    """The calibration report: one line per point, then the proposal."""
    lines = [
        f"{'config':12s} {'workload':22s} {'C':>5s} {'metric':24s} {'CV':>7s} {'tol':>6s}"
        f" {'P(false alarm)':>14s} {'MDE':>7s} {'tol needed':>10s} {'repeats needed':>14s}"
    ]
    for p in cal.points:
        n = p.proposed_repeats
        needed = str(n) if n is not None else f">{MAX_PROPOSED_REPEATS}"
        lines.append(
            f"{p.config:12s} {p.workload:22s} {p.concurrency:5d} {p.metric:24s} "
            f"{p.cv:7.2%} {p.tolerance:6.1%} {p.false_alarm:14.2e} {p.mde:7.1%} "
            f"{p.proposed_tolerance:10.1%} "
            f"{needed:>14}"
        )
    tol = ", ".join(f'{m} = "{t * 100:g}%"' for m, t in cal.proposed_tolerance.items())
    rep = cal.proposed_repeats
    lines += [
        "",
        f"{cal.comparisons} gated comparisons; target: at most {cal.target:g} false alarms per "
        f"suite run, so each at most {cal.alpha:.2e} (Bonferroni)",
        f"at the configured settings: P(any false alarm per suite run) <= "
        f"{cal.suite_false_alarm:.2e}"
        + (
            " (meets the target)" if cal.suite_false_alarm <= cal.target else " (MISSES the target)"
        ),
        f"proposal at the configured repeats: [sweep] tolerance = {{ {tol} }}",
        "or keep the tolerances and set [sweep] repeat = "
        + (str(rep) if rep is not None else f"(more than {MAX_PROPOSED_REPEATS}: raise them)"),
        "assumes repeats are independent (a fresh launch each); MDE is at 80 % power",
    ]
    return "\n".join(lines)
