"""What green means: the sentence names the change its verdict rests on."""

from __future__ import annotations

import math

from pytest_llmperf.verdicts.baseline_file import LaunchResidual, MetricSummary
from pytest_llmperf.verdicts.compare import (
    PointComparison,
    compare_metric,
    with_launch_adjustment,
)
from pytest_llmperf.verdicts.green import green_means
from pytest_llmperf.verdicts.verdict import Verdict


def test_a_launch_adjusted_verdict_names_the_adjusted_change_beside_the_plain_one() -> None:
    """As real SGLang on a busy CPU gave it: the runs were 31 % slower in every level (the box,
    not the server), the launch-adjusted change was -1.4 %, and the point stayed undecided.
    The sentence must not say "-30.9 % is within the noise; could have caught 21 %": that
    reads as a contradiction. It says which change the 21 % is about."""
    base = MetricSummary(mean=69.1, std=30.0, n=3, launches=3, direction="higher",
                         unit="tok/s")  # fmt: skip
    plain = compare_metric("output_throughput", [47.7] * 6, base, 0.05)
    residual = LaunchResidual(mean=0.0, sd=0.08, n=3)
    mc = with_launch_adjustment(plain, [math.log(1 - 0.014)] * 6, residual, 0.05)
    assert mc.verdict == Verdict.INCONCLUSIVE and mc.adjusted
    point = PointComparison("plain", 1, "wl", Verdict.INCONCLUSIVE, metrics=[mc])
    text = green_means(point)
    assert "the change (output_throughput -1.4 % launch-adjusted, -31.0 % plain)" in text, text
    assert text.endswith("in output_throughput (launch-adjusted)"), text


def test_a_plain_verdict_names_the_plain_change() -> None:
    base = MetricSummary(mean=100.0, std=2.0, n=3, launches=3, direction="higher")
    mc = compare_metric("output_throughput", [80.0, 81.0, 79.0], base, 0.05)
    assert mc.verdict == Verdict.FAIL and not mc.adjusted
    point = PointComparison("plain", 4, "wl", Verdict.FAIL, metrics=[mc])
    assert green_means(point).endswith("(output_throughput -20.0 %)")


def test_a_backstop_failure_names_the_adjusted_change_beside_the_plain_one() -> None:
    """Real SGLang, capped at C=8, on a box 31 % slower than at the recording: the plain
    backstop failed C=8 at -34.9 % while its launch-adjusted change was -5.0 %. The sentence
    shows both, the plain one first as the verdict rests on it."""
    base = MetricSummary(mean=378.0, std=6.0, n=3, launches=3, direction="higher")
    plain = compare_metric("output_throughput", [246.0] * 6, base, 0.05, t_margin=True)
    residual = LaunchResidual(mean=0.0, sd=0.04, n=3)
    mc = with_launch_adjustment(plain, [math.log(1 - 0.05)] * 6, residual, 0.05)
    assert mc.verdict == Verdict.FAIL and not mc.adjusted
    point = PointComparison("plain", 8, "wl", Verdict.FAIL, metrics=[mc])
    text = green_means(point)
    assert text.endswith("(output_throughput -34.9 % plain, -5.0 % launch-adjusted)"), text
