"""One closed-loop level sharded over client processes, its numbers merged exactly.

One Python process ingests a bounded number of tokens per second (``ClientHealth`` says how
many, and how many processes a saturated level needs). Beyond that, shard ``k`` of ``k``
processes sends requests ``k, k + n, ...`` with its share of the concurrency, and the level is
computed from all records together: every stamp is ``time.perf_counter()``, which on Linux and
macOS reads the system-wide monotonic clock, so stamps from different processes on one machine
share a time base, and ``compute_level`` needs nothing but the records. All shards are started,
opened and ready before any sends (a start barrier), so the level's duration is not stretched
by process start-up.

A shard dies with the process that started it: on Linux the kernel SIGKILLs it when its parent
thread exits (``PR_SET_PDEATHSIG``, which also covers a SIGKILLed pytest and a shard blocked in
a send), and everywhere a thread watching the parent's sentinel pipe ends it. Ctrl-C is the
parent's to handle (shards ignore SIGINT); the parent waits for shards in short polls, so a
cancelled level kills its shards at once instead of waiting for the level's deadline.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import multiprocessing
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from pytest_llmperf.base.errors import LLMPerfError
from pytest_llmperf.base.results import ClientHealth
from pytest_llmperf.core.client import LoadGenerator
from pytest_llmperf.core.monitor import LoopMonitor
from pytest_llmperf.core.plan import LevelBodies, RequestPlan
from pytest_llmperf.core.records import RequestRecord

SHARD_READY_TIMEOUT_S = 120.0  # spawn + imports on a loaded machine
_POLL_S = 0.25  # the longest the parent blocks on a shard queue: what a Ctrl-C waits for
_PR_SET_PDEATHSIG = 1
_LIVE: set[multiprocessing.process.BaseProcess] = set()  # shards of this process, for atexit


def _die_with_parent() -> None:
    """In a shard: be killed when the parent dies, however it dies."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    parent = multiprocessing.parent_process()
    if parent is None:
        return
    if not parent.is_alive():  # it died before the prctl above took effect
        os._exit(1)

    def watch() -> None:
        parent.join()  # returns when the parent's end of the sentinel pipe closes
        os._exit(1)

    threading.Thread(target=watch, name="llmperf-shard-parent-watch", daemon=True).start()


def _kill_live_shards() -> None:
    for p in list(_LIVE):
        with contextlib.suppress(Exception):
            p.kill()
            p.join(timeout=2)
        _LIVE.discard(p)


atexit.register(_kill_live_shards)


def new_loop() -> asyncio.AbstractEventLoop:
    """The load generator's event loop: uvloop where installed, else asyncio's."""
    try:
        import uvloop
    except ImportError:  # optional: halves the client's CPU per event where available
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class ShardError(LLMPerfError, RuntimeError):
    """A client process could not start or did not report back."""


@dataclass(frozen=True)
class ShardSpec:
    """Everything one client process needs (picklable: it crosses a process boundary)."""

    base_url: str
    backend: str
    api_key: str | None = field(repr=False)  # never in a repr or a log
    model: str | None
    temperature: float
    extensions: bool
    request_timeout_s: float
    idle_timeout_s: float
    vocab_size: int | None
    output_len: int
    concurrency: int
    plan: RequestPlan  # the shard builds its own requests' bodies from it
    indices: list[int]


@dataclass
class ShardResult:
    records: list[RequestRecord]
    health: ClientHealth
    cpu_s: float


def shard_specs(
    processes: int, concurrency: int, requests: int, base: ShardSpec
) -> list[ShardSpec]:
    """Split a level: request i goes to shard i % k; C is split as evenly as it goes."""
    k = max(1, min(processes, concurrency, requests))
    specs = []
    for s in range(k):
        c = concurrency // k + (1 if s < concurrency % k else 0)
        specs.append(
            ShardSpec(**{**base.__dict__, "concurrency": c, "indices": list(range(s, requests, k))})
        )
    return specs


async def _shard_requests(
    gen: LoadGenerator, spec: ShardSpec, bodies: LevelBodies
) -> list[RequestRecord]:
    """Closed loop inside one shard: ``spec.concurrency`` workers over its request list."""
    records: list[RequestRecord] = []
    pos = 0
    n = len(spec.indices)

    async def worker() -> None:
        nonlocal pos
        while pos < n:  # bounded: each pass consumes one request
            i = spec.indices[pos]
            pos += 1
            body, tokens = bodies.take(i)
            records.append(
                await gen.request(i, "", spec.output_len, body=body, prompt_tokens=tokens)
            )

    await asyncio.gather(*(worker() for _ in range(min(spec.concurrency, n))))
    return records


