"""Verdicts for the new workloads: expected hit rate, speculative causes, start-up time."""

from __future__ import annotations

import pytest

from pytest_llmperf.base.results import Workload
from pytest_llmperf.verdicts.baseline import summarize
from pytest_llmperf.verdicts.baseline_file import BaselineEntry
from pytest_llmperf.verdicts.compare import (
    DEFAULT_METRICS,
    Verdict,
    compare_point,
    default_tolerance,
    explain,
)
from pytest_llmperf.verdicts.validity import ValidityPolicy, check_level

from . import WORKLOAD, make_level

SP = Workload(kind="shared-prefix", prefix_len=1000, prefix_groups=8, input_len=1000 + 1)


def _sp_level(hit_rate: float):  # type: ignore[no-untyped-def]
    lv = make_level(4, 500.0)
    n_in = lv.completed * SP.input_len
    lv.total_input_tokens = n_in
    lv.total_cached_tokens = round(hit_rate * n_in)
    lv.cache_hit_rate = hit_rate
    return lv


def test_shared_prefix_level_near_its_expected_hit_rate_is_valid() -> None:
    # 992 of 1000 prefix tokens (16-token pages): a little below the expected 99.9 %
    assert check_level(_sp_level(0.991), SP) == []


def test_a_level_far_below_the_expected_hit_rate_is_invalid_saying_both_numbers() -> None:
    (reason,) = check_level(_sp_level(0.0), SP)
    assert reason.startswith("cache hit rate 0.0 % is far from the expected 99.9 %")
    assert "8 groups × 1000-token prefix" in reason and "--disable-radix-cache" in reason
    assert check_level(_sp_level(0.6), SP, ValidityPolicy(hit_rate_slack=0.4)) == []


def test_a_level_far_above_the_expected_hit_rate_is_invalid() -> None:
    wl = Workload(kind="shared-prefix", prefix_len=500, prefix_groups=2, input_len=1000)
    lv = _sp_level(0.9)
    lv.total_input_tokens = lv.completed * 1000
    (reason,) = check_level(lv, wl)
    assert "90.0 % is far from the expected 50.0 %" in reason and "reused seed" in reason


def test_random_workloads_still_allow_no_cache_hits() -> None:
    lv = make_level(4, 500.0)
    lv.total_cached_tokens = 100
    (reason,) = check_level(lv, WORKLOAD)
    assert "served 100 prompt tokens from its prefix cache" in reason


def test_cache_hit_rate_is_gated_when_recorded() -> None:
    assert "cache_hit_rate" in DEFAULT_METRICS
    hits = summarize("cache_hit_rate", [0.989, 0.99, 0.991])
    entry = BaselineEntry(metrics={"cache_hit_rate": hits})
    pc = compare_point("plain", [_sp_level(0.93), _sp_level(0.93)], entry, workload=SP)
    assert pc.verdict == Verdict.FAIL
    assert "cache_hit_rate 0.93 ratio (mean of 2) is 6.1 % below baseline 0.99" in pc.message()


def test_explain_names_every_speculative_cause() -> None:
    lv = make_level(64, 1571.1, cap=48, accept=2.1)
    lv.server_dp_size = 8
    lv.server_cuda_graph_max_bs = 4
    lv.speculative = True
    entry = BaselineEntry(metrics={"accept_length": summarize("accept_length", [2.9])})
    why = explain(lv, entry)
    assert why[0] == "server capped running requests at 48 (C=64 queues)"
    assert why[1] == (
        "dp-size 8 splits the running cap 48 into 6 per DP worker (C=64 is 8 per worker)"
    )
    assert why[2].startswith(
        "6 running requests per DP worker exceed the CUDA-graph capture size 4"
    )
    assert why[3].startswith("accept length 2.10 is below its baseline 2.90")
    # without a baseline, or within its tolerance, the accept length is only stated
    assert explain(lv)[-1] == "accept length 2.10"
    lv.accept_length = 2.85
    assert explain(lv, entry)[-1] == "accept length 2.85"


def test_explain_is_quiet_below_the_cap_and_the_capture_size() -> None:
    lv = make_level(16, 1209.4, cap=48)
    lv.server_cuda_graph_max_bs = 32
    lv.server_dp_size = 8
    assert explain(lv) == []


def test_a_failing_speculative_point_carries_its_causes() -> None:
    lv = make_level(64, 1000.0, cap=48, accept=2.0)
    lv.server_cuda_graph_max_bs = 32
    entry = BaselineEntry(
        metrics={
            "output_throughput": summarize("output_throughput", [1571.1]),
            "accept_length": summarize("accept_length", [2.9]),
        }
    )
    msg = compare_point("mtp", lv, entry, workload=WORKLOAD).message()
    assert "output_throughput 1000 tok/s is 36.4 % below baseline 1571" in msg
    assert "CUDA-graph capture size 32" in msg and "below its baseline 2.90" in msg


def test_startup_time_doubling_fails_and_small_noise_passes() -> None:
    assert default_tolerance("startup_s") == 0.5
    entry = BaselineEntry(metrics={"startup_s": summarize("startup_s", [40.0])})
    lv = make_level(1, 108)
    lv.startup_s = 80.0
    pc = compare_point("plain", lv, entry, workload=WORKLOAD)
    assert pc.verdict == Verdict.FAIL
    assert "startup_s 80.0 s is 100.0 % above baseline 40.0 s (tolerance 50 %)" in pc.message()
    lv.startup_s = 46.0
    assert compare_point("plain", lv, entry, workload=WORKLOAD).verdict == Verdict.PASS


def test_a_sub_second_start_up_that_grows_within_the_slack_passes() -> None:
    # A simulated server starts in under a second; a busy box moves that by more than 50 %,
    # which says nothing about the server. Beyond the 5 s slack the relative rule applies.
    entry = BaselineEntry(metrics={"startup_s": summarize("startup_s", [0.44])})
    lv = make_level(1, 108)
    lv.startup_s = 0.77
    pc = compare_point("plain", lv, entry, workload=WORKLOAD)
    assert pc.verdict == Verdict.PASS, pc.message()
    assert "changes within 5.00 s pass" in pc.metrics[0].message
    lv.startup_s = 5.6
    pc = compare_point("plain", lv, entry, workload=WORKLOAD)
    assert pc.verdict == Verdict.FAIL
    assert "startup_s 5.60 s is 1172.7 % above baseline 0.44 s (tolerance 50 %)" in pc.message()


def test_first_request_slack_is_in_milliseconds() -> None:
    entry = BaselineEntry(metrics={"first_request_ms": summarize("first_request_ms", [30.0])})
    lv = make_level(1, 108)
    lv.first_request_ms = 150.0
    metrics = ["first_request_ms"]
    assert compare_point("p", lv, entry, workload=WORKLOAD, metrics=metrics).verdict == Verdict.PASS
    lv.first_request_ms = 400.0
    assert compare_point("p", lv, entry, workload=WORKLOAD, metrics=metrics).verdict == Verdict.FAIL


@pytest.mark.parametrize("name", ["cache_hit_rate", "startup_s", "first_request_ms"])
def test_levels_without_the_new_metrics_are_not_judged_on_them(name: str) -> None:
    entry = BaselineEntry(metrics={name: summarize(name, [1.0])})
    pc = compare_point("plain", make_level(1, 108), entry, workload=WORKLOAD)
    assert pc.verdict == Verdict.PASS and pc.metrics == []
