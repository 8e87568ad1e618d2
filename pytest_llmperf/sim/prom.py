"""Prometheus metrics with SGLang's ``sglang:*`` or vLLM's ``vllm:*`` names, in a private
registry per server.

Both engines export the same token counters and latency histograms under their own prefix
(with their own buckets); ``_EngineMetrics`` defines those once and each engine adds its own
gauges and counters around them, in the order its ``/metrics`` page lists them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prometheus_client import Counter, Gauge, Histogram

    from pytest_llmperf.sim.server_api import Server
    from pytest_llmperf.sim.wire import Gen

# Histogram buckets as each engine declares them (seconds).
_SGLANG_TTFT_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    0.75,
    1,
    2.5,
    5,
    7.5,
    10,
    20,
    40,
    80,
    160,
)
_SGLANG_ITL_BUCKETS = (
    0.002,
    0.004,
    0.006,
    0.008,
    0.01,
    0.015,
    0.02,
    0.025,
    0.03,
    0.035,
    0.04,
    0.06,
    0.08,
    0.1,
    0.2,
    0.4,
    0.6,
    0.8,
    1.0,
    2.0,
)
_SGLANG_E2E_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
_VLLM_TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
_VLLM_ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
_VLLM_E2E_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)


class _EngineMetrics:
    """One private registry and the series both engines share, bound to this server's labels."""

    prompt_tokens: Counter
    gen_tokens: Counter
    aborted: Counter
    ttft: Histogram
    itl: Histogram
    e2e: Histogram

    def __init__(self, server: Server, labels: list[str], values: Sequence[str]) -> None:
        from prometheus_client import CollectorRegistry

        self.server = server
        self.registry = CollectorRegistry(auto_describe=True)
        self._labels = labels
        self._vals = tuple(values)

    def _counter(self, name: str, doc: str) -> Counter:
        from prometheus_client import Counter

        return Counter(name, doc, self._labels, registry=self.registry).labels(*self._vals)

    def _gauge(self, name: str, doc: str) -> Gauge:
        from prometheus_client import Gauge

        return Gauge(name, doc, self._labels, registry=self.registry).labels(*self._vals)

    def _histogram(self, name: str, doc: str, buckets: Sequence[float]) -> Histogram:
        from prometheus_client import Histogram

        h = Histogram(name, doc, self._labels, registry=self.registry, buckets=buckets)
        return h.labels(*self._vals)

    def _token_counters(self, prefix: str) -> None:
        """``<prefix>:prompt_tokens`` and ``<prefix>:generation_tokens`` (same help in both)."""
        self.prompt_tokens = self._counter(
            f"{prefix}:prompt_tokens", "Number of prefill tokens processed."
        )
        self.gen_tokens = self._counter(
            f"{prefix}:generation_tokens", "Number of generation tokens processed."
        )

    def _latency_histograms(
        self,
        prefix: str,
        buckets: tuple[Sequence[float], Sequence[float], Sequence[float]],
        e2e_doc: str,
    ) -> None:
        """TTFT, ITL and end-to-end latency; ``buckets`` in that order, ``e2e_doc`` as worded."""
        ttft, itl, e2e = buckets
        self.ttft = self._histogram(
            f"{prefix}:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            ttft,
        )
        self.itl = self._histogram(
            f"{prefix}:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            itl,
        )
        self.e2e = self._histogram(f"{prefix}:e2e_request_latency_seconds", e2e_doc, e2e)

    def on_finish(self, gen: Gen) -> None:
        self.prompt_tokens.inc(gen.prompt_len)
        self.gen_tokens.inc(gen.n)
        self.e2e.observe(gen.t_last - gen.t_start)

    def _exposition(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class SglangMetrics(_EngineMetrics):
    """Prometheus metrics with SGLang's names, in a private registry (one per server)."""

    def __init__(self, server: Server) -> None:
        from prometheus_client import Gauge

        model = server.served_model_name
        super().__init__(server, ["model_name"], [model])
        glabels = ["model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"]
        self._gvalues = [model, "unified", "0", "0", "0"]

        def g(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, glabels, registry=self.registry, multiprocess_mode="mostrecent")

        self.g_running = g("sglang:num_running_reqs", "The number of running requests.")
        self.g_queue = g("sglang:num_queue_reqs", "The number of requests in the waiting queue.")
        self.g_used = g("sglang:num_used_tokens", "The number of used tokens.")
        self.g_usage = g("sglang:token_usage", "The token usage.")
        self.g_thr = g("sglang:gen_throughput", "The generation throughput (token/s).")
        self.g_hit = g("sglang:cache_hit_rate", "The prefix cache hit rate.")
        self.g_max = g(
            "sglang:max_total_num_tokens", "Maximum total number of tokens in the KV pool."
        )
        self.g_acc_len = g(
            "sglang:spec_accept_length", "The average acceptance length of speculative decoding."
        )
        self.g_acc_rate = g(
            "sglang:spec_accept_rate", "The average acceptance rate of speculative decoding."
        )
        self.g_retract = g("sglang:num_retracted_reqs", "The number of retracted requests.")
        self.g_graph = g("sglang:is_cuda_graph", "Whether the batch is using CUDA graph.")
        self._token_counters("sglang")
        self.cached_tokens = self._counter(
            "sglang:cached_tokens", "Number of cached prompt tokens."
        )
        self.requests = self._counter("sglang:num_requests", "Number of requests processed.")
        self.aborted = self._counter("sglang:num_aborted_requests", "Number of requests aborted.")
        self._latency_histograms(
            "sglang",
            (_SGLANG_TTFT_BUCKETS, _SGLANG_ITL_BUCKETS, _SGLANG_E2E_BUCKETS),
            "Histogram of End-to-end request latency in seconds",
        )

    def on_cached(self, cached: int, prompt_len: int) -> None:
        self.cached_tokens.inc(cached)

    def on_finish(self, gen: Gen) -> None:
        self.requests.inc()
        super().on_finish(gen)

    def render(self) -> tuple[bytes, str]:
        server = self.server
        s = server.engine.stats()
        v = self._gvalues
        self.g_running.labels(*v).set(s.num_running)
        self.g_queue.labels(*v).set(s.num_queued)
        self.g_used.labels(*v).set(s.used_kv_tokens)
        self.g_usage.labels(*v).set(
            s.used_kv_tokens / s.max_total_num_tokens if s.max_total_num_tokens else 0.0
        )
        self.g_thr.labels(*v).set(s.last_gen_throughput)
        pc = server.prefix_cache
        self.g_hit.labels(*v).set(pc.hits / pc.queries if pc is not None and pc.queries else 0.0)
        self.g_max.labels(*v).set(s.max_total_num_tokens)
        self.g_retract.labels(*v).set(0)
        self.g_graph.labels(*v).set(0 if server.knobs.disable_cuda_graph else 1)
        if server.spec_on:
            acc = s.avg_spec_accept_length or 0.0
            self.g_acc_len.labels(*v).set(acc)
            self.g_acc_rate.labels(*v).set(
                max(0.0, acc - 1.0) / max(1, server.spec_draft_tokens - 1)
            )
        return self._exposition()


class VllmMetrics(_EngineMetrics):
    """A few of vLLM's ``vllm:*`` metrics (V1 engine names), labelled model_name/engine."""

    def __init__(self, server: Server) -> None:
        from prometheus_client import Counter

        super().__init__(server, ["model_name", "engine"], [server.served_model_name, "0"])
        self.g_running = self._gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches."
        )
        self.g_waiting = self._gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed."
        )
        self.g_kv = self._gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."
        )
        self._token_counters("vllm")
        self.pc_queries = self._counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
        )
        self.pc_hits = self._counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."
        )
        self.success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*self._labels, "finished_reason"],
            registry=self.registry,
        )
        self.aborted = self.success.labels(*self._vals, "abort")
        self._latency_histograms(
            "vllm",
            (_VLLM_TTFT_BUCKETS, _VLLM_ITL_BUCKETS, _VLLM_E2E_BUCKETS),
            "Histogram of e2e request latency in seconds.",
        )

    def on_cached(self, cached: int, prompt_len: int) -> None:
        self.pc_hits.inc(cached)
        self.pc_queries.inc(prompt_len)

    def on_finish(self, gen: Gen) -> None:
        self.success.labels(*self._vals, "length").inc()
        super().on_finish(gen)

    def render(self) -> tuple[bytes, str]:
        s = self.server.engine.stats()
        self.g_running.set(s.num_running)
        self.g_waiting.set(s.num_queued)
        self.g_kv.set(s.used_kv_tokens / s.max_total_num_tokens if s.max_total_num_tokens else 0.0)
        return self._exposition()
