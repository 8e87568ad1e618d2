"""The hit rate from /metrics counter deltas (SGLang's and vLLM's names)."""

from __future__ import annotations

import pytest

from pytest_llmperf.core.cache_metrics import cache_counters, hit_rate_between

SGLANG = """# HELP sglang:cached_tokens_total Number of cached prompt tokens.
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{model_name="m",cache_source="device"} 300.0
sglang:cached_tokens_total{model_name="m",cache_source="host"} 100.0
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="m"} 1000.0
# HELP sglang:cache_hit_rate The prefix cache hit rate.
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{model_name="m"} 0.9
"""
VLLM = """# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{model_name="m",engine="0"} 640.0
vllm:prefix_cache_queries_created{model_name="m",engine="0"} 1.7e9
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{model_name="m",engine="0"} 160.0
"""


def test_counters_are_read_for_both_engines_summed_over_labels() -> None:
    assert cache_counters(SGLANG) == (400.0, 1000.0)  # not the most-recent-batch gauge
    assert cache_counters(VLLM) == (160.0, 640.0)
    assert cache_counters("# TYPE x gauge\nx 1\n") is None


def test_the_rate_is_the_delta_over_the_level() -> None:
    assert hit_rate_between((400.0, 1000.0), (1000.0, 2000.0)) == pytest.approx(0.6)
    assert hit_rate_between(None, (1.0, 2.0)) is None
    assert hit_rate_between((1.0, 2.0), (1.0, 2.0)) is None  # no prompt tokens in between
