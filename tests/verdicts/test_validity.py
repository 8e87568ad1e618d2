"""A level is invalid before any verdict: client bottleneck, length drift, low C, failures."""

from __future__ import annotations

from pytest_llmperf.base.results import Workload
from pytest_llmperf.verdicts.validity import ValidityPolicy, check_level, is_valid

from . import WORKLOAD, make_level


def test_a_clean_level_is_valid_and_queueing_is_not_invalid() -> None:
    assert is_valid(make_level(64, 1571.1, cap=48), WORKLOAD)
    assert is_valid(make_level(1, 108, achieved=0.99), WORKLOAD)


def test_saturated_client() -> None:
    (reason,) = check_level(make_level(128, 2800, saturated=True), WORKLOAD)
    assert reason.startswith("the load generator was the bottleneck (event loop lag p99 80 ms)")


def test_length_drift_seed_003() -> None:
    # Seed 003, C=64: 97000 tokens for 128 completed requests of 1000.
    (reason,) = check_level(make_level(64, 1571.1, output_tokens=97000), WORKLOAD)
    assert "delivered 97000 output tokens for 128 completed requests, expected 128000" in reason
    assert "24.2 % short" in reason and "EOS" in reason
    loose = ValidityPolicy(length_tolerance=0.3)
    assert check_level(make_level(64, 1571.1, output_tokens=97000), WORKLOAD, loose) == []


def test_short_outputs_from_a_context_below_prompt_plus_output_say_so_with_numbers() -> None:
    """llama-server -c 4096 -np 4 gives each slot 1024 tokens: 1000-token prompts leave 24
    for the 1000 asked. The reason names the context, its source and the arithmetic; a context
    that fits (or an unknown one) keeps the EOS explanation."""
    lv = make_level(4, 900.0, output_tokens=8 * 24)
    lv.server_context_tokens = 1024
    lv.server_context_source = "/props n_ctx per slot of 4 slots"
    (reason,) = check_level(lv, WORKLOAD)
    assert reason == (
        "delivered 192 output tokens for 8 completed requests, expected 8000 (8 × 1000), "
        "97.6 % short: the server's context is 1024 tokens per request (/props n_ctx per slot "
        "of 4 slots), below the 1000 prompt + 1000 output = 2000 tokens each request needs, so "
        "outputs stop at the context (llama-server divides -c over its -np slots; SGLang: "
        "--context-length)"
    )
    assert "EOS" not in reason and "tokenizer" not in reason
    lv.server_context_tokens = 4096
    (fits,) = check_level(lv, WORKLOAD)
    assert "EOS" in fits and "context is" not in fits
    lv.server_context_tokens = None
    (unknown,) = check_level(lv, WORKLOAD)
    assert unknown == fits


def test_input_length_drift() -> None:
    lv = make_level(4, 286).model_copy(update={"total_input_tokens": 8100})
    (reason,) = check_level(lv, WORKLOAD)
    assert "prompts were 8100 tokens" in reason and "tokenizer" in reason


def test_low_achieved_concurrency() -> None:
    (reason,) = check_level(make_level(64, 2327, achieved=20.0), WORKLOAD)
    assert "achieved concurrency 20.0 is below 0.5 × 64" in reason
    assert is_valid(make_level(64, 2327, achieved=40.0), WORKLOAD)
    # Fewer requests than C: only num_requests can ever be in flight.
    wl = Workload(requests_per_level=8)
    lv = make_level(64, 2327, achieved=6.0).model_copy(
        update={
            "num_requests": 8,
            "completed": 8,
            "total_output_tokens": 8000,
            "total_input_tokens": 8000,
        }
    )
    assert check_level(lv, wl) == []


def test_failures_bound() -> None:
    lv = make_level(16, 873, failed=2)
    (reason,) = check_level(lv, WORKLOAD)
    assert reason == "2 of 32 requests failed (allowed 0); first error: HTTP 500: boom"
    assert check_level(lv, WORKLOAD, ValidityPolicy(max_failed=2)) == []
    none = lv.model_copy(update={"completed": 0, "failed": 32, "total_output_tokens": 0})
    assert check_level(none, WORKLOAD)[0] == "no request completed (32 of 32 failed)"


def test_prefix_cache_hits_invalidate_with_the_count() -> None:
    lv = make_level(4, 286).model_copy(update={"total_cached_tokens": 640})
    (reason,) = check_level(lv, WORKLOAD)
    assert "served 640 prompt tokens from its prefix cache" in reason
    assert f"over {lv.completed} completed requests (allowed 0)" in reason
    allowed = ValidityPolicy(max_cached_tokens_per_request=80)
    assert check_level(lv, WORKLOAD, allowed) == []


