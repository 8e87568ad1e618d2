"""Metric arithmetic on hand-built records: bench_serving's definitions, exactly."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_llmperf.core.metrics import compute_level, distinct_errors, summarize_ms
from pytest_llmperf.core.monitor import (
    CPU_PERCENT_LIMIT,
    LOOP_LAG_P99_LIMIT_MS,
    judge_health,
    with_token_cost,
)
from pytest_llmperf.core.records import RequestRecord
from pytest_llmperf.core.server_probe import (
    accept_length,
    effective_running_cap,
    parse_metrics,
    server_facts,
    summarize_metric_samples,
)


def _rec(
    index: int, t_send: float, events: list[tuple[float, int]], prompt: int = 10
) -> RequestRecord:
    r = RequestRecord(index=index, t_send=t_send, prompt_tokens=prompt)
    for t, n in events:
        r.add_tokens(t, n)
    r.e2e = events[-1][0] - t_send
    return r


def test_multi_token_event_gap_is_split_evenly() -> None:
    r = _rec(0, 0.0, [(0.1, 1), (0.2, 1), (0.5, 3)])
    assert r.output_tokens == 5 and r.events == 3
    assert list(r.token_times) == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])
    assert r.itls() == pytest.approx([0.1, 0.1, 0.1, 0.1])
    assert r.ttft == pytest.approx(0.1)
    assert r.tpot() == pytest.approx((0.5 - 0.1) / 4)


def test_first_event_tokens_give_no_itl() -> None:
    # bench_serving: tokens of the first chunk set TTFT and add no ITL entries
    r = _rec(0, 0.0, [(0.2, 2), (0.3, 1)])
    assert r.first_event_tokens == 2
    assert r.itls() == pytest.approx([0.1])


def test_level_definitions() -> None:
    a = _rec(0, 0.0, [(0.1, 1), (0.3, 1), (0.5, 2)])  # 4 tokens, e2e 0.5, ttft 0.1
    b = _rec(1, 0.5, [(0.7, 1), (1.0, 3)])  # 4 tokens, e2e 0.5, ttft 0.2
    failed = _rec(2, 0.2, [(0.4, 1)]).fail("boom")
    lv = compute_level([a, b, failed], max_concurrency=2)
    assert lv.duration == pytest.approx(1.0)
    assert (lv.completed, lv.failed, lv.num_requests) == (2, 1, 3)
    assert lv.total_output_tokens == 8  # the failed request's token does not count
    assert lv.total_input_tokens == 20
    assert lv.output_throughput == pytest.approx(8.0)
    assert lv.request_throughput == pytest.approx(2.0)
    assert lv.total_throughput == pytest.approx(28.0)
    assert lv.per_request_throughput == pytest.approx(np.mean([3 / 0.4, 3 / 0.3]))
    assert lv.concurrency == pytest.approx(1.0)
    assert lv.mean_ttft_ms == pytest.approx(150.0)
    assert lv.median_tpot_ms == pytest.approx(np.median([400 / 3, 100.0]))
    itls = [0.2, 0.1, 0.1, 0.1, 0.1, 0.1]
    assert lv.mean_itl_ms == pytest.approx(np.mean(itls) * 1e3)
    assert lv.p99_itl_ms == pytest.approx(np.percentile(np.array(itls) * 1e3, 99))
    assert lv.errors == ["boom"]


def test_all_failed_level_has_no_latencies() -> None:
    lv = compute_level([RequestRecord(index=0, t_send=0.0, e2e=1.0, error="x")], max_concurrency=1)
    assert lv.completed == 0 and lv.output_throughput == 0.0 and lv.median_ttft_ms is None


def test_details_columns() -> None:
    a = _rec(0, 0.0, [(0.1, 2)])
    bad = RequestRecord(index=1, t_send=0.0, e2e=0.2, error="cut")
    lv = compute_level([a, bad], max_concurrency=2, details=True)
    assert lv.details is not None
    assert lv.details.output_lens == [2, 0] and math.isnan(lv.details.ttfts[1])


def test_distinct_errors_are_counted_and_capped() -> None:
    recs = [RequestRecord(index=i, error=f"e{i % 15}") for i in range(30)]
    errs = distinct_errors(recs, cap=3)
    assert errs[:3] == ["2x e0", "2x e1", "2x e10"]
    assert errs[-1] == "... and 12 more distinct errors"


def test_summarize_uses_numpy_percentiles() -> None:
    vals = [0.001 * i for i in range(1, 101)]
    s = summarize_ms(vals)
    assert s["p99"] == pytest.approx(np.percentile(np.arange(1, 101), 99))
    assert summarize_ms([])["mean"] is None


def test_health_thresholds() -> None:
    calm = judge_health([1.0] * 50, cpu_percent=40.0)
    assert not calm.saturated and calm.reason is None
    laggy = judge_health([LOOP_LAG_P99_LIMIT_MS * 3] * 50, cpu_percent=40.0)
    assert laggy.saturated and "lag" in (laggy.reason or "")
    busy = judge_health([0.1] * 50, cpu_percent=CPU_PERCENT_LIMIT + 5)
    assert busy.saturated and "CPU" in (busy.reason or "")


def test_saturated_client_says_how_many_processes_it_needs() -> None:
    busy = judge_health([0.1] * 50, cpu_percent=170.0)  # threads can take more than a core
    costed = with_token_cost(busy, cpu_s=25.0, output_tokens=1_000_000)  # 25 µs a token
    assert costed.cpu_us_per_output_token == 25.0
    assert costed.output_tok_s_ceiling == round(CPU_PERCENT_LIMIT / 100 / 25e-6)
    assert costed.processes_needed == 4  # 170 % of a core at <= 50 % each
    assert costed.reason == busy.reason  # facts only: the advice is validity's sentence
    at_limit = with_token_cost(judge_health([0.1] * 50, cpu_percent=95.0), 1.0, 100_000)
    assert at_limit.processes_needed == 2  # saturated always needs more than one
    calm = with_token_cost(judge_health([1.0] * 50, cpu_percent=40.0), 1.0, 100_000)
    assert calm.processes_needed is None and calm.reason is None
    assert calm.cpu_us_per_output_token == 10.0
    assert with_token_cost(busy, 1.0, 0) == busy  # no tokens: nothing to cost


def test_effective_cap_sums_dp_ranks_and_falls_back() -> None:
    info = {
        "max_running_requests": None,
        "dp_size": 2,
        "internal_states": [
            {"effective_max_running_requests_per_dp": 24},
            {"effective_max_running_requests_per_dp": 24},
        ],
    }
    assert effective_running_cap(info) == 48
    assert (
        effective_running_cap({"max_running_requests": 16, "dp_size": 4, "internal_states": [{}]})
        == 64
    )
    assert effective_running_cap({}) is None


def test_accept_length_and_facts() -> None:
    info = {
        "version": "0.5.9",
        "model_path": "m",
        "speculative_algorithm": "EAGLE",
        "dp_size": 1,
        "internal_states": [
            {"avg_spec_accept_length": 2.5, "effective_max_running_requests_per_dp": 48}
        ],
    }
    assert accept_length(info) == 2.5
    assert accept_length({"internal_states": [{}]}) is None
    facts = server_facts(info, url="http://x")
    assert (facts.version, facts.max_running_requests, facts.speculative_algorithm) == (
        "0.5.9",
        48,
        "EAGLE",
    )


def test_parse_metrics_with_prometheus_parser() -> None:
    text = (
        "# TYPE sglang:num_running_reqs gauge\n"
        'sglang:num_running_reqs{dp_rank="0"} 3.0\n'
        'sglang:num_running_reqs{dp_rank="1"} 4.0\n'
        "# TYPE sglang:spec_accept_length gauge\n"
        'sglang:spec_accept_length{dp_rank="0"} 2.0\n'
        'sglang:spec_accept_length{dp_rank="1"} 3.0\n'
        "# TYPE other gauge\nother 9\n"
    )
    m = parse_metrics(text)
    assert m == {"sglang:num_running_reqs": 7.0, "sglang:spec_accept_length": 2.5}
    summary = summarize_metric_samples([m, {"sglang:num_running_reqs": 1.0}])
    assert summary is not None
    assert summary["max_running_requests"] == 7.0 and summary["mean_running_requests"] == 4.0


def _steady_level() -> list[RequestRecord]:
    """C=2, four requests of 10 tokens, one token every 0.1 s: sends at 0, 0, 1.0, 1.0."""
    recs = []
    for i, t0 in enumerate((0.0, 0.0, 1.0, 1.0)):
        recs.append(_rec(i, t0, [(t0 + 0.1 * (k + 1), 1) for k in range(10)]))
    return recs


def test_steady_window_runs_from_c_th_send_to_first_completion_after_last_send() -> None:
    from pytest_llmperf.core.metrics import steady_window

    recs = _steady_level()
    assert steady_window(recs, 2) == pytest.approx((0.0, 1.0))
    assert steady_window(recs, 8) is None  # never 8 in flight


def test_steady_state_throughput_and_within_run_se_are_filled_in() -> None:
    recs = []
    # C=4, 16 requests in 4 waves of 40 tokens (0.05 s apart): a window of 3 waves.
    for w in range(4):
        for j in range(4):
            t0 = 2.0 * w
            recs.append(_rec(4 * w + j, t0, [(t0 + 0.05 * (k + 1), 1) for k in range(40)]))
    lv = compute_level(recs, max_concurrency=4)
    assert lv.steady is not None
    assert lv.steady.window_s == pytest.approx(6.0)
    # 3 waves x 4 requests x 40 tokens inside [0, 6] s.
    assert lv.steady.output_throughput == pytest.approx(480 / 6.0)
    assert lv.judged_value("output_throughput") == pytest.approx(80.0)
    assert lv.output_throughput == pytest.approx(640 / 8.0)  # bench_serving's, kept beside
    assert lv.within_se["output_throughput"] > 0  # idle gaps between waves show as spread
    assert lv.within_se["per_request_throughput"] == pytest.approx(0.0, abs=1e-9)
