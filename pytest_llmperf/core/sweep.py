"""Sweeps over concurrency levels: closed loop (exactly C in flight) or open-loop Poisson.

Per level: ``/flush_cache`` while idle (so the radix cache holds nothing and the speculative
counters restart) -> for a shared-prefix workload, one priming request per prefix group (so
the cache holds exactly the shared prefixes) -> run the level -> ``/server_info`` (the
level's accept length). One short warm-up request goes first. Every wait is bounded: each
request has a total deadline and each level a deadline derived from it.

``run_sweep`` runs its own event loop in a dedicated thread, so it also works where a loop is
already running (pytest-asyncio tests, notebooks); ``run_sweep_async`` is the same in the
caller's loop.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import inspect
import math
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

from pytest_llmperf.base.errors import LLMPerfError
from pytest_llmperf.base.results import (
    LevelResult,
    Mode,
    ServerFacts,
    SweepResult,
    Workload,
)
from pytest_llmperf.core.cache_metrics import hit_rate_between, scrape_cache_counters
from pytest_llmperf.core.chat_sizing import ChatSizing, ChatSizingError, size_chat_prompts
from pytest_llmperf.core.client import STALLED, LoadGenerator
from pytest_llmperf.core.context_limit import request_context
from pytest_llmperf.core.conversations import conversation_loop, ttft_by_turn_ms
from pytest_llmperf.core.metrics import compute_level
from pytest_llmperf.core.monitor import LoopMonitor, with_token_cost
from pytest_llmperf.core.plan import LevelBodies, RequestPlan, plan_level
from pytest_llmperf.core.progress import Progress, ProgressCallback, _Tracker
from pytest_llmperf.core.records import RequestRecord
from pytest_llmperf.core.server_probe import (
    PROBE_TIMEOUT_S,
    MetricsSampler,
    accept_length,
    decode_cuda_graph_max_bs,
    effective_running_cap,
    flush_cache,
    get_server_info,
    local_vocab_size,
    server_facts,
)
from pytest_llmperf.core.shard import new_loop, sharded_closed_loop
from pytest_llmperf.core.slo import Slo
from pytest_llmperf.core.workers import pull_workers
from pytest_llmperf.core.workload import (
    MAX_PROMPT_ID,
    WARMUP_INDEX,
    poisson_offsets,
    prime_prompts,
    warmup_prompt,
)

WARMUP_OUTPUT_LEN = 32  # bench_serving caps its warm-up output the same way
T = TypeVar("T")
P = ParamSpec("P")


class SweepError(LLMPerfError, RuntimeError):
    """The sweep could not measure anything meaningful (server unreachable, warm-up failed)."""


def validate_levels(levels: Sequence[int]) -> list[int]:
    """Concurrency levels as a list; raises ValueError saying what is wrong."""
    out = list(levels)
    if not out:
        raise ValueError("no concurrency levels given; pass at least one, e.g. 1,4,16")
    for c in out:
        if isinstance(c, bool) or not isinstance(c, int) or c < 1:
            raise ValueError(f"concurrency levels must be integers >= 1, got {c!r}")
    return out


def level_deadline_s(workload: Workload, concurrency: int) -> float:
    """Upper bound on one level: every worker's requests at their full deadline, plus probes."""
    n, turns = workload.num_requests(concurrency), workload.turns or 1
    waves = math.ceil(n / concurrency) * turns if workload.request_rate is None else n
    think = waves * workload.think_time_s  # multi-turn: at most this long between turns
    waves += workload.prefix_groups or 0  # shared-prefix: the priming requests, one by one
    return (waves + 1) * workload.request_timeout_s + think + 4 * PROBE_TIMEOUT_S


def sweep_deadline_s(workload: Workload, levels: Sequence[int]) -> float:
    return sum(level_deadline_s(workload, c) for c in levels) + workload.request_timeout_s + 60.0


