"""What a point's verdict means: the largest regression the run could have missed.

A pass says "nothing changed beyond tolerance", but only as far as the measurement can see: on
a noisy box with few launches a 20 % drop passes as often as not. So every point says, per
gated metric, the regression it catches with 95 % probability (``Decision.mde``: tolerance +
(z + 1.645)·se, from the samples and the noise the comparison used); for a pass that is the
largest regression it could have missed, for an inconclusive point the smallest it could have
caught. The sentence goes to the summary, the step summary, ``results.json`` and JUnit.
"""

from __future__ import annotations

import math

from pytest_llmperf.verdicts.compare import MetricComparison, PointComparison
from pytest_llmperf.verdicts.paired import PairedResult
from pytest_llmperf.verdicts.verdict import Verdict

__all__ = ["green_means", "launches", "missable", "paired_green_means"]


def _pct(x: float) -> str:
    v = 100 * x
    return f"{v:.0f} %" if abs(v) >= 10 else f"{v:.1f} %"


def _judged(point: PointComparison) -> list[MetricComparison]:
    return [
        m
        for m in point.metrics
        if m.verdict != Verdict.MISSING
        and m.decision.mde is not None
        and math.isfinite(m.decision.mde)
    ]


def missable(point: PointComparison) -> dict[str, float]:
    """Per gated metric, the relative regression this comparison catches 95 % of the time."""
    return {m.metric: float(m.decision.mde) for m in _judged(point) if m.decision.mde is not None}


def launches(point: PointComparison) -> int:
    """Independent launches the current side of the point's decisions rested on."""
    return max((m.decision.n_launches_current or m.n_current for m in _judged(point)), default=0)


def _metric_mde(m: MetricComparison) -> str:
    assert m.decision.mde is not None
    return f"{_pct(m.decision.mde)} in {m.metric}" + (" (launch-adjusted)" if m.adjusted else "")


def _change(m: MetricComparison) -> str:
    """The change the verdict rests on first, the other beside it where both were judged: a
    launch-adjusted decision names the plain change, and a plain backstop failure the adjusted
    one, as the two differ by the launches' shared speed (the box's, or every level's)."""
    if m.adjusted_change is None:
        return f"{m.metric} {100 * m.change:+.1f} %"
    adjusted = f"{100 * m.adjusted_change:+.1f} % launch-adjusted"
    plain = f"{100 * m.change:+.1f} % plain"
    return f"{m.metric} {adjusted}, {plain}" if m.adjusted else f"{m.metric} {plain}, {adjusted}"


def green_means(point: PointComparison) -> str:
    """One sentence: "pass: no regression larger than 18 % in output_throughput at C=64 (n=3
    launches)"; "inconclusive at C=64 (...): the change (...) is within the noise; this run
    could only have caught a regression larger than 24 % in ..."; or what a fail, invalid,
    missing or recorded point is."""
    where = f"at C={point.concurrency}"
    k = launches(point)
    n = f" (n={k} launch{'es' if k != 1 else ''})" if k else ""
    judged = _judged(point)
    if point.verdict == Verdict.PASS:
        if not judged:
            return f"pass {where}: no metric was compared"
        parts = ", ".join(_metric_mde(m) for m in judged)
        return f"pass: no regression larger than {parts} {where}{n}"
    if point.verdict == Verdict.INCONCLUSIVE:
        open_ = [m for m in judged if m.verdict == Verdict.INCONCLUSIVE] or judged
        changes = "; ".join(_change(m) for m in open_)
        catch = ", ".join(_metric_mde(m) for m in open_)
        return (
            f"inconclusive {where}{n}: the change ({changes}) is within the noise; this run could "
            f"only have caught a regression larger than {catch}"
        )
    if point.verdict == Verdict.FAIL:
        bad = "; ".join(_change(m) for m in judged if m.verdict == Verdict.FAIL)
        return f"fail {where}{n}: a regression beyond tolerance and noise ({bad})"
    if point.verdict == Verdict.INVALID:
        return f"invalid {where}: not a measurement of speed, no verdict"
    if point.verdict == Verdict.MISSING:
        return f"missing {where}: no baseline to compare with"
    return f"recorded {where}: this run's samples are the baseline now"


def paired_green_means(res: PairedResult, decided_after: int | None = None) -> str:
    """The same sentence for an A/B point: "pass: no regression larger than 6.1 % in
    output_throughput at C=64 (n=3 paired rounds, decided after 3 of 6 rounds)". The bound is
    the worse end of the interval the verdict used (``PairedResult.missable``): at a
    sequential look the pass side's, else the confidence interval's. Where that end is itself a
    gain the sentence says so rather than print a negative bound."""
    where = f"at C={res.concurrency}"
    parts = [f"n={res.rounds} paired round{'s' if res.rounds != 1 else ''}"]
    if res.adjusted:
        parts.append("launch-adjusted")
    if res.budget is not None:
        parts.append(
            f"decided after {decided_after} of {res.budget} rounds"
            if decided_after is not None
            else f"undecided after the budget of {res.budget} rounds"
            if res.verdict == Verdict.INCONCLUSIVE
            else f"budget {res.budget} rounds"
        )
    n = f" ({', '.join(parts)})"
    change = f"{res.metric} {100 * res.change:+.1f} %"
    bound = _pct(res.missable) if res.missable is not None else None
    if res.verdict == Verdict.PASS:
        if res.missable is None:
            return f"pass {where}{n}"
        if res.missable < 0:  # even the worse end of the interval is a speed-up
            gain = _pct(-res.missable)
            return (
                f"pass: no regression in {res.metric} {where}{n}; even the worse end of the "
                f"interval is a gain of {gain}"
            )
        return f"pass: no regression larger than {bound} in {res.metric} {where}{n}"
    if res.verdict == Verdict.INCONCLUSIVE:
        tail = f"; a regression up to {bound} is not ruled out" if bound is not None else ""
        return f"inconclusive {where}{n}: the change ({change}) is within the noise{tail}"
    if res.verdict == Verdict.FAIL:
        return f"fail {where}{n}: a regression beyond tolerance and noise ({change})"
    return f"{res.verdict} {where}: not a measurement of speed, no verdict"
