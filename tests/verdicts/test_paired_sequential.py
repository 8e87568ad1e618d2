"""Sequential paired A/B verdicts and the ``adjust = "auto"`` choice
(verdicts/paired_sequential.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from pytest_llmperf.verdicts.green import paired_green_means
from pytest_llmperf.verdicts.paired import judge_paired, mean_ci, remove_launch_factor
from pytest_llmperf.verdicts.paired_sequential import (
    choose_adjust,
    judge_paired_look,
    judge_with_backstop,
)
from pytest_llmperf.verdicts.sequential import BACKSTOP_SHARE, Look
from pytest_llmperf.verdicts.stats import LaunchNoise
from pytest_llmperf.verdicts.verdict import Verdict

KW = {"candidate": "new", "reference": "old", "metric_name": "output_throughput"}
LEVELS = (1, 4, 16)


def judge(d: list[float], k: int, budget: int = 6, **kw: object) -> object:
    return judge_paired_look(d, Look(k, budget - 1), concurrency=16, tolerance=0.05, **KW, **kw)


def test_a_clear_regression_fails_at_the_first_look() -> None:
    r = judge([math.log(0.700), math.log(0.702)], 1)
    assert r.verdict == Verdict.FAIL
    assert r.message.startswith("new is 29.9 % slower than old at C=16 (paired over 2 rounds")
    assert "beyond the tolerance (-5 %), decided after 2 of 6 rounds" in r.message
    assert r.budget == 6 and r.rounds == 2


def test_an_unchanged_pair_passes_early_and_says_what_it_rules_out() -> None:
    r = judge([0.004, -0.002], 1)
    assert r.verdict == Verdict.PASS and "decided after 2 of 6 rounds" in r.message
    # the pass side's bound: less than the DETECT (2x) tolerance, more than the change
    assert r.missable is not None and 0 < r.missable < 0.10
    green = paired_green_means(r, 2)
    assert green.startswith("pass: no regression larger than ")
    assert "in output_throughput at C=16 (n=2 paired rounds, decided after 2 of 6 rounds)" in green


def test_a_clear_gain_passes_without_a_negative_bound() -> None:
    r = judge([math.log(1.10), math.log(1.102)], 1)  # 10 % faster, twice over
    assert r.verdict == Verdict.PASS and r.missable is not None and r.missable < 0
    assert "no regression, even the worse end of the interval is a gain of " in r.message
    green = paired_green_means(r, 2)
    assert green.startswith("pass: no regression in output_throughput at C=16 (n=2 paired")
    gain = float(green.rsplit("a gain of ", 1)[1].removesuffix(" %"))
    assert 0 < gain < 10.2 and gain == pytest.approx(-100 * r.missable, abs=0.05)
    assert "-" not in green.split("(")[0] and "larger than -" not in green


def test_the_interval_rests_on_the_noise_that_decided() -> None:
    # Real SGLang, cap7 at C=8: 18.8 % slower over two rounds of 8 passes, decided on the noise
    # pooled over levels and passes (sd 4.9 % on 45 degrees of freedom); the interval beside
    # it must rest on that noise too, not on the two rounds' own spread on 1 degree of freedom.
    m, own_se = math.log(0.8125), 0.06128
    d = [m - own_se, m + own_se]
    own = judge(d, 1)  # no pooled noise: the rounds' own spread
    assert own.verdict == Verdict.INCONCLUSIVE and own.ci_low < -0.9 and own.ci_high > 10
    r = judge(d, 1, noise=LaunchNoise(sd=0.049, launches=46), adjusted=True, passes=8)
    assert r.verdict == Verdict.FAIL
    # look 1 of 5: each end spends 2.5 % / 5 of Student's t on 45 degrees of freedom
    half = float(scipy_stats.t.isf(0.025 / 5, 45)) * 0.049 / math.sqrt(2)
    assert r.ci_low == pytest.approx(0.8125 * math.exp(-half) - 1, abs=1e-4)
    assert r.ci_high == pytest.approx(0.8125 * math.exp(half) - 1, abs=1e-4)
    assert r.ci_high < -0.05  # the whole interval beyond the tolerance, as the verdict says
    assert (
        "noise sd 4.9 % on 45 degrees of freedom, 95 % CI valid at any stop -26.0 \u2026 "
        "-10.8 %" in r.message.replace("\u2212", "-")
    )


def test_the_interval_holds_where_the_rounds_stop() -> None:
    # A true 10 % drop, round noise sd 6 %, budget 6: stopping at the first decisive look
    # picks the rounds whose change looks largest, so a fixed-sample 95 % CI read there misses
    # the true change more often than 5 %; the interval the look reports does not.
    rng = np.random.default_rng(11)
    true, sd, budget, runs = math.log(0.90), 0.06, 6, 2000
    missed = missed_fixed = 0
    for _ in range(runs):
        d = list(true + rng.normal(0, sd, budget))
        for n in range(2, budget + 1):
            r = judge(d[:n], n - 1, budget)
            if r.verdict != Verdict.INCONCLUSIVE or n == budget:
                break
        missed += not r.ci_low <= 0.90 - 1 <= r.ci_high
        _, lo, hi = mean_ci(d[:n])
        missed_fixed += not math.exp(lo) - 1 <= 0.90 - 1 <= math.exp(hi) - 1
    assert missed / runs <= 0.05
    assert missed_fixed / runs > 0.05  # the failure the look's interval exists to avoid


def test_a_borderline_change_stays_undecided_until_the_budget() -> None:
    rng = np.random.default_rng(3)
    d = list(math.log(0.92) + rng.normal(0, 0.03, 6))  # between 1 and 2 tolerances, noisy
    for n in range(2, 7):
        r = judge(d[:n], n - 1)
        assert r.verdict == Verdict.INCONCLUSIVE, n
        assert f"undecided after {n} of 6 rounds" in r.message
    assert "(the budget)" in r.message and "raise rounds" in r.message
    assert "(the budget)" not in judge(d[:3], 2).message


def test_a_lower_is_better_metric_fails_when_it_rises() -> None:
    kw = {"candidate": "new", "reference": "old", "metric_name": "median_ttft_ms"}
    d = [math.log(1.30), math.log(1.301)]
    r = judge_paired_look(d, Look(1, 3), concurrency=1, tolerance=0.05, **kw)
    assert r.verdict == Verdict.FAIL
    up = judge_paired_look([math.log(0.7), math.log(0.701)], Look(1, 3), concurrency=1,
                           tolerance=0.05, **kw)  # fmt: skip
    assert up.verdict == Verdict.PASS  # faster first tokens are no regression


def test_the_first_look_is_stricter_than_a_fixed_ci() -> None:
    # Two rounds 6.5 % and 7.5 % slower: a 95 % CI on one degree of freedom already lies
    # beyond -5 %; the first of five looks spends 0.5 % of alpha and cannot tell yet.
    d = [math.log(0.935), math.log(0.925)]
    fixed = judge_paired(d, concurrency=16, tolerance=0.05, **KW)
    assert fixed.verdict == Verdict.INCONCLUSIVE or fixed.ci_high < -0.05
    assert judge(d, 1).verdict == Verdict.INCONCLUSIVE


def rounds(common: float, resid: float, n: int, seed: int = 0) -> dict[int, list[float]]:
    rng = np.random.default_rng(seed)
    shared = rng.normal(0, common, n)
    return {c: list(shared + rng.normal(0, resid, n)) for c in LEVELS}


def test_auto_adjusts_when_the_common_factor_is_the_larger_noise() -> None:
    big = choose_adjust(rounds(0.20, 0.02, 4))
    assert big.adjusted and big.common_sd is not None and big.residual_sd is not None
    assert big.common_sd > big.residual_sd and "is larger than" in big.why
    none = choose_adjust(rounds(0.0, 0.05, 30))
    assert not none.adjusted and "is not larger than" in none.why, none.why
    two = choose_adjust({1: [0.1, -0.2], 4: [0.1, -0.2]})
    assert not two.adjusted and "fewer than 3 levels" in two.why


def test_the_choice_looks_at_spreads_only() -> None:
    """A regression (a shift of one level, or of all) does not change the choice."""
    per = rounds(0.10, 0.05, 5, seed=7)
    base = choose_adjust(per)
    one = {**per, 16: [v - 0.3 for v in per[16]]}
    every = {c: [v - 0.3 for v in vs] for c, vs in per.items()}
    for moved in (one, every):
        got = choose_adjust(moved)
        assert got.adjusted == base.adjusted
        assert got.common_sd == pytest.approx(base.common_sd)
        assert got.residual_sd == pytest.approx(base.residual_sd)


def _judge(look: Look):  # type: ignore[no-untyped-def]
    def judge_(d: list[float], share: float, adjusted: bool):  # type: ignore[no-untyped-def]
        return judge_paired_look(d, look.share(share), concurrency=16, tolerance=0.05,
                                 adjusted=adjusted, **KW)  # fmt: skip

    return judge_


def test_adjusted_the_plain_comparison_is_a_fail_only_backstop() -> None:
    look = Look(3, 5)
    # Every level 40 % slower, consistently: adjusting cancels it, the backstop sees it.
    shared = [math.log(0.6) + e for e in (0.0, 0.01, -0.01, 0.005)]
    per = {c: list(shared) for c in LEVELS}
    adjusted = remove_launch_factor(per)[16]
    res = judge_with_backstop(per[16], adjusted, _judge(look), "the common factor is larger")
    assert res.verdict == Verdict.FAIL and not res.adjusted
    assert "decided by the plain comparison (the fail-only backstop" in res.message
    # A level-specific regression under a big common factor: the adjusted comparison fails.
    rng = np.random.default_rng(1)
    common = rng.normal(0, 0.2, 4)
    per = {1: list(common + 0.001), 4: list(common - 0.001), 16: list(common + math.log(0.75))}
    adjusted = remove_launch_factor(per)[16]
    res = judge_with_backstop(per[16], adjusted, _judge(look), "why")
    assert res.verdict == Verdict.FAIL and res.adjusted
    assert "launch-adjusted because why (plain comparison kept as a fail-only backstop)" in (
        res.message
    )
    # The backstop spends BACKSTOP_SHARE of alpha: its fail bar is higher than a full look's.
    assert look.share(BACKSTOP_SHARE).critical(3) > look.critical(3)
