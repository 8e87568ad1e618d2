"""What the server says about itself: ``/server_info``, ``/flush_cache`` and ``/metrics``.

The running-request cap that matters is the *effective* one the scheduler settled on (the
sum over DP ranks of ``internal_states[i].effective_max_running_requests_per_dp``), not the
top-level ``max_running_requests`` argument, which is None when auto. Speculative decoding's
accept length is cumulative since the last idle ``/flush_cache``, so the sweep flushes before
each level and reads ``/server_info`` after it to get a per-level figure.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from typing import Any, Literal

import httpx
from prometheus_client.parser import text_string_to_metric_families

from pytest_llmperf.base.results import ServerFacts

PROBE_TIMEOUT_S = 30.0
METRICS_SAMPLE_INTERVAL_S = 0.5
_RUNNING = "sglang:num_running_reqs"
_QUEUED = "sglang:num_queue_reqs"
_ACCEPT = "sglang:spec_accept_length"
_GEN_THROUGHPUT = "sglang:gen_throughput"


async def get_server_info(http: httpx.AsyncClient) -> dict[str, Any] | None:
    """``GET /server_info`` (``/get_server_info`` on older servers); None when neither exists."""
    for path in ("/server_info", "/get_server_info"):
        try:
            r = await http.get(path, timeout=PROBE_TIMEOUT_S)
        except httpx.HTTPError:
            return None
        if r.status_code == 404:
            continue
        if r.status_code != 200:
            return None
        info = r.json()
        return info if isinstance(info, dict) else None
    return None


def effective_running_cap(info: dict[str, Any]) -> int | None:
    """Sum over DP ranks of the scheduler's effective cap; falls back to the arg x dp."""
    states = info.get("internal_states")
    if isinstance(states, list) and states:
        per_dp = [s.get("effective_max_running_requests_per_dp") for s in states]
        caps = [v for v in per_dp if isinstance(v, int)]
        if len(caps) == len(per_dp):
            return sum(caps)
    arg = info.get("max_running_requests")
    if isinstance(arg, int):
        dp = info.get("dp_size")
        return arg * (dp if isinstance(dp, int) and dp > 0 else 1)
    return None


def accept_length(info: dict[str, Any]) -> float | None:
    """Mean ``avg_spec_accept_length`` over DP ranks (None without speculative decoding)."""
    states = info.get("internal_states")
    if not isinstance(states, list):
        return None
    vals = [
        float(s["avg_spec_accept_length"])
        for s in states
        if isinstance(s, dict) and isinstance(s.get("avg_spec_accept_length"), int | float)
    ]
    vals = [v for v in vals if not math.isnan(v)]
    return sum(vals) / len(vals) if vals else None


def server_facts(
    info: dict[str, Any] | None,
    *,
    url: str = "",
    mode: Literal["launched", "attached", "simulated"] = "attached",
) -> ServerFacts:
    """Pure: a ``/server_info`` answer -> ``ServerFacts`` (bare facts when there is none)."""
    if not info:
        return ServerFacts(mode=mode, url=url)
    dp = info.get("dp_size")
    spec = info.get("speculative_algorithm")
    keep = (
        "tp_size",
        "dp_size",
        "max_running_requests",
        "max_total_tokens",
        "chunked_prefill_size",
        "speculative_algorithm",
        "speculative_num_steps",
        "speculative_eagle_topk",
        "speculative_num_draft_tokens",
        "mem_fraction_static",
        "context_length",
        "stream_interval",
        "cuda_graph_max_bs",
        "max_total_num_tokens",
        "sim_profile",
        "sim_cuda_visible_devices",  # which GPUs a simulated server was given (per xdist worker)
    )
    return ServerFacts(
        mode=mode,
        url=url,
        version=str(info["version"]) if info.get("version") is not None else None,
        model_path=info.get("model_path"),
        speculative_algorithm=str(spec) if spec else None,
        max_running_requests=effective_running_cap(info),
        dp_size=dp if isinstance(dp, int) and dp > 0 else 1,
        sim_profile=info.get("sim_profile"),
        server_args={k: info[k] for k in keep if k in info},
    )


async def probe_server(
    http: httpx.AsyncClient,
    *,
    mode: Literal["launched", "attached", "simulated"] = "attached",
) -> ServerFacts:
    """Read ``/server_info`` and turn it into ``ServerFacts``."""
    info = await get_server_info(http)
    return server_facts(info, url=str(http.base_url).rstrip("/"), mode=mode)


async def flush_cache(http: httpx.AsyncClient) -> tuple[bool, str | None]:
    """``POST /flush_cache`` while idle: (flushed, why not). 400 (busy) and 404 are tolerated."""
    try:
        r = await http.post("/flush_cache", timeout=PROBE_TIMEOUT_S)
    except httpx.HTTPError as e:
        return False, f"flush_cache failed: {type(e).__name__}"
    if r.status_code == 200:
        return True, None
    if r.status_code == 404:
        return False, "server has no /flush_cache"
    return False, f"flush_cache refused (HTTP {r.status_code}): server busy"


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> the scheduler gauges we track, summed over ranks (accept: mean)."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    wanted = {_RUNNING, _QUEUED, _ACCEPT, _GEN_THROUGHPUT}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in wanted and not math.isnan(sample.value):
                sums[sample.name] = sums.get(sample.name, 0.0) + sample.value
                counts[sample.name] = counts.get(sample.name, 0) + 1
    out = {k: v for k, v in sums.items() if k != _ACCEPT}
    if _ACCEPT in sums:
        out[_ACCEPT] = sums[_ACCEPT] / counts[_ACCEPT]
    return out


class MetricsSampler:
    """Scrapes ``/metrics`` every ``interval_s`` during a level; summarises at ``stop()``."""

    def __init__(self, http: httpx.AsyncClient, interval_s: float = METRICS_SAMPLE_INTERVAL_S):
        self._http = http
        self._interval = interval_s
        self._samples: list[dict[str, float]] = []
        self._task: asyncio.Task[None] | None = None
        self.error: str | None = None

    def start(self) -> None:
        self._samples = []
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:  # cancelled by stop(); each scrape is bounded by its timeout
            t0 = time.perf_counter()
            try:
                r = await self._http.get("/metrics", timeout=self._interval * 4 + 1.0)
                if r.status_code == 404:
                    self.error = "server has no /metrics (start it with --enable-metrics)"
                    return
                if r.status_code == 200:
                    self._samples.append(parse_metrics(r.text))
            except (httpx.HTTPError, ValueError) as e:
                self.error = f"/metrics scrape failed: {type(e).__name__}"
            await asyncio.sleep(max(0.0, self._interval - (time.perf_counter() - t0)))

    async def stop(self) -> dict[str, float] | None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        return summarize_metric_samples(self._samples)


def summarize_metric_samples(samples: list[dict[str, float]]) -> dict[str, float] | None:
    """Mean and max running/queued requests over a level, and the last accept length."""
    if not samples:
        return None
    out: dict[str, float] = {"samples": float(len(samples))}
    for key, name in ((_RUNNING, "running_requests"), (_QUEUED, "queued_requests")):
        vals = [s[key] for s in samples if key in s]
        if vals:
            out[f"mean_{name}"] = sum(vals) / len(vals)
            out[f"max_{name}"] = max(vals)
    for key, name in ((_ACCEPT, "spec_accept_length"), (_GEN_THROUGHPUT, "gen_throughput")):
        vals = [s[key] for s in samples if key in s]
        if vals:
            out[name] = vals[-1]
    return out
