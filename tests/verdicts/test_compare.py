"""Verdicts: tolerance, direction, noise margin, stale baselines, messages for a PR."""

from __future__ import annotations

import pytest

from pytest_llmperf.verdicts.baseline import summarize
from pytest_llmperf.verdicts.baseline_file import BaselineEntry, MetricSummary
from pytest_llmperf.verdicts.compare import (
    ToleranceError,
    Verdict,
    compare_metric,
    compare_point,
    exit_status,
    resolve_tolerance,
    validate_tolerance,
)
from pytest_llmperf.verdicts.stats import NoiseRule, decide

from . import WORKLOAD, make_level


def _summary(metric: str, values: list[float]) -> MetricSummary:
    return summarize(metric, values)


# Baseline of 3 repeats with ~1 % spread: σ ≈ 1 %, margin (n=1) = 2·σ·√(4/3) ≈ 2.3 %.
TPUT = _summary("output_throughput", [990.0, 1000.0, 1010.0])
TTFT = _summary("median_ttft_ms", [99.0, 100.0, 101.0])


@pytest.mark.parametrize(
    ("metric", "base", "current", "outcome", "stale"),
    [
        ("output_throughput", TPUT, 1000.0, "pass", False),
        ("output_throughput", TPUT, 960.0, "pass", False),  # -4 % within 5 %
        ("output_throughput", TPUT, 935.0, "inconclusive", False),  # -6.5 %: within margin
        ("output_throughput", TPUT, 900.0, "fail", False),  # -10 %
        ("output_throughput", TPUT, 1100.0, "pass", True),  # +10 %: stale baseline
        ("median_ttft_ms", TTFT, 100.0, "pass", False),
        ("median_ttft_ms", TTFT, 95.0, "pass", False),  # faster is fine
        ("median_ttft_ms", TTFT, 111.0, "inconclusive", False),  # +11 % vs tol 10 %
        ("median_ttft_ms", TTFT, 120.0, "fail", False),  # +20 %
        ("median_ttft_ms", TTFT, 80.0, "pass", True),  # -20 %: stale
    ],
)
def test_verdicts_both_directions(metric, base, current, outcome, stale) -> None:  # type: ignore[no-untyped-def]
    tol = resolve_tolerance(metric)
    mc = compare_metric(metric, current, base, tol, config="plain", concurrency=4)
    assert (mc.decision.outcome, mc.stale) == (outcome, stale)
    assert mc.decision.rerun == (outcome == "inconclusive")


def test_inconclusive_becomes_decisive_with_more_samples() -> None:
    d1 = decide([935.0], base_mean=1000, base_std=10, base_n=3, tolerance=0.05, direction="higher")
    assert d1.outcome == "inconclusive" and d1.repeats_needed is not None
    samples = [935.0, 934.0, 936.0, 935.0, 935.5][: d1.repeats_needed]
    d2 = decide(samples, base_mean=1000, base_std=10, base_n=3, tolerance=0.05, direction="higher")
    assert d2.outcome == "fail"


def test_unknown_noise_uses_assumed_noise() -> None:
    # One run vs a one-run baseline: σ is assumed 2 %, margin = 2·2 %·√2 ≈ 5.7 %.
    d = decide(900.0, base_mean=1000, tolerance=0.05, direction="higher")
    assert d.noise_assumed and d.outcome == "inconclusive"
    assert decide(880.0, base_mean=1000, tolerance=0.05, direction="higher").outcome == "fail"
    no_margin = NoiseRule(z=0)
    assert (
        decide(940.0, base_mean=1000, tolerance=0.05, direction="higher", rule=no_margin).outcome
        == "fail"
    )


def test_mann_whitney_path_with_raw_samples() -> None:
    base = [1000.0, 1004.0, 996.0, 1002.0, 998.0, 1001.0]
    kw = dict(base_mean=1000.0, base_std=3.0, base_n=6, base_samples=base, tolerance=0.05)
    worse = decide([900.0, 905.0, 898.0, 902.0, 899.0, 901.0], direction="higher", **kw)  # type: ignore[arg-type]
    assert (worse.method, worse.outcome) == ("mann-whitney", "fail")
    assert worse.p_value is not None and worse.p_value < 0.01
    noisy = decide([1000.0, 850.0, 1000.0, 900.0, 1002.0, 880.0], direction="higher", **kw)  # type: ignore[arg-type]
    assert noisy.outcome == "inconclusive"  # mean -6 %, but half the runs are on the baseline
    assert decide(base, direction="higher", **kw).outcome == "pass"  # type: ignore[arg-type]


