"""Paired A/B rounds judged sequentially, and the choice of the launch-adjusted comparison.

The rule is the stored-baseline one (``verdicts/sequential.py``: ``Look``, its ``c_k`` and
``p_k``), applied to the paired log-ratios ``d_r = ln(candidate_r / reference_r)`` of ``n``
rounds so far: look ``k = n - 1`` of ``K = budget - 1`` (a paired t needs two rounds), Student's t
with ``n - 1`` degrees of freedom, ``se = sd / √n``. On the log scale, with the deficit ``x``
signed so that a regression is positive (``-mean`` for a higher-is-better metric, ``mean`` for
a latency) and the tolerance as the log-ratio it allows (``-ln(1 - tol)``, or ``ln(1 + tol)``):

* **fail**  ``x - c_k·se > tol``: worse than the tolerance beyond the rounds' noise;
* **pass**  ``x + p_k·se < DETECT·tol`` (not a fail): a regression of twice the tolerance is
  ruled out;
* otherwise undecided: one more round while the budget lasts; at the last look inconclusive.

A level's verdict is frozen at the look that decided it (``ABRun._look``), so the union
bound of the spending holds: P(a level whose true change is the tolerance ever fails) <= alpha.
Whichever comparison a look takes, it spends at most that look's share (adjusted
``1 - BACKSTOP_SHARE`` of it, the backstop the rest).

``choose_adjust``: whether the rounds' common factor (what each round's launches draw, shared
by every level) is the larger noise, so that removing it (``paired.remove_launch_factor``) is
the sharper comparison. Adjusted, the plain comparison stays a fail-only backstop spending
``BACKSTOP_SHARE`` of alpha: a regression every level shares is cancelled by adjusting.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from pytest_llmperf.base.errors import InputError
from pytest_llmperf.base.metric_defs import metric
from pytest_llmperf.verdicts.launch_adjust import MIN_LEVELS
from pytest_llmperf.verdicts.paired import (
    DEFAULT_CONFIDENCE,
    PairedResult,
    describe_change,
    judge_paired,
    pct,
)
from pytest_llmperf.verdicts.sequential import BACKSTOP_SHARE, DETECT, Look
from pytest_llmperf.verdicts.stats import LaunchNoise
from pytest_llmperf.verdicts.verdict import Verdict

__all__ = ["AdjustChoice", "choose_adjust", "judge_paired_look", "judge_with_backstop"]


def _log_tolerance(tol: float, higher_better: bool) -> float:
    """The log-ratio deficit a relative tolerance allows (inf: nothing can be that bad)."""
    if higher_better:
        return -math.log(1 - tol) if tol < 1 else math.inf
    return math.log(1 + tol)


def judge_paired_look(
    d: Sequence[float],
    look: Look,
    *,
    candidate: str,
    reference: str,
    metric_name: str,
    concurrency: int,
    tolerance: float,
    confidence: float = DEFAULT_CONFIDENCE,
    adjusted: bool = False,
    noise: LaunchNoise | None = None,
    passes: int = 1,
) -> PairedResult:
    """The sequential verdict on ``d`` at ``look`` (module docstring). The interval reported
    is a ``confidence`` CI valid wherever the rounds stop: each end spends
    ``(1 - confidence) / 2`` over the looks as ``c_k`` does (at 95 %, its worse end is the fail
    bound), so it holds at an early stop, where the fixed-sample CI is too narrow (the rule
    stops early when the change happens to look large). ``missable``: the largest regression
    this look rules out (as a relative change), what a pass means.
    ``noise``: a round's spread known to more degrees of freedom than ``d``'s own ``n - 1``
    (``ABRun.noise``: pooled over levels, or with the rounds' ``passes``), used in its place."""
    if not 0 <= tolerance < 1:
        raise InputError(f"tolerance must be in [0, 1), got {tolerance!r}")
    n = len(d)
    if n < 2:
        return judge_paired(d, candidate=candidate, reference=reference, metric_name=metric_name,
                            concurrency=concurrency, tolerance=tolerance, confidence=confidence,
                            adjusted=adjusted)  # fmt: skip
    higher_better = metric(metric_name).direction == "higher"
    sd, dof = (statistics.stdev(d), n - 1) if noise is None else (noise.sd, noise.launches - 1)
    if not 0 < confidence < 1:
        raise InputError(f"confidence must be in (0, 1), got {confidence!r}")
    m, se = statistics.fmean(d), sd / math.sqrt(n)
    half = replace(look, alpha=(1 - confidence) / 2).critical(dof) * se  # c_k at each end's share
    lo, hi = m - half, m + half
    x = -m if higher_better else m
    c_k, p_k = look.critical(dof), look.critical_pass(dof)
    if x - c_k * se > _log_tolerance(tolerance, higher_better):
        verdict = Verdict.FAIL
    elif x + p_k * se < _log_tolerance(min(DETECT * tolerance, 0.999999), higher_better):
        verdict = Verdict.PASS
    else:
        verdict = Verdict.INCONCLUSIVE
    worst_log = x + p_k * se  # the largest deficit not ruled out at this look
    missable = 1 - math.exp(-worst_log) if higher_better else math.exp(worst_log) - 1
    change = math.exp(m) - 1
    how = "launch factor removed, " if adjusted else ""
    of = f" of {passes} passes" if passes > 1 else ""
    if noise is not None:
        how += f"noise sd {sd * 100:.1f} % on {dof} degrees of freedom, "
    text = (
        f"{describe_change(metric_name, change, candidate, reference)} at C={concurrency} "
        f"(paired over {n} rounds{of}, {how}{confidence * 100:g} % CI valid at any stop "
        f"{pct(math.exp(lo) - 1)} \u2026 {pct(math.exp(hi) - 1)} %)"
    )
    sign = "-" if higher_better else "+"
    rounds = f"after {look.k + 1} of {look.looks + 1} rounds"  # rounds run, invalid ones too
    if verdict == Verdict.FAIL:
        text += (
            f": a regression beyond the tolerance ({sign}{tolerance * 100:g} %), decided {rounds}"
        )
    elif verdict == Verdict.PASS:
        text += (
            f": no regression larger than {missable * 100:.1f} % (a regression of {DETECT:g}x "
            f"the tolerance is ruled out), decided {rounds}"
            if missable >= 0  # else even the worse end of the interval is a speed-up
            else f": no regression, even the worse end of the interval is a gain of "
            f"{-missable * 100:.1f} %, decided {rounds}"
        )
    else:
        text += f": undecided {rounds}"
        if look.last:
            text += " (the budget); the change is within the rounds' noise: raise rounds to decide"
    return PairedResult(
        candidate=candidate,
        reference=reference,
        metric=metric_name,
        concurrency=concurrency,
        rounds=n,
        change=change,
        ci_low=math.exp(lo) - 1,
        ci_high=math.exp(hi) - 1,
        tolerance=tolerance,
        confidence=confidence,
        verdict=verdict,
        message=text,
        adjusted=adjusted,
        budget=look.looks + 1,
        missable=missable,
    )


@dataclass(frozen=True)
class AdjustChoice:
    """Whether to judge a level launch-adjusted, with the two spreads that decided it."""

    adjusted: bool
    common_sd: float | None = None  # spread over rounds of each round's median log-ratio
    residual_sd: float | None = None  # pooled spread of the levels' residuals, own mean removed
    why: str = ""


def choose_adjust(per_level: Mapping[int, Sequence[float]]) -> AdjustChoice:
    """Adjust when the sweep has ``MIN_LEVELS`` levels and the common factor's spread (the
    standard deviation over rounds of each round's mean log-ratio over the levels) exceeds the
    residuals' (each level's log-ratio minus its round's mean, its spread over rounds around
    the level's own mean, pooled over the levels). Only rounds valid at every level count.

    Both are spreads only: shifting any level's log-ratios by a constant (a regression of that
    level, or of all) leaves both exactly unchanged (hence the mean over levels here, not the
    median the adjusted comparison removes), so the choice does not look at the mean the
    verdict then tests, and choosing does not bias that test (under normal noise the sample
    mean and the spreads are independent). One choice per A/B, for every level: pooled over
    the levels, the residual spread rests on more than one level's few rounds."""
    levels = sorted(per_level)
    if len(levels) < MIN_LEVELS:
        return AdjustChoice(False, why=f"fewer than {MIN_LEVELS} levels: plain comparison")
    n = min(len(per_level[c]) for c in levels)
    complete = [r for r in range(n) if all(math.isfinite(per_level[c][r]) for c in levels)]
    if len(complete) < 2:
        return AdjustChoice(False, why="too few complete rounds to tell: plain comparison")
    means = [statistics.fmean(per_level[c][r] for c in levels) for r in complete]
    pairs = list(zip(complete, means, strict=True))
    residuals = {c: [per_level[c][r] - m for r, m in pairs] for c in levels}
    common = statistics.stdev(means)
    resid = math.sqrt(statistics.fmean(statistics.variance(v) for v in residuals.values()))
    adjusted = common > resid
    word = "larger" if adjusted else "not larger"
    why = (
        f"the rounds' common launch factor (sd {common * 100:.1f} %) is {word} than the "
        f"levels' own noise (sd {resid * 100:.1f} %)"
    )
    return AdjustChoice(adjusted, common, resid, why)


Judge = Callable[[Sequence[float], float, bool], PairedResult]


def judge_with_backstop(
    plain: Sequence[float], adjusted: Sequence[float], judge: Judge, why: str
) -> PairedResult:
    """Launch-adjusted verdict with the plain one as a fail-only backstop. ``judge(d, share,
    adjusted)`` judges ``d`` spending ``share`` of the false-fail rate. FAIL when either fails,
    PASS when the adjusted one passes, else INCONCLUSIVE; the message says which decided."""
    adj = judge(adjusted, 1 - BACKSTOP_SHARE, True)
    backstop = judge(plain, BACKSTOP_SHARE, False) if len(plain) >= 2 else None
    if backstop is not None and backstop.verdict == Verdict.FAIL and adj.verdict != Verdict.FAIL:
        return replace(
            backstop,
            message=(
                f"{backstop.message}; decided by the plain comparison (the fail-only backstop "
                f"beside the launch-adjusted one, which cancels a regression every level "
                f"shares; adjusted because {why})"
            ),
        )
    return replace(
        adj,
        message=f"{adj.message}; launch-adjusted because {why} (plain comparison kept as a "
        "fail-only backstop)",
    )