def test_client_limits_rejudge_from_the_numbers() -> None:
    from pytest_llmperf.base.results import ClientHealth

    lv = make_level(8, 800).model_copy(
        update={
            "client": ClientHealth(
                cpu_percent=50.0,
                loop_lag_p99_ms=13.4,
                loop_lag_samples=500,
                saturated=True,
                reason="event-loop lag p99 13.4 ms > 10 ms",
            )
        }
    )
    (reason,) = check_level(lv, WORKLOAD)  # default limits: the monitor's verdict
    assert "13.4 ms > 10 ms" in reason
    assert check_level(lv, WORKLOAD, ValidityPolicy(loop_lag_p99_limit_ms=20.0)) == []
    relaxed_lag = ValidityPolicy(loop_lag_p99_limit_ms=20.0, cpu_percent_limit=40.0)
    (strict,) = check_level(lv, WORKLOAD, relaxed_lag)
    assert "bottleneck (client CPU 50% > 40%)" in strict
    few = lv.model_copy(update={"client": lv.client.model_copy(update={"loop_lag_samples": 3})})
    # too few lag probes to judge a p99: only CPU counts at custom limits
    assert check_level(few, WORKLOAD, ValidityPolicy(loop_lag_p99_limit_ms=5.0)) == []


def test_failed_allowance_and_length_slack() -> None:
    lv = make_level(4, 286, failed=1)
    assert "1 of 8 requests failed (allowed 0)" in check_level(lv, WORKLOAD)[0]
    assert check_level(lv, WORKLOAD, ValidityPolicy(max_failed=1)) == []


def test_policy_from_the_settings_defaults_is_todays_policy() -> None:
    from pytest_llmperf.run.settings import SETTINGS_BY_NAME, resolve
    from pytest_llmperf.verdicts.validity import policy_from_settings

    assert policy_from_settings(lambda n: SETTINGS_BY_NAME[n].default) == ValidityPolicy()
    sweep = {"length_slack": "2%", "max_failed": 3, "cpu_limit": 150}
    p = policy_from_settings(lambda n: resolve(n, environ={}, suite=sweep))
    assert (p.length_tolerance, p.max_failed, p.cpu_percent_limit) == (0.02, 3, 150.0)
    assert resolve("length_slack", environ={}, suite={"length_slack": "0"}) == 0.0
    assert resolve("openai_extensions", marker={"openai_extensions": "off"}) is False


def test_a_lagging_idle_client_was_starved_not_the_bottleneck() -> None:
    """Lag at 2 % client CPU (seen against llama-server on a busy 2-core box): other processes
    held the CPU; the reason says so and names the setting that accepts a small lag."""
    from pytest_llmperf.base.results import ClientHealth

    lv = make_level(4, 52.6)
    client = ClientHealth(
        cpu_percent=2.0,
        loop_lag_p99_ms=19.0,
        loop_lag_samples=500,
        saturated=True,
        reason="event-loop lag p99 19.0 ms > 10 ms",
    )
    (reason,) = check_level(lv.model_copy(update={"client": client}), WORKLOAD)
    assert reason.startswith("the load generator was starved of CPU (event-loop lag p99 19.0 ms")
    assert "only 2 % of a core" in reason and "loop_lag_limit in [sweep]" in reason
    assert "bottleneck" not in reason and "client processes" not in reason


def test_a_starved_client_names_the_machine_load_and_never_asks_for_processes() -> None:
    """At 2 % client CPU more client processes cannot help: the monitor sets no count, and the
    one-sentence reason gives the machine's load instead (as measured over the level)."""
    from pytest_llmperf.base.results import ClientHealth
    from pytest_llmperf.core.monitor import judge_health, with_token_cost

    health = judge_health([19.0] * 500, cpu_percent=2.0)
    costed = with_token_cost(health, cpu_s=0.2, output_tokens=4000)
    assert costed.saturated and costed.processes_needed is None
    client = costed.model_copy(update={"system_cpu_percent": 97.0, "cpus": 2})
    assert isinstance(client, ClientHealth)
    (reason,) = check_level(make_level(4, 52.6).model_copy(update={"client": client}), WORKLOAD)
    assert "the machine was 97 % busy on 2 CPUs: other processes held the CPU" in reason
    assert "client processes" not in reason
    assert reason.count(";") == 1 and len(reason) < 400  # one sentence