@dataclass
class _Requests:
    """One level's requests, prepared: sending one records it and reports its progress."""

    gen: LoadGenerator
    bodies: LevelBodies
    output_len: int
    tracker: _Tracker

    # After this many stalled requests with none completed, the rest of the level is not sent:
    # a server that stalls every stream would cost an idle timeout per request (0: never).
    give_up_after: int = 0

    def __post_init__(self) -> None:
        self.records: list[RequestRecord | None] = [None] * len(self.bodies)
        self.stalled = 0
        self.completed = 0

    async def send(self, i: int, t_scheduled: float | None = None) -> None:
        if self.give_up_after and self.stalled >= self.give_up_after and not self.completed:
            rec = RequestRecord(
                index=i,
                error=f"not sent: every request before it stalled ({self.stalled}) and none "
                "completed, so the server stalls every stream",
            )
            self.records[i] = rec
            self.tracker.add(rec)
            return
        body, tokens = self.bodies.take(i)
        rec = await self.gen.request(
            i, "", self.output_len, body=body, prompt_tokens=tokens, t_scheduled=t_scheduled
        )
        self.records[i] = rec
        if rec.ok:
            self.completed += 1
        elif rec.error is not None and rec.error.startswith(STALLED):
            self.stalled += 1
        self.tracker.add(rec)


async def _closed_loop(requests: _Requests, concurrency: int) -> list[RequestRecord | None]:
    """C workers pull from one request list, so exactly C requests are in flight until the
    list runs dry (the seed scripts' and bench_serving's --max-concurrency behaviour)."""
    await pull_workers(concurrency, len(requests.records), requests.send)
    return requests.records


async def _open_loop(
    requests: _Requests, concurrency: int, rate: float, seed: int
) -> list[RequestRecord | None]:
    """Poisson arrivals (seeded), at most C in flight; each record keeps its scheduled time so
    lateness (the client or the cap holding requests back) is reported, not hidden."""
    sem = asyncio.Semaphore(concurrency)
    offsets = poisson_offsets(rate, len(requests.records), seed)

    async def one(i: int, due: float) -> None:
        async with sem:
            await requests.send(i, t_scheduled=due)

    t0 = time.perf_counter()
    tasks: list[asyncio.Task[None]] = []
    try:
        for i, off in enumerate(offsets):
            delay = t0 + off - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i, t0 + off)))
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
    return requests.records


@dataclass(frozen=True)
class _Asked:
    """What the caller asked of every level beyond its requests."""

    progress: ProgressCallback | None
    details: bool
    scrape_metrics: bool
    slo: Slo | None
    client_processes: int