def _shard_main(spec: ShardSpec, ready: queue.Queue[object], go: object, out: object) -> None:
    """A client process: open the generator, say ready, wait for go, measure, send records."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    async def main() -> ShardResult:
        async with LoadGenerator(
            spec.base_url,
            spec.backend,  # type: ignore[arg-type]
            api_key=spec.api_key,
            request_timeout_s=spec.request_timeout_s,
            idle_timeout_s=spec.idle_timeout_s,
            model=spec.model,
            temperature=spec.temperature,
            extensions=spec.extensions,
        ) as gen:
            gen.vocab_size = spec.vocab_size
            bodies = LevelBodies(spec.plan, gen.body, spec.indices)  # before the barrier
            ready.put(None)
            await asyncio.to_thread(go.wait, SHARD_READY_TIMEOUT_S)  # type: ignore[attr-defined]
            monitor = LoopMonitor()
            monitor.start()
            records = await _shard_requests(gen, spec, bodies)
            health = await monitor.stop()
            return ShardResult(records, health, monitor.cpu_s)

    try:
        with asyncio.Runner(loop_factory=new_loop) as runner:
            out.put(runner.run(main()))  # type: ignore[attr-defined]
    except BaseException as e:
        ready.put(e)  # a shard that failed before ready still answers the barrier
        out.put(ShardError(f"client process failed: {type(e).__name__}: {e}"))  # type: ignore[attr-defined]


def merge_health(results: Sequence[ShardResult]) -> ClientHealth:
    """One level's health from its shards: the worst shard decides, CPU is per process."""
    hs = [r.health for r in results]
    reasons = [h.reason for h in hs if h.reason]
    return ClientHealth(
        transport=f"{hs[0].transport} x{len(hs)} processes",
        cpu_percent=max(h.cpu_percent for h in hs),
        loop_lag_p99_ms=max(h.loop_lag_p99_ms for h in hs),
        loop_lag_max_ms=max(h.loop_lag_max_ms for h in hs),
        loop_lag_samples=sum(h.loop_lag_samples for h in hs),
        saturated=any(h.saturated for h in hs),
        reason="; ".join(dict.fromkeys(reasons)) or None,
        system_cpu_percent=_most(h.system_cpu_percent for h in hs),
        steal_percent=_most(h.steal_percent for h in hs),
        cpus=next((h.cpus for h in hs if h.cpus), None),
    )


def _most(values: Iterable[float | None]) -> float | None:
    """The largest of the shards' machine-wide figures (each saw the whole machine)."""
    known = [v for v in values if v is not None]
    return max(known) if known else None


async def _get(
    q: multiprocessing.Queue[object],
    timeout_s: float,
    late: str,
    procs: Sequence[multiprocessing.process.BaseProcess],
) -> object:
    """The shards' next message, waited for off the loop in short polls; ``late`` is the error
    after ``timeout_s``. A shard that exited without a message is an error at once."""
    end = time.monotonic() + timeout_s
    for _ in range(int(timeout_s / _POLL_S) + 2):  # bounded by the timeout
        try:
            return await asyncio.to_thread(q.get, True, min(_POLL_S, timeout_s))
        except queue.Empty:
            pass
        dead = [p for p in procs if p.exitcode not in (None, 0)]
        if dead:
            codes = ", ".join(f"pid {p.pid} exit {p.exitcode}" for p in dead)
            raise ShardError(f"client process exited without reporting ({codes})")
        if time.monotonic() >= end:
            break
    raise ShardError(late)


async def run_sharded(specs: Sequence[ShardSpec], deadline_s: float) -> list[ShardResult]:
    """Start one process per spec, release them together, collect their records."""
    ctx = multiprocessing.get_context("spawn")  # no fork of a running event loop
    ready: multiprocessing.Queue[object] = ctx.Queue()
    out: multiprocessing.Queue[object] = ctx.Queue()
    go = ctx.Event()
    procs = [ctx.Process(target=_shard_main, args=(s, ready, go, out), daemon=True) for s in specs]
    done = False
    try:
        for p in procs:
            p.start()
            _LIVE.add(p)
        for _ in procs:
            late = f"client processes were not ready within {SHARD_READY_TIMEOUT_S:.0f}s"
            msg = await _get(ready, SHARD_READY_TIMEOUT_S, late, procs)
            if isinstance(msg, BaseException):
                raise ShardError(f"a client process failed to start: {msg!r}")
        go.set()
        end = time.monotonic() + deadline_s
        results: list[ShardResult] = []
        for _ in procs:
            late = f"client processes did not report within {deadline_s:.0f}s"
            res = await _get(out, max(1.0, end - time.monotonic()), late, procs)
            if isinstance(res, BaseException):
                raise res
            if not isinstance(res, ShardResult):
                raise ShardError(f"a client process sent {type(res).__name__}, not its records")
            results.append(res)
        done = True
        return results
    finally:
        # Reported shards are exiting on their own; any other way out (error, Ctrl-C,
        # cancellation) stops them now, not after their requests finish.
        for p in procs:
            if done:
                p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
            _LIVE.discard(p)


async def sharded_closed_loop(
    gen: LoadGenerator,
    processes: int,
    concurrency: int,
    plan: RequestPlan,
    on_record: Callable[[RequestRecord], None],
    deadline_s: float,
) -> tuple[list[RequestRecord | None], ClientHealth, float]:
    """A closed-loop level over ``processes`` client processes configured like ``gen``: the
    records by request index, the merged health, and the shards' CPU seconds together."""
    base = ShardSpec(
        base_url=gen.base_url,
        backend=gen.backend,
        api_key=gen.api_key,
        model=gen.model,
        temperature=gen.temperature,
        extensions=gen.extensions,
        request_timeout_s=gen.request_timeout_s,
        idle_timeout_s=gen.idle_timeout_s,
        vocab_size=gen.vocab_size,
        output_len=plan.workload.output_len,
        concurrency=concurrency,
        plan=plan,
        indices=[],
    )
    results = await run_sharded(shard_specs(processes, concurrency, len(plan), base), deadline_s)
    records: list[RequestRecord | None] = [None] * len(plan)
    for res in results:
        for rec in res.records:
            records[rec.index] = rec
            on_record(rec)
    return records, merge_health(results), sum(r.cpu_s for r in results)
