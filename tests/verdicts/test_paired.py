"""Paired A/B statistics (verdicts/paired.py) and the [[ab]] suite section."""

from __future__ import annotations

import math

import pytest

from pytest_llmperf.base.errors import InputError
from pytest_llmperf.run.ab import round_order
from pytest_llmperf.run.suite import (
    CompareSpec,
    SuiteDeprecationWarning,
    SuiteError,
    suite_from_data,
)
from pytest_llmperf.verdicts.paired import (
    judge_paired,
    log_ratios,
    mean_ci,
    remove_launch_factor,
)
from pytest_llmperf.verdicts.verdict import Verdict

KW = {"candidate": "new", "reference": "old", "metric_name": "output_throughput"}


def test_ci_matches_t_distribution() -> None:
    m, lo, hi = mean_ci([0.0, -0.1, -0.2, -0.1])
    assert m == pytest.approx(-0.1)
    sd = math.sqrt(0.02 / 3)
    assert hi - m == pytest.approx(3.182446 * sd / 2, rel=1e-5)  # t(0.975, 3)
    assert lo == pytest.approx(2 * m - hi)


def test_regression_beyond_tolerance_fails_with_a_sentence() -> None:
    d = log_ratios([92.0, 91.5, 92.5, 92.2], [100.0, 99.0, 100.5, 100.2])
    r = judge_paired(d, concurrency=64, tolerance=0.03, **KW)
    assert r.verdict == Verdict.FAIL
    assert r.ci_high < -0.03 and r.ci_low < r.change < r.ci_high
    assert r.message.startswith("new is 7.9 % slower than old at C=64 (paired over 4 rounds")
    assert "95 % CI \u22128." in r.message and "beyond the tolerance (-3 %)" in r.message


def test_no_change_passes_and_noisy_is_inconclusive() -> None:
    assert judge_paired([0.01, -0.01, 0.0, 0.005], concurrency=1, tolerance=0.05, **KW).verdict == (
        Verdict.PASS
    )
    noisy = judge_paired([0.2, -0.3, 0.1, -0.25], concurrency=1, tolerance=0.05, **KW)
    assert noisy.verdict == Verdict.INCONCLUSIVE and "add rounds" in noisy.message
    one = judge_paired([-0.5], concurrency=1, tolerance=0.05, **KW)
    assert one.verdict == Verdict.INCONCLUSIVE and "at least 2" in one.message


def test_lower_is_better_metric_fails_when_it_rises() -> None:
    d = [math.log(1.2)] * 2 + [math.log(1.21), math.log(1.19)]
    r = judge_paired(
        d,
        candidate="new",
        reference="old",
        metric_name="median_ttft_ms",
        concurrency=4,
        tolerance=0.1,
    )
    assert r.verdict == Verdict.FAIL and "median_ttft_ms is 20.0 % higher" in r.message
    faster = judge_paired(
        [-x for x in d], **{**KW, "metric_name": "median_ttft_ms"}, concurrency=4, tolerance=0.1
    )
    assert faster.verdict == Verdict.PASS


def test_launch_factor_removal_isolates_one_level() -> None:
    # Round speed factors +-20 % on every level; C=64 alone is 25 % slower.
    shift = [0.2, -0.2, 0.1, -0.15]
    d = {c: [s + (math.log(0.75) if c == 64 else 0.0) for s in shift] for c in (1, 16, 64)}
    assert judge_paired(d[64], concurrency=64, tolerance=0.05, **KW).verdict == Verdict.INCONCLUSIVE
    adj = remove_launch_factor(d)
    assert adj[1] == pytest.approx([0.0] * 4)
    assert adj[64] == pytest.approx([math.log(0.75)] * 4)
    with pytest.raises(InputError, match="at least 3 levels"):
        remove_launch_factor({1: [0.0], 2: [0.0]})


def test_bad_values_are_input_errors() -> None:
    with pytest.raises(InputError, match="positive"):
        log_ratios([0.0], [1.0])
    with pytest.raises(InputError, match="as many"):
        log_ratios([1.0], [1.0, 2.0])


def test_round_order_alternates_unless_fixed() -> None:
    spec = CompareSpec(candidate="new", reference="old", rounds=3)
    assert [round_order(spec, r) for r in range(3)] == [
        ("old", "new"),
        ("new", "old"),
        ("old", "new"),
    ]
    fixed = spec.model_copy(update={"order": "fixed"})
    assert round_order(fixed, 1) == ("old", "new")


SERVERS = [{"name": "old", "model": "m"}, {"name": "new", "model": "m"}]


def test_ab_section_is_validated_with_field_names() -> None:
    suite = suite_from_data(
        {"server": SERVERS, "ab": [{"candidate": "new", "reference": "old", "rounds": 6}]}
    )
    assert suite.ab[0].label == "new-vs-old" and suite.ab[0].rounds == 6
    assert suite.linked_groups()["old"] == suite.linked_groups()["new"]
    with pytest.raises(SuiteError) as exc:
        suite_from_data(
            {
                "server": SERVERS,
                "ab": [
                    {"candidate": "newer", "reference": "old"},
                    {"candidate": "new", "reference": "old", "rounds": 1},
                    {"candidate": "old", "reference": "old"},
                ],
            },
            source="llmperf.toml",
        )
    text = str(exc.value)
    assert "llmperf.toml: ab[0].candidate: no server named 'newer'" in text
    assert "ab[1].rounds" in text
    assert "ab[2]: candidate and reference must be two different servers" in text


def test_compare_is_the_older_spelling_of_ab_and_still_works_with_a_warning() -> None:
    spec = {"candidate": "new", "reference": "old", "rounds": 6}
    with pytest.warns(
        SuiteDeprecationWarning, match=r"llmperf.toml: \[\[compare\]\] is now spelled \[\[ab\]\]"
    ):
        suite = suite_from_data({"server": SERVERS, "compare": [spec]}, source="llmperf.toml")
    assert suite.ab[0].label == "new-vs-old" and suite.compares is suite.ab
    with pytest.raises(SuiteError, match=r"both \[\[ab\]\] and \[\[compare\]\]"):
        suite_from_data({"server": SERVERS, "ab": [spec], "compare": [spec]}, source="x.toml")