async def _measure_level(
    gen: LoadGenerator,
    concurrency: int,
    workload: Workload,
    plan: RequestPlan,
    cap: int | None,
    sizing: ChatSizing | None,
    asked: _Asked,
) -> LevelResult:
    """One level of the planned requests (fresh prompt ordinals: none is in any cache)."""
    n, multi = len(plan), plan.turns > 1
    client_processes = asked.client_processes
    notes: list[str] = []
    if client_processes > 1 and (workload.request_rate is not None or multi):
        notes.append("one client process (sharding is for closed loops of single requests)")
        client_processes = 1
    if sizing is not None and not sizing.exact:
        notes.append(
            f"chat prompts are {sizing.tokens(sizing.filler)} tokens, not {workload.input_len}: "
            f"the chat template and the prompt's number alone are {sizing.overhead} tokens"
        )
    flushed, why = await flush_cache(gen.http)
    if not flushed and why:
        notes.append(why)  # the prompts are fresh anyway; only speculative counters carry over
    primed = await _prime(gen, workload)
    if primed:
        notes.append(primed)
    # The shards build their own share; one process builds the level's first bodies here.
    bodies = LevelBodies(plan, gen.body) if client_processes == 1 else None
    cache_wanted = workload.kind != "random"  # a fallback if responses carry no cached_tokens
    counters = await scrape_cache_counters(gen.http) if cache_wanted else None
    tracker = _Tracker(concurrency, n, asked.progress)
    sampler = MetricsSampler(gen.http) if asked.scrape_metrics else None
    monitor = LoopMonitor()
    gc.collect()
    gc_was_enabled = gc.isenabled()
    gc.disable()  # a full collection mid-level shows up as a token-timestamp stall
    if sampler is not None:
        sampler.start()
    monitor.start()
    tracker.t0 = time.perf_counter()
    shard_health = None
    try:
        async with asyncio.timeout(level_deadline_s(workload, concurrency)):
            if client_processes > 1:
                records, shard_health, shard_cpu = await sharded_closed_loop(
                    gen,
                    client_processes,
                    concurrency,
                    plan,
                    tracker.add,
                    level_deadline_s(workload, concurrency),
                )
            elif multi:
                assert bodies is not None
                records = await conversation_loop(
                    gen, concurrency, bodies.take, n, plan.turns, plan.think, tracker.add
                )
            else:
                assert bodies is not None
                requests = _Requests(
                    gen, bodies, workload.output_len, tracker, give_up_after=concurrency
                )
                if workload.request_rate is None:
                    records = await _closed_loop(requests, concurrency)
                else:
                    records = await _open_loop(
                        requests, concurrency, workload.request_rate, workload.seed
                    )
    finally:
        health = await monitor.stop()
        server_metrics = await sampler.stop() if sampler is not None else None
        if gc_was_enabled:
            gc.enable()
    cpu_s = monitor.cpu_s
    if shard_health is not None:  # the parent only waited: the shards' loops are the client
        health, cpu_s = shard_health, shard_cpu
    tracker.report("level-done")
    if bodies is not None and bodies.built_late:
        notes.append(
            f"{bodies.built_late} request bodies were built while the level ran (past the first "
            f"{bodies.budget_tokens:,} prompt tokens): the client's CPU figures include them"
        )
    final = [
        r if r is not None else RequestRecord(index=i, error="not run: level deadline reached")
        for i, r in enumerate(records)
    ]
    result = compute_level(final, max_concurrency=concurrency, details=asked.details, slo=asked.slo)
    if plan.per_request_targets(workload):
        result.expected_input_tokens, result.expected_output_tokens = plan.expected_totals(final)
    if workload.kind != "random" and result.total_input_tokens > 0:
        result.cache_hit_rate = result.total_cached_tokens / result.total_input_tokens
    if cache_wanted and result.total_cached_tokens == 0 and result.completed:
        rate = hit_rate_between(counters, await scrape_cache_counters(gen.http))
        if rate:  # the responses said nothing (OpenAI routes without a cache report)
            result.cache_hit_rate = rate
            notes.append("cache hit rate from /metrics counters over the level (all clients)")
    if multi:
        result.ttft_by_turn_ms = ttft_by_turn_ms(final, plan.turns)
        notes.append(f"multi-turn: history share {workload.expected_cache_hit_rate():.1%}")
    health = with_token_cost(health, cpu_s, result.total_output_tokens)
    info = await get_server_info(gen.http)
    if info is not None:
        cap = effective_running_cap(info) or cap
        _server_shape(result, info)
        result.accept_length = accept_length(info) if flushed else None
    if result.accept_length is None:
        per_req = [r.spec_accept_length for r in final if r.ok and r.spec_accept_length]
        if per_req:
            result.accept_length = sum(per_req) / len(per_req)
            notes.append("accept length from per-request meta_info")
    result.server_max_running_requests = cap
    result.server_context_tokens, result.server_context_source = await request_context(gen.http)
    if cap is not None and concurrency > cap:
        result.queueing = True
        notes.append(f"C={concurrency} > max running requests {cap}: queueing")
    if workload.request_rate is not None:
        notes.append(f"open loop: Poisson {workload.request_rate:g} req/s, at most C in flight")
    if result.connection_retries:
        notes.append(
            f"{result.connection_retries} request(s) re-sent on a new connection: the server had "
            "closed a pooled keep-alive connection (timed from the successful attempt)"
        )
    if health.saturated:
        notes.append(f"client saturated: {health.reason}")
    if sampler is not None and sampler.error:
        notes.append(sampler.error)
    result.client = health
    result.prompt_overhead_tokens = sizing.overhead if sizing is not None else 0
    result.server_metrics = server_metrics
    result.notes = notes
    return result


def _server_shape(result: LevelResult, info: dict[str, object]) -> None:
    """What a speculative config's loss may be explained by: graph capture size, DP ranks."""
    dp = info.get("dp_size")
    result.server_cuda_graph_max_bs = decode_cuda_graph_max_bs(info)
    result.server_dp_size = dp if isinstance(dp, int) and dp > 0 else None
    result.speculative = bool(info.get("speculative_algorithm"))


