"""What the server says about itself: its kind and routes, ``/server_info``, the cache reset
(``/flush_cache``) and ``/metrics``.

An attached server need not be SGLang: vLLM and llama-server speak the OpenAI API but have no
``/generate``, ``/health_generate`` or ``/flush_cache``. ``ServerKind`` records what a server
answered (readiness route, served model, cache-reset route), so the run can pick a backend the
server takes and the header can say what was found.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx
import orjson
from prometheus_client.parser import text_string_to_metric_families

from pytest_llmperf.base.errors import LLMPerfError
from pytest_llmperf.base.results import Backend, ServerFacts

# Readiness: the first of these routes that exists decides (SGLang first: its /health can answer
# before the model generates). vLLM and llama-server have /health; any OpenAI server /v1/models.
HEALTH_ROUTES = ("/health_generate", "/health", "/v1/models")
# Cache reset while idle: SGLang's /flush_cache, vLLM's POST /reset_prefix_cache (dev mode only).
CACHE_RESET_ROUTES = ("/flush_cache", "/reset_prefix_cache")
Kind = Literal["sglang", "vllm", "openai-compatible"]
# ``owned_by`` in /v1/models, as each server sets it for itself: SGLang's protocol.py "sglang",
# vLLM's ModelCard "vllm", llama.cpp's server "llamacpp".
_OWNERS: dict[str, Kind] = {"sglang": "sglang", "vllm": "vllm"}


@dataclass(frozen=True)
class ServerKind:
    """What an HTTP server turned out to be, from the routes it answers."""

    kind: Kind
    health_route: str
    served_model: str | None = None
    owned_by: str | None = None
    cache_reset_route: str | None = None
    has_server_info: bool = False

    @property
    def backend(self) -> Backend:
        """The backend to measure with: only SGLang takes ``/generate``."""
        return "sglang" if self.kind == "sglang" else "openai"

    def describe(self) -> str:
        """One line for the header: what the server is and how it is driven."""
        who = {"sglang": "SGLang", "vllm": "vLLM"}.get(self.kind, "OpenAI-compatible")
        if self.kind == "openai-compatible" and self.owned_by:
            who += f" (owned_by {self.owned_by})"
        model = f" serving {self.served_model!r}" if self.served_model else ""
        reset = (
            f"cache reset by {self.cache_reset_route}"
            if self.cache_reset_route
            else "no cache reset route"
        )
        info = "/server_info" if self.has_server_info else "no /server_info"
        return (
            f"{who}{model}; ready by {self.health_route}; {reset}; {info}; backend {self.backend}"
        )


def served_model(models: Any) -> tuple[str | None, str | None]:
    """``(id, owned_by)`` of the first model in a ``/v1/models`` answer (Nones if absent)."""
    data = models.get("data") if isinstance(models, dict) else None
    if not isinstance(data, list) or not data or not isinstance(data[0], dict):
        return None, None
    first = data[0]
    ident = first.get("id")
    owner = first.get("owned_by")
    return (
        ident if isinstance(ident, str) and ident else None,
        owner if isinstance(owner, str) and owner else None,
    )


def classify_server(
    *,
    health_route: str,
    models: Any = None,
    server_info: Any = None,
    cache_reset_route: str | None = None,
) -> ServerKind:
    """Pure: what answered -> ``ServerKind``.

    SGLang answers ``/health_generate`` or has ``/flush_cache``; otherwise ``owned_by`` in
    ``/v1/models`` names vLLM (or SGLang); vLLM's dev-mode ``/server_info`` holds
    ``vllm_config``. Anything else is an OpenAI-compatible server.
    """
    model, owner = served_model(models)
    kind: Kind = _OWNERS.get(owner or "", "openai-compatible")
    info = server_info if isinstance(server_info, dict) else None
    if info is not None and "vllm_config" in info:
        kind = "vllm"
    elif health_route == "/health_generate" or cache_reset_route == "/flush_cache":
        kind = "sglang"
    return ServerKind(
        kind=kind,
        health_route=health_route,
        served_model=model,
        owned_by=owner,
        cache_reset_route=cache_reset_route,
        has_server_info=info is not None,
    )


PROBE_TIMEOUT_S = 30.0
METRICS_SAMPLE_INTERVAL_S = 0.5
_RUNNING = "sglang:num_running_reqs"
_QUEUED = "sglang:num_queue_reqs"
_ACCEPT = "sglang:spec_accept_length"
_GEN_THROUGHPUT = "sglang:gen_throughput"


class ServerAnswerError(LLMPerfError, RuntimeError):
    """The server answered a control request with something no SGLang server sends."""


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
        try:
            info = r.json()
        except ValueError:
            kind = r.headers.get("content-type", "no content type")
            start = r.text[:60].strip().replace("\n", " ")
            raise ServerAnswerError(
                f"GET {r.url} answered 200 with a body that is not JSON ({kind}, starting "
                f"{start!r}); is a proxy or another service answering at this address?"
            ) from None
        return info if isinstance(info, dict) else None
    return None


def local_vocab_size(info: dict[str, Any] | None) -> tuple[int | None, str]:
    """The served model's vocabulary size and where it came from, or (None, why not).

    SGLang's ``/server_info`` and ``/get_model_info`` do not report it (0.5.23), but both name
    the model's path; when that is a directory on this machine its ``config.json`` says.
    """
    for key in ("model_path", "tokenizer_path"):
        path = (info or {}).get(key)
        config = Path(path) / "config.json" if isinstance(path, str) and path else None
        if config is None or not config.is_file():
            continue
        try:
            data = orjson.loads(config.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            continue
        for obj in (data, data.get("text_config") if isinstance(data, dict) else None):
            size = obj.get("vocab_size") if isinstance(obj, dict) else None
            if isinstance(size, int) and size > 0:
                return size, str(config)
    return None, "the server names no model directory on this machine"


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


def decode_cuda_graph_max_bs(info: dict[str, Any]) -> int | None:
    """The largest decode batch the server replays as a CUDA graph; None when graphs are off
    or the answer does not say.

    Each SGLang release spells it differently, newest first:

    - 0.5.23: ``internal_states[i].decode_cuda_graph_bs``, the batch sizes each DP rank
      captured (empty when capture is off, as on CPU); else the resolved
      ``cuda_graph_config.decode`` (``backend`` "disabled" or ``max_bs``). The top-level
      ``cuda_graph_max_bs_decode`` is only the flag as given (None when auto), so it is not read.
    - older releases: ``cuda_graph_max_bs``, with ``disable_cuda_graph`` turning capture off.
    """
    states = info.get("internal_states")
    if isinstance(states, list):
        captured = [s.get("decode_cuda_graph_bs") for s in states if isinstance(s, dict)]
        lists = [c for c in captured if isinstance(c, list)]
        if lists and len(lists) == len(captured):
            # each DP rank runs its own batch against its own graphs: the smallest largest one
            sizes = [max((b for b in c if isinstance(b, int)), default=0) for c in lists]
            return min(sizes) or None
    config = info.get("cuda_graph_config")
    decode = config.get("decode") if isinstance(config, dict) else None
    if isinstance(decode, dict):
        if decode.get("backend") == "disabled":
            return None
        bs = decode.get("max_bs")
        return bs if isinstance(bs, int) and bs > 0 else None
    if info.get("disable_cuda_graph") is True:
        return None
    bs = info.get("cuda_graph_max_bs")
    return bs if isinstance(bs, int) and not isinstance(bs, bool) and bs > 0 else None


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
        "max_total_num_tokens",
        "sim_profile",
        "enable_deterministic_inference",  # greedy outputs batch-invariant (consistency probes)
        "sim_cuda_visible_devices",  # which GPUs a simulated server was given (per xdist worker)
    )
    args = {k: info[k] for k in keep if k in info}
    graph_bs = decode_cuda_graph_max_bs(info)
    if graph_bs is not None:  # one key whichever release's spelling it came from
        args["cuda_graph_max_bs"] = graph_bs
    return ServerFacts(
        mode=mode,
        url=url,
        version=str(info["version"]) if info.get("version") is not None else None,
        model_path=info.get("model_path"),
        speculative_algorithm=str(spec) if spec else None,
        max_running_requests=effective_running_cap(info),
        dp_size=dp if isinstance(dp, int) and dp > 0 else 1,
        sim_profile=info.get("sim_profile"),
        server_args=args,
    )


async def flush_cache(http: httpx.AsyncClient) -> tuple[bool, str | None]:
    """Reset the prefix cache while idle: ``POST /flush_cache`` (SGLang), else
    ``POST /reset_prefix_cache`` (vLLM). Returns (flushed, why not); 400 (busy) and a server
    with neither route are tolerated.
    """
    for path in CACHE_RESET_ROUTES:
        try:
            r = await http.post(path, timeout=PROBE_TIMEOUT_S)
        except httpx.HTTPError as e:
            return False, f"{path.lstrip('/')} failed: {type(e).__name__}"
        if r.status_code == 200:
            return True, None
        if r.status_code in (404, 405):
            continue
        return False, f"{path.lstrip('/')} refused (HTTP {r.status_code}): server busy"
    return False, "server has no /flush_cache (nor /reset_prefix_cache)"


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
    # SGLang exports the accept-length gauge as 0.0 when speculative decoding is off; while
    # it runs every verify step accepts at least one token, so only >= 1 is a figure.
    if _ACCEPT in sums and sums[_ACCEPT] / counts[_ACCEPT] >= 1.0:
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