def test_failure_message_reads_like_a_sentence() -> None:
    base = BaselineEntry(metrics={"output_throughput": _summary("output_throughput", [2327.0])})
    lv = make_level(64, 1571.1, cap=48)
    point = compare_point("mtp", lv, base, workload=WORKLOAD)
    assert point.verdict == Verdict.FAIL
    assert point.message() == (
        "mtp at C=64: output_throughput 1571 tok/s is 32.5 % below baseline 2327 tok/s "
        "(tolerance 5 %); server capped running requests at 48 (C=64 queues)"
    )


@pytest.mark.parametrize("bad", [0, 1, 5, -0.05, float("nan"), "abc"])
def test_tolerance_must_be_a_fraction(bad: object) -> None:
    with pytest.raises(ToleranceError, match="marker llmperf"):
        validate_tolerance(bad, "marker llmperf(tolerance=...)")


def test_percent_hint() -> None:
    with pytest.raises(ToleranceError, match="did you mean 0.05 for 5 %"):
        validate_tolerance(5, "--llmperf-tolerance")


def test_tolerance_precedence() -> None:
    s = _summary("output_throughput", [1000.0]).model_copy(update={"tolerance": 0.07})
    entry = BaselineEntry(metrics={"output_throughput": s}, tolerance=0.09)
    assert resolve_tolerance("output_throughput") == 0.05
    assert resolve_tolerance("p99_ttft_ms") == 0.15
    assert resolve_tolerance("output_throughput", entry=entry) == 0.07
    assert resolve_tolerance("median_itl_ms", entry=entry) == 0.09
    assert resolve_tolerance("output_throughput", test=0.2, entry=entry) == 0.2
    assert resolve_tolerance("output_throughput", test={"median_itl_ms": 0.3}, entry=entry) == 0.07
    # '*' (parse_tolerances accepts "*=10%") covers every metric the test does not name.
    star = {"*": 0.3, "median_itl_ms": 0.2}
    assert resolve_tolerance("output_throughput", test=star, entry=entry) == 0.3
    assert resolve_tolerance("median_itl_ms", test=star, entry=entry) == 0.2


def test_invalid_and_missing_points() -> None:
    lv = make_level(16, 873, saturated=True)
    entry = BaselineEntry(metrics={"output_throughput": _summary("output_throughput", [873.0])})
    p = compare_point("plain", lv, entry, workload=WORKLOAD)
    assert p.verdict == Verdict.INVALID and "load generator was the bottleneck" in p.message()
    p2 = compare_point("plain", make_level(16, 873), None, workload=WORKLOAD)
    assert p2.verdict == Verdict.MISSING and "--llmperf-update" in p2.message()
    assert exit_status([Verdict.PASS, Verdict.INCONCLUSIVE]) == 0
    assert exit_status([Verdict.PASS, Verdict.INCONCLUSIVE], fail_inconclusive=True) == 1
    assert exit_status([Verdict.PASS, Verdict.MISSING]) == 1
    assert exit_status([Verdict.PASS, Verdict.INCONCLUSIVE], undecided="exit") == 6
    assert exit_status([Verdict.FAIL, Verdict.INCONCLUSIVE], undecided="exit") == 1


def test_repeats_are_pooled_and_invalid_repeats_dropped() -> None:
    entry = BaselineEntry(
        metrics={"output_throughput": _summary("output_throughput", [990.0, 1000.0, 1010.0])}
    )
    reps = [make_level(4, 900.0), make_level(4, 905.0, failed=1), make_level(4, 902.0)]
    p = compare_point("plain", reps, entry, workload=WORKLOAD, metrics=["output_throughput"])
    m = p.metric("output_throughput")
    assert m is not None and m.n_current == 2 and p.verdict == Verdict.FAIL
    assert "requests failed" in p.invalid_reasons[0]