def _load_generator(url: str, workload: Workload, api_key: str | None) -> LoadGenerator:
    """The client for ``url`` as ``workload`` asks (backend, per-request deadline, sampling)."""
    return LoadGenerator(
        url,
        workload.backend,
        api_key=api_key,
        request_timeout_s=workload.request_timeout_s,
        idle_timeout_s=workload.idle_timeout_s,
        temperature=workload.temperature,
        extensions=workload.openai_extensions,
    )


def _fit_vocab(gen: LoadGenerator, info: dict[str, Any] | None, workload: Workload) -> str | None:
    """Keep token-id prompts inside the served model's vocabulary; a note saying what was done
    (or that the vocabulary is unknown), None for text prompts or a vocabulary large enough."""
    if workload.backend == "openai-chat" or workload.dataset is not None:
        return None
    size, where = local_vocab_size(info)
    if size is None:
        if info is not None and info.get("simulated") is True:
            return None  # the simulated server takes any token id: nothing to warn about
        return (
            f"vocabulary size unknown ({where}): prompt token ids go up to {MAX_PROMPT_ID}, "
            "assumed inside the model's vocabulary"
        )
    if size > MAX_PROMPT_ID:
        return None
    gen.vocab_size = size
    return f"prompt token ids folded into the model's {size}-token vocabulary ({where})"


async def _prime(gen: LoadGenerator, workload: Workload) -> str | None:
    """Put each shared prefix in the cache (one 1-token request per group); a note if any
    priming request failed (the hit-rate check then says how far off the level is)."""
    failed = []
    for i, prompt in enumerate(prime_prompts(workload)):
        rec = await gen.request(WARMUP_INDEX - 1000 - i, prompt, 1)
        if not rec.ok:
            failed.append(rec.error or "failed")
    if failed:
        return f"{len(failed)} priming request(s) failed, first: {failed[0]}"
    return None


async def _warm_up(
    gen: LoadGenerator,
    workload: Workload,
    progress: ProgressCallback | None,
    prompt_start: int = 0,
) -> float:
    """The warm-up request; its end-to-end latency in ms (a fresh server's first request)."""
    tracker = _Tracker(0, 1, progress)
    rec = await gen.request(
        WARMUP_INDEX,
        warmup_prompt(workload, prompt_start),
        min(WARMUP_OUTPUT_LEN, workload.output_len),
    )
    tracker.add(rec)
    tracker.report("warmup")
    if not rec.ok:
        raise SweepError(f"warm-up request to {gen.base_url} failed: {rec.error}")
    return rec.e2e * 1e3


async def _size_chat(gen: LoadGenerator, workload: Workload) -> ChatSizing | None:
    """Chat: size prompts to input_len as the server counts (core/chat_sizing.py)."""
    if workload.backend != "openai-chat" or workload.dataset is not None:
        return None
    try:
        return await size_chat_prompts(gen, workload.input_len)
    except ChatSizingError as e:
        raise SweepError(str(e)) from None


def _plan(workload: Workload, c: int, start: int, sizing: ChatSizing | None) -> RequestPlan:
    filler, unit = (sizing.filler, sizing.per_unit) if sizing is not None else (None, 1)
    return plan_level(
        workload, workload.num_requests(c), start, chat_filler=filler, chat_per_unit=unit
    )


async def run_sweep_async(
    url: str,
    levels: Sequence[int],
    workload: Workload | None = None,
    *,
    api_key: str | None = None,
    config_name: str = "default",
    progress: ProgressCallback | None = None,
    details: bool = False,
    scrape_metrics: bool = False,
    server_mode: Mode = "attached",
    slo: Slo | None = None,
    prompt_start: int = 0,
    client_processes: int = 1,
) -> SweepResult:
    """Sweep ``levels`` against the server at ``url`` in the running event loop.

    Level k sends prompt ordinals from ``prompt_start`` plus the requests of levels before it.
    """
    levels = validate_levels(levels)
    workload = workload or Workload()
    async with _load_generator(url, workload, api_key) as gen:
        info = await get_server_info(gen.http)
        facts = server_facts(info, url=gen.base_url, mode=server_mode)
        vocab_note = _fit_vocab(gen, info, workload)
        await _warm_up(gen, workload, progress, prompt_start)
        sizing = await _size_chat(gen, workload)
        asked = _Asked(progress, details, scrape_metrics, slo, client_processes)
        result = SweepResult(config=config_name, server=facts, workload=workload)
        start = prompt_start
        for c in levels:
            # each level takes fresh prompts: nothing it sends is in any prefix cache
            plan = _plan(workload, c, start, sizing)
            start += plan.ordinals
            level = await _measure_level(
                gen, c, workload, plan, facts.max_running_requests, sizing, asked
            )
            if vocab_note:
                level.notes.append(vocab_note)
            result.levels.append(level)
    return result


