"""Paired A/B statistics: judge a candidate against a reference measured in the same job.

A stored baseline was measured on another day, on another launch of another box; run-to-run
noise then has to be covered by a wide tolerance, which hides real regressions (SGLang's CI
roadmap, sgl-project/sglang #21157, #24563). An A/B run measures both servers in interleaved
rounds instead (reference, candidate, candidate, reference, ...), so slow drift of the machine
hits both members of a round alike. Each round gives one paired log-ratio per level,
``d_r = ln(candidate_r / reference_r)``; the verdict is on the mean of the ``d_r`` and its
t-based confidence interval (Student's t with ``n - 1`` degrees of freedom, ``n`` rounds),
in the one vocabulary of ``verdicts/verdict.py``:

* ``FAIL`` when the whole CI is worse than the tolerance (a regression beyond it, beyond noise);
* ``PASS`` when the whole CI is better than that (no regression as large as the tolerance);
* ``INCONCLUSIVE`` otherwise (the rounds cannot tell: add rounds);
* ``INVALID`` when fewer than two rounds had a valid measurement on both sides (``run/ab.py``
  leaves a round whose level is invalid out of that level's pairs: it is not a sample of speed).

Log-ratios make the test scale-free and symmetric (a 2x speed-up and a 2x slow-down are
``+-ln 2``); the reported change is ``exp(mean) - 1``, its CI ``exp(bounds) - 1``.

``remove_launch_factor`` is for boxes where each launch runs at its own speed (a shared GPU,
the simulator's ``--sim-launch-speed-sd``): that factor scales every level of a launch alike,
so subtracting each round's median log-ratio over the levels cancels it. The price: a
regression that hits every level equally is cancelled too; only level-specific regressions
remain visible (see docs/gates-and-ab.md). ``adjust = "auto"`` (the default) takes it only
where the rounds show that factor is the larger noise, keeping the plain comparison as a
fail-only backstop (``verdicts/paired_sequential.py``, which also holds the sequential rule).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scipy import stats as _scipy_stats

from pytest_llmperf.base.errors import InputError
from pytest_llmperf.base.metric_defs import metric
from pytest_llmperf.verdicts.launch_adjust import MIN_LEVELS, remove_common_factor
from pytest_llmperf.verdicts.verdict import Verdict

DEFAULT_CONFIDENCE = 0.95


@dataclass(frozen=True)
class PairedResult:
    """One A/B point: the paired change of ``metric`` at one concurrency, with its verdict."""

    candidate: str
    reference: str
    metric: str
    concurrency: int
    rounds: int
    change: float  # exp(mean log-ratio) - 1; negative: the candidate's metric is lower
    ci_low: float  # the change's CI bounds, same scale
    ci_high: float
    tolerance: float
    confidence: float
    verdict: Verdict
    message: str
    adjusted: bool = False  # launch factor removed (remove_launch_factor)
    budget: int | None = None  # sequential: the most rounds (None: a fixed number of rounds)
    # the largest regression (relative, >= 0 when one is possible) the verdict's interval does
    # not rule out: what a pass means ("no regression larger than ...")
    missable: float | None = None


def log_ratios(candidate: Sequence[float], reference: Sequence[float]) -> list[float]:
    """``ln(c / r)`` per round; rounds are paired by position."""
    if len(candidate) != len(reference):
        raise InputError(
            f"paired rounds need as many candidate as reference values "
            f"({len(candidate)} vs {len(reference)})"
        )
    out = []
    for c, r in zip(candidate, reference, strict=True):
        if not (c > 0 and r > 0 and math.isfinite(c) and math.isfinite(r)):
            raise InputError(f"paired values must be positive and finite, got {c!r} and {r!r}")
        out.append(math.log(c / r))
    return out


def mean_ci(
    values: Sequence[float], confidence: float = DEFAULT_CONFIDENCE
) -> tuple[float, float, float]:
    """Mean and the two-sided t confidence interval of the mean (``n >= 2``)."""
    n = len(values)
    if n < 2:
        raise InputError(f"a confidence interval needs at least 2 rounds, got {n}")
    if not 0 < confidence < 1:
        raise InputError(f"confidence must be in (0, 1), got {confidence!r}")
    m = statistics.fmean(values)
    half = float(_scipy_stats.t.ppf(0.5 + confidence / 2, n - 1)) * statistics.stdev(values)
    half /= math.sqrt(n)
    return m, m - half, m + half


def remove_launch_factor(per_level: Mapping[int, Sequence[float]]) -> dict[int, list[float]]:
    """Subtract each round's median log-ratio over the levels (see the module docstring):
    ``launch_adjust.remove_common_factor`` per round.

    A NaN (a level measured invalid in that round) stays NaN; a round with fewer than
    ``MIN_LEVELS`` finite levels cannot be adjusted and becomes NaN at every level.
    """
    levels = sorted(per_level)
    if len(levels) < MIN_LEVELS:
        raise InputError(
            f"adjust = 'launch' needs at least {MIN_LEVELS} levels in the sweep, got {len(levels)}"
        )
    rounds = {len(per_level[c]) for c in levels}
    if len(rounds) != 1:
        raise InputError("adjust = 'launch' needs the same number of rounds at every level")
    out: dict[int, list[float]] = {c: [] for c in levels}
    for r in range(rounds.pop()):
        residuals = remove_common_factor({c: per_level[c][r] for c in levels})
        for c in levels:
            out[c].append(math.nan if residuals is None else residuals[c])
    return out


def pct(x: float) -> str:
    return f"{x * 100:+.1f}".replace("-", "\u2212")


def describe_change(name: str, change: float, candidate: str, reference: str) -> str:
    """ "new is 7.9 % slower than old" (throughputs) or "new's median_ttft_ms is 3.0 % higher"."""
    size = f"{abs(change) * 100:.1f} %"
    if metric(name).unit.endswith("/s"):
        return f"{candidate} is {size} {'slower' if change < 0 else 'faster'} than {reference}"
    word = "lower" if change < 0 else "higher"
    return f"{candidate}'s {name} is {size} {word} than {reference}'s"


def judge_paired(
    d: Sequence[float],
    *,
    candidate: str,
    reference: str,
    metric_name: str,
    concurrency: int,
    tolerance: float,
    confidence: float = DEFAULT_CONFIDENCE,
    adjusted: bool = False,
) -> PairedResult:
    """The verdict on per-round log-ratios ``d`` (candidate over reference)."""
    if not 0 <= tolerance < 1:
        raise InputError(f"tolerance must be in [0, 1), got {tolerance!r}")
    n = len(d)

    def result(
        change: float, low: float, high: float, verdict: Verdict, message: str
    ) -> PairedResult:
        return PairedResult(
            candidate=candidate,
            reference=reference,
            metric=metric_name,
            concurrency=concurrency,
            rounds=n,
            change=change,
            ci_low=low,
            ci_high=high,
            tolerance=tolerance,
            confidence=confidence,
            verdict=verdict,
            message=message,
            adjusted=adjusted,
            missable=max(0.0, -low if higher_better else high),
        )

    higher_better = metric(metric_name).direction == "higher"
    if n < 2:
        change = math.exp(d[0]) - 1 if d else 0.0
        return result(
            change,
            change,
            change,
            Verdict.INCONCLUSIVE,
            f"{candidate} vs {reference} at C={concurrency}: {n} paired round(s); "
            "a paired verdict needs at least 2 (set rounds = 2 or more in [[ab]])",
        )
    m, lo, hi = mean_ci(d, confidence)
    change, ci_low, ci_high = math.exp(m) - 1, math.exp(lo) - 1, math.exp(hi) - 1
    if higher_better:
        worse_beyond = ci_high < -tolerance
        within = ci_low > -tolerance
    else:
        worse_beyond = ci_low > tolerance
        within = ci_high < tolerance
    verdict = Verdict.FAIL if worse_beyond else Verdict.PASS if within else Verdict.INCONCLUSIVE
    how = "launch factor removed, " if adjusted else ""
    text = (
        f"{describe_change(metric_name, change, candidate, reference)} at C={concurrency} "
        f"(paired over {n} rounds, {how}{confidence * 100:g} % CI "
        f"{pct(ci_low)} \u2026 {pct(ci_high)} %)"
    )
    limit = f"{'-' if higher_better else '+'}{tolerance * 100:g} %"
    if verdict == Verdict.FAIL:
        text += f": a regression beyond the tolerance ({limit})"
    elif verdict == Verdict.INCONCLUSIVE:
        text += f": the interval straddles the tolerance ({limit}); add rounds to decide"
    return result(change, ci_low, ci_high, verdict, text)


def aa_band(
    sides: Sequence[Sequence[float]], confidence: float = DEFAULT_CONFIDENCE
) -> tuple[float, float, int] | None:
    """What "no change" looks like in these rounds: each side's values split into consecutive
    round pairs (1 with 2, 3 with 4, ...), ``ln(later / earlier)`` of one unchanged server
    against itself, and the confidence interval of their mean as relative changes, with the
    number of pairs. None with fewer than 2 pairs (NaN values, invalid rounds, are skipped).
    An A/B change whose interval sits inside this band is what the runner does to one server
    between its launches."""
    d = [
        math.log(v[k + 1] / v[k])
        for v in sides
        for k in range(0, len(v) - 1, 2)
        if math.isfinite(v[k]) and math.isfinite(v[k + 1]) and v[k] > 0 and v[k + 1] > 0
    ]
    if len(d) < 2:
        return None
    _, lo, hi = mean_ci(d, confidence)
    return math.exp(lo) - 1, math.exp(hi) - 1, len(d)
