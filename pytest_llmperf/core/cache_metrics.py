"""The prefix-cache hit rate from ``/metrics`` counters, for servers whose responses omit it.

SGLang reports cached prompt tokens per request in ``meta_info.cached_tokens``, and on OpenAI
routes in ``usage.prompt_tokens_details.cached_tokens`` only with ``--enable-cache-report``
(vLLM: ``--enable-prompt-tokens-details``). Without them the level's hit rate comes from
counter deltas over the level, scraped before and after it:

- SGLang (``observability/metrics_collector.py``): ``sglang:cached_tokens_total`` (summed over
  its ``cache_source`` labels) over ``sglang:prompt_tokens_total``.
- vLLM V1 (``vllm/v1/metrics/loggers.py``): ``vllm:prefix_cache_hits_total`` over
  ``vllm:prefix_cache_queries_total`` (both in tokens).

Not the ``sglang:cache_hit_rate`` gauge: it is the scheduler's most recent batch's figure, not
one over a window. Counters count every client's requests: the level's rate is only right when
nothing else uses the server meanwhile, which the level's note says.
"""

from __future__ import annotations

import math

import httpx
from prometheus_client.parser import text_string_to_metric_families

# (hits, queries) counter families, by engine; the parser drops the ``_total`` suffix from
# family names, so samples are matched by their full names.
_PAIRS = (
    ("sglang:cached_tokens_total", "sglang:prompt_tokens_total"),
    ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"),
)
SCRAPE_TIMEOUT_S = 5.0


def cache_counters(text: str) -> tuple[float, float] | None:
    """(cached tokens, prompt tokens) summed over label sets, or None without the counters."""
    sums: dict[str, float] = {}
    names = {n for pair in _PAIRS for n in pair}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in names and not math.isnan(s.value):
                sums[s.name] = sums.get(s.name, 0.0) + s.value
    for hits, queries in _PAIRS:
        if hits in sums and queries in sums:
            return sums[hits], sums[queries]
    return None


async def scrape_cache_counters(http: httpx.AsyncClient) -> tuple[float, float] | None:
    """The server's counters now; None when it has no /metrics or no such counters."""
    try:
        r = await http.get("/metrics", timeout=SCRAPE_TIMEOUT_S)
    except httpx.HTTPError:
        return None
    if r.status_code != 200:
        return None
    try:
        return cache_counters(r.text)
    except ValueError:  # not Prometheus text
        return None


def hit_rate_between(
    before: tuple[float, float] | None, after: tuple[float, float] | None
) -> float | None:
    """Cached over prompt tokens between two scrapes (None: no counters or no prompt tokens)."""
    if before is None or after is None:
        return None
    queries = after[1] - before[1]
    return (after[0] - before[0]) / queries if queries > 0 else None