async def run_level_async(
    url: str,
    concurrency: int,
    workload: Workload | None = None,
    *,
    api_key: str | None = None,
    progress: ProgressCallback | None = None,
    details: bool = False,
    scrape_metrics: bool = False,
    warmup: bool = True,
    slo: Slo | None = None,
    prompt_start: int = 0,
    client_processes: int = 1,
) -> LevelResult:
    """One level (flush -> run -> server_info), with its own client, in the running loop.

    Its prompts are ordinals ``prompt_start ..``: a caller measuring a server again passes the
    count it has sent so far, so no request can hit the prefix cache.
    """
    validate_levels([concurrency])
    workload = workload or Workload()
    async with _load_generator(url, workload, api_key) as gen:
        info = await get_server_info(gen.http)
        vocab_note = _fit_vocab(gen, info, workload)
        first_ms = await _warm_up(gen, workload, progress, prompt_start) if warmup else None
        sizing = await _size_chat(gen, workload)
        asked = _Asked(progress, details, scrape_metrics, slo, client_processes)
        plan = _plan(workload, concurrency, prompt_start, sizing)
        cap = effective_running_cap(info or {})
        level = await _measure_level(gen, concurrency, workload, plan, cap, sizing, asked)
        level.first_request_ms = first_ms
        if vocab_note:
            level.notes.append(vocab_note)
        return level


def run_in_own_loop(factory: Callable[[], Awaitable[T]], timeout_s: float) -> T:
    """Run a coroutine in a fresh event loop (uvloop if installed) on a dedicated thread.

    Works whether or not the caller already has a running loop. Waits at most ``timeout_s``.
    """
    box: dict[str, object] = {}

    def target() -> None:
        try:
            with asyncio.Runner(loop_factory=new_loop) as runner:
                box["result"] = runner.run(factory())  # type: ignore[arg-type]
        except BaseException as e:  # handed to the caller's thread
            box["error"] = e

    th = threading.Thread(target=target, name="llmperf-loadgen", daemon=True)
    th.start()
    deadline = time.monotonic() + timeout_s
    while th.is_alive() and time.monotonic() < deadline:
        th.join(timeout=0.5)  # short joins keep Ctrl-C responsive in the caller's thread
    if th.is_alive():
        raise TimeoutError(f"load generator did not finish within {timeout_s:.0f}s")
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["result"]  # type: ignore[return-value]


def _blocking(coro_fn: Callable[P, Awaitable[T]], name: str) -> Callable[P, T]:
    """The blocking twin of a sweep coroutine: the same parameters (written once, on the
    coroutine), run in its own loop and thread, bounded by its workload's sweep deadline."""
    signature = inspect.signature(coro_fn)
    call: Callable[..., Awaitable[T]] = coro_fn

    def blocking(*args: P.args, **kwargs: P.kwargs) -> T:
        bound = signature.bind(*args, **kwargs)
        given = bound.arguments
        workload = given["workload"] = given.get("workload") or Workload()
        if "levels" in given:
            levels = given["levels"] = validate_levels(given["levels"])
        else:
            levels = validate_levels([given["concurrency"]])
        return run_in_own_loop(
            lambda: call(*bound.args, **bound.kwargs),
            timeout_s=sweep_deadline_s(workload, levels),
        )

    functools.update_wrapper(blocking, coro_fn)
    blocking.__name__ = blocking.__qualname__ = name
    blocking.__doc__ = (
        f"Blocking ``{coro_fn.__name__}`` in its own loop and thread (safe inside a running loop)."
    )
    return blocking


run_sweep = _blocking(run_sweep_async, "run_sweep")
run_level = _blocking(run_level_async, "run_level")


__all__ = [
    "Progress",
    "ProgressCallback",
    "ServerFacts",
    "SweepError",
    "run_level",
    "run_level_async",
    "run_sweep",
    "run_sweep_async",
    "validate_levels",
]
