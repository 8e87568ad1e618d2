"""The one place where every metric the plugin measures or gates on is defined.

Names follow SGLang's ``bench_serving`` (``output_throughput``, ``median_ttft_ms``, ...), so a
user who knows that tool reads our reports and baselines without a glossary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Direction = Literal["higher", "lower"]


@dataclass(frozen=True)
class MetricDef:
    """What a metric means, its unit, and which way is better."""

    name: str
    unit: str
    direction: Direction
    description: str
    # A change smaller than this (in ``unit``) is never a regression: below it the metric
    # measures the box's load (imports, page cache, scheduling), not the server.
    slack: float = 0.0


_LATENCIES = {
    "ttft": "time to first token (client send to first token)",
    "itl": (
        "inter-token latency, pooled over all gaps of all requests; "
        "a multi-token event's gap is split across its tokens"
    ),
    "tpot": "time per output token per request, (e2e - ttft) / (output_tokens - 1)",
    "e2e_latency": "end-to-end request latency (send to last byte)",
}
_STATS = {"mean": "mean", "median": "p50", "p90": "p90", "p99": "p99"}

METRICS: dict[str, MetricDef] = {
    d.name: d
    for d in [
        MetricDef(
            "output_throughput",
            "tok/s",
            "higher",
            "aggregate output tokens per second of the level "
            "(sum of output tokens / level duration)",
        ),
        MetricDef(
            "per_request_throughput",
            "tok/s",
            "higher",
            "mean over requests of per-request decode speed, (output_tokens - 1) / (e2e - ttft)",
        ),
        MetricDef("request_throughput", "req/s", "higher", "completed requests per second"),
        MetricDef("input_throughput", "tok/s", "higher", "prompt tokens per second"),
        MetricDef("total_throughput", "tok/s", "higher", "prompt plus output tokens per second"),
        MetricDef(
            "concurrency",
            "req",
            "higher",
            "achieved mean in-flight requests, sum of e2e latencies / duration",
        ),
        MetricDef(
            "accept_length",
            "tok/step",
            "higher",
            "speculative decoding accept length reported by the server for this level",
        ),
        MetricDef(
            "cache_hit_rate",
            "ratio",
            "higher",
            "prompt tokens the server served from its prefix cache / all prompt tokens of the "
            "level, from its reported cached tokens (shared-prefix workloads)",
        ),
        MetricDef(
            "startup_s",
            "s",
            "lower",
            "launch to healthy of the server this level ran on (launched configs)",
            slack=5.0,
        ),
        MetricDef(
            "first_request_ms",
            "ms",
            "lower",
            "end-to-end latency of the first request after the server became healthy "
            "(launched configs)",
            slack=200.0,
        ),
        MetricDef("goodput", "req/s", "higher", "completed requests per second that met every SLO"),
        MetricDef(
            "crossover_concurrency",
            "req",
            "higher",
            "largest concurrency at which a config still beats its reference",
        ),
        MetricDef(
            "max_concurrency_within_slo",
            "req",
            "higher",
            "largest swept concurrency whose level met every SLO",
        ),
    ]
    + [
        MetricDef(f"{stat}_{lat}_ms", "ms", "lower", f"{label} {desc}")
        for lat, desc in _LATENCIES.items()
        for stat, label in _STATS.items()
    ]
}


def metric(name: str) -> MetricDef:
    """Look a metric up by name, with an error that lists the valid names."""
    try:
        return METRICS[name]
    except KeyError:
        known = ", ".join(sorted(METRICS))
        raise KeyError(f"unknown metric {name!r}; known metrics: {known}") from None
