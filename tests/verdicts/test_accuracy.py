"""The accuracy verdict: Wilson intervals, McNemar's paired test, and when it cannot tell."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from pytest_llmperf.verdicts.accuracy import (
    ALPHA,
    AccuracyRecord,
    compare_accuracy,
    min_items,
    wilson,
)
from pytest_llmperf.verdicts.verdict import Verdict


def rec(bits: str, seed: int = 0, failed: int = 0) -> AccuracyRecord:
    return AccuracyRecord.of([b == "1" for b in bits], items_version=1, seed=seed, failed=failed)


def test_wilson_matches_known_values() -> None:
    lo, hi = wilson(81, 100)
    assert (round(lo, 3), round(hi, 3)) == (0.722, 0.875)  # 0.7222-0.8749 by hand
    lo, hi = wilson(0, 100)
    assert lo == 0.0 and round(hi, 3) == 0.037
    assert wilson(100, 100)[1] == 1.0


def test_min_items_is_the_exact_mcnemar_bound() -> None:
    # 0.5**7 < 0.01 <= 0.5**6: seven items lost with none won are the fewest that count
    assert ALPHA == 0.01
    assert min_items(0.05) == 140
    assert min_items(0.10) == 70


def test_drop_beyond_the_interval_fails_with_the_sentence() -> None:
    old = rec("1" * 81 + "0" * 19)
    new = rec("1" * 61 + "0" * 39)
    res = compare_accuracy(new, old, drop=0.05)
    assert res.verdict == Verdict.FAIL
    assert res.message.startswith(
        "accuracy: 61 of 100 generated items right on new (0.61, 95 % CI 0.51-0.70) against "
        "81 of 100 on old (0.81, 95 % CI 0.72-0.87): a drop of 20 points, beyond the interval "
        "(McNemar p=9.5e-07) \u2192 fail"
    )
    assert res.p_value is not None and res.p_value < 1e-5


def test_swapped_answers_are_not_a_drop() -> None:
    # same score, different items right: discordant pairs both ways, no drop
    old = rec("10" * 100)
    new = rec("01" * 100)
    res = compare_accuracy(new, old, drop=0.05)
    assert res.verdict == Verdict.PASS and "within the interval" in res.message


def test_few_items_are_inconclusive() -> None:
    same = rec("1" * 40 + "0" * 10)
    res = compare_accuracy(same, same, drop=0.05)
    assert res.verdict == Verdict.INCONCLUSIVE and "at least 140 needed" in res.message
    # ... but a drop that large is significant even on few items
    worse = rec("1" * 20 + "0" * 30)
    assert compare_accuracy(worse, same, drop=0.05).verdict == Verdict.FAIL


def test_significant_but_below_the_smallest_drop_passes() -> None:
    old = rec("1" * 900 + "0" * 100)
    new = rec("1" * 880 + "0" * 120)
    res = compare_accuracy(new, old, drop=0.05)
    assert res.verdict == Verdict.PASS and "below accuracy_drop 5 points" in res.message


def test_chance_level_reference_is_inconclusive() -> None:
    zero = rec("0" * 100)
    res = compare_accuracy(zero, zero, drop=0.05)
    assert res.verdict == Verdict.INCONCLUSIVE and res.chance
    assert (
        "accuracy probe: old side scored 0 of 100 \u2014 the model answers at chance (random "
        "weights?); the accuracy check is inconclusive"
    ) in res.message


def test_other_items_missing_and_failed() -> None:
    a = rec("1" * 200)
    assert compare_accuracy(a, rec("1" * 200, seed=1), drop=0.05).verdict == Verdict.INCONCLUSIVE
    assert compare_accuracy(a, rec("1" * 100), drop=0.05).verdict == Verdict.INCONCLUSIVE
    assert compare_accuracy(a, None, drop=0.05).verdict == Verdict.MISSING
    failed = rec("1" * 199 + "0", failed=1)
    assert compare_accuracy(failed, a, drop=0.05).verdict == Verdict.INVALID


def test_record_validates_its_bitmap() -> None:
    with pytest.raises(ValidationError, match="bitmap"):
        AccuracyRecord(items_version=1, seed=0, n=3, correct=1, bitmap="11")
    with pytest.raises(ValidationError, match="correct"):
        AccuracyRecord(items_version=1, seed=0, n=2, correct=1, bitmap="11")
    with pytest.raises(ValidationError):
        AccuracyRecord(items_version=1, seed=0, n=2, correct=1, bitmap="1x")
