"""The simulator's server core: the engine bridge, stream serving, faults and lifecycle.

The engine (``engine_api.Engine``) owns time and pushes ``TokenEvent``s; ``SimServer`` turns
each event into bytes queued on its ``Stream`` (encoders in ``wire.py``) and writes them to the
socket as they come. The HTTP routes live in ``http_api.py`` (info endpoints) and
``generation.py`` (the generation endpoints); the process main in ``main.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web

from pytest_llmperf.sim.app import build_app
from pytest_llmperf.sim.bodies import Prompt, RequestError
from pytest_llmperf.sim.engine_api import Engine, SimRequest, TokenEvent
from pytest_llmperf.sim.faults import Faults
from pytest_llmperf.sim.keepalive import KeepAlivePolicy
from pytest_llmperf.sim.knobs import ServerKnobs
from pytest_llmperf.sim.logfmt import get_logger
from pytest_llmperf.sim.prefix_cache import PrefixCache
from pytest_llmperf.sim.prom import SglangMetrics, VllmMetrics
from pytest_llmperf.sim.vllm_wire import vllm_event, vllm_stream_tail
from pytest_llmperf.sim.wire import (
    DONE,
    NATIVE,
    SSE_HEADERS,
    Gen,
    Stream,
    native_event,
    openai_event,
    stream_tail,
)

READY_LINE = "The server is fired up and ready to roll!"
WARMUP_TEXT = "The capital city of France is"
WRITE_TIMES_LIMIT = 100_000  # requests whose first/last write times /_sim/ground_truth keeps


class SimServer:
    """SGLang's HTTP API over an ``Engine``. Use ``start()``/``stop()`` or ``run_main()``."""

    def __init__(
        self,
        knobs: ServerKnobs,
        *,
        faults: Faults | None = None,
        engine: Engine | None = None,
        startup_lines: list[str] | None = None,
        trust_remote_code: bool = False,
        unknown_args: tuple[str, ...] = (),
        exit_process: Callable[[int], None] | None = None,
    ) -> None:
        self.knobs = knobs
        self.faults = faults or Faults()
        self.log = get_logger()
        self.trust_remote_code = trust_remote_code
        self.unknown_args = unknown_args or knobs.unknown_args
        # Abrupt exit for crash faults; tests replace it to observe the crash in-process.
        self._exit_process = exit_process or os._exit
        if engine is None:
            from pytest_llmperf.sim.engine import create_engine

            # The engine prints SGLang's Prefill/Decode batch lines through our logger.
            engine, startup_lines = create_engine(knobs, on_log=get_logger().info)
        self.engine: Engine = engine
        self.startup_lines = list(startup_lines or [])
        self.spec_algorithm = knobs.speculative_algorithm
        if self.spec_algorithm == "NEXTN":
            self.spec_algorithm = "EAGLE"  # SGLang rewrites NEXTN to EAGLE
        self.spec_on = self.spec_algorithm is not None
        m = getattr(engine, "model", None)
        spec_params = getattr(m, "spec", None)
        self.spec_draft_tokens = (
            spec_params.num_draft_tokens
            if spec_params is not None
            else knobs.speculative_num_draft_tokens or 4
        )
        self.served_model_name = knobs.served_model_name or knobs.model_path
        self.cuda_visible_devices = os.environ.get("CUDA_VISIBLE_DEVICES")
        self.ready = False
        self.hung = False  # hang-stream fault has fired
        self.crashing = False
        self.tokens_served = 0
        self.requests_started = 0
        self.requests_finished = 0
        self.requests_aborted = 0
        self.fault_log: list[str] = []
        self.streams: set[Stream] = set()
        # rid -> [first, last] perf_counter() time its token events were handed to the socket:
        # the truth a client's TTFT is compared with (the engine's step ends exclude the front)
        self.write_times: dict[str, list[float | None]] = {}
        self.cached_by_rid: dict[str, int] = {}  # prefix-cache hits, for the ground truth
        self._engine_task: asyncio.Task[None] | None = None
        self._runner: web.AppRunner | None = None
        self.port: int = knobs.port
        self.api = knobs.sim_api
        self.metrics: SglangMetrics | VllmMetrics | None = None
        if self.api == "vllm":
            self.metrics = VllmMetrics(self)  # vLLM always serves /metrics
        elif knobs.enable_metrics:
            self.metrics = SglangMetrics(self)
        self.prefix_cache: PrefixCache | None = None
        if not knobs.disable_radix_cache:
            self.prefix_cache = PrefixCache(engine.stats().max_total_num_tokens)
        self.keepalive = KeepAlivePolicy(
            knobs.sim_keepalive_timeout, knobs.sim_keepalive_max_requests
        )
        self.app = build_app(self)
        self.keepalive.install(self.app)

    # ------------------------------------------------------------ lifecycle
    async def start(self, *, host: str | None = None, port: int | None = None) -> None:
        """Bind, start the engine and warm up. Raises OSError if the port is taken."""
        host = host if host is not None else self.knobs.host
        port = port if port is not None else self.knobs.port
        self._engine_task = asyncio.get_running_loop().create_task(self.engine.run())
        self._runner = web.AppRunner(
            self.app,
            handler_cancellation=True,
            access_log=None,
            shutdown_timeout=0.5,
            **self.keepalive.runner_kwargs(),
        )
        await self._runner.setup()
        try:
            # Bind here, not in TCPSite: under uvloop a port another process listens on made
            # site.start() fail with an AttributeError, which the launcher could not tell
            # from a crash; bind() raises EADDRINUSE ("Address already in use"), and the
            # launcher retries on another port.
            sock = _listening_socket(host, port)
            site = web.SockSite(self._runner, sock)
            await site.start()
        except OSError:
            await self.stop()
            raise
        addrs = self._runner.addresses
        if addrs:
            self.port = int(addrs[0][1])
        self.log.info(f"Started server process [{os.getpid()}]")
        self.log.info("Waiting for application startup.")
        self.log.info("Application startup complete.")
        self.log.info(f"Uvicorn running on http://{host}:{self.port} (Press CTRL+C to quit)")
        asyncio.get_running_loop().create_task(self._warmup())

    async def stop(self) -> None:
        """Close connections and stop the engine; bounded so SIGTERM exits fast."""
        for st in list(self.streams):
            st.closed = True
            st.wake()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()
        if self._engine_task is not None:
            task, self._engine_task = self._engine_task, None
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _warmup(self) -> None:
        """SGLang's warmup: one short generate before 'ready'; skipped with --skip-server-warmup."""
        if self.faults.hang_on_start:
            self.log.info("Simulated fault hang-on-start: warmup will never finish.")
            return
        if not self.knobs.skip_server_warmup:
            st = Stream(self, NATIVE, False, internal=True)
            try:
                self.add_gen(st, self.new_rid(), Prompt.from_text(WARMUP_TEXT), 8, False)
                await self.wait_done(st)
            except Exception as e:  # a broken engine must show in the log, like SGLang
                self.log.error(f"Initialization failed. warmup error: {e!r}")
                self._exit_process(1)
                return
        self.ready = True
        self.log.info(READY_LINE)

    # --------------------------------------------------------------- engine
    def new_rid(self) -> str:
        return uuid.uuid4().hex

    def add_gen(
        self,
        st: Stream,
        rid: str,
        prompt: Prompt,
        max_new: int,
        ignore_eos: bool,
        stream_interval: int = 0,
    ) -> Gen:
        prompt_len = prompt.length
        cached = 0
        if self.prefix_cache is not None and not st.internal:
            cached = self.prefix_cache.match_and_insert(prompt.tokens)
            if self.metrics is not None:
                self.metrics.on_cached(cached, prompt_len)
        gen = Gen(st, len(st.gens), rid, prompt_len, max_new, cached)
        gen.prompt_tokens = prompt.tokens
        if not st.internal:
            self.cached_by_rid[rid] = cached
            if len(self.cached_by_rid) > WRITE_TIMES_LIMIT:
                del self.cached_by_rid[next(iter(self.cached_by_rid))]
        st.gens.append(gen)
        if not st.internal:
            self.requests_started += 1
        self.engine.submit(
            SimRequest(
                rid=rid,
                prompt_len=prompt_len,
                max_new_tokens=max_new,
                on_event=gen.on_event,
                ignore_eos=ignore_eos,
                cached_tokens=cached,
                stream=st.streaming,
                stream_interval=stream_interval,
            )
        )
        return gen

    async def wait_done(self, st: Stream) -> None:
        while st.n_done < len(st.gens):
            st.waiter = asyncio.get_running_loop().create_future()
            await st.waiter
            st.waiter = None

    def abort_unfinished(self, st: Stream) -> None:
        for gen in st.gens:
            if not gen.finished:
                gen.finished = True
                self.requests_aborted += 1
                if self.metrics is not None:
                    self.metrics.aborted.inc()
                self.engine.abort(gen.rid)

    def on_token_event(self, gen: Gen, ev: TokenEvent) -> None:
        """The hot path: one engine event -> bytes queued for one stream."""
        if gen.finished:
            return
        st = gen.stream
        if ev.n_new == 0 and gen.n == 0 and ev.finished:
            # Refused before any token (e.g. too long for the KV cache): SGLang answers 400.
            reason = ev.finish_reason or {}
            gen.finished = True
            st.reject = str(reason.get("message", "Request aborted"))
            self.requests_aborted += not st.internal
            self.abort_unfinished(st)
            st.n_done = len(st.gens)
            st.closed = True
            st.wake()
            return
        now = time.perf_counter()
        if not st.internal and (self.faults.any_token_threshold or self.hung):
            if self._fault_hits(st):
                return
            self.tokens_served += ev.n_new
        elif not st.internal:
            self.tokens_served += ev.n_new

        start = gen.n
        stop = ev.completion_tokens if ev.completion_tokens >= start else start + ev.n_new
        gen.n = stop
        gen.spec_verify_ct = ev.spec_verify_ct
        metrics = self.metrics
        if start == 0 and stop > 0:
            gen.t_first = now
            if metrics is not None and not st.internal:
                metrics.ttft.observe(now - gen.t_start)
        elif metrics is not None and stop > start and not st.internal:
            metrics.itl.observe((now - gen.t_last) / (stop - start))
        gen.t_last = now
        if ev.finished:
            gen.finished = True
            gen.finish_reason = ev.finish_reason or {"type": "length", "length": stop}
            st.n_done += 1
            if not st.internal:
                self.requests_finished += 1
                if metrics is not None:
                    metrics.on_finish(gen)

        if st.streaming:
            if st.kind == NATIVE:
                native_event(st, gen, start, stop, ev.finished)
                if self._count_down_due(st, stop, ev.finished):
                    native_event(st, gen, stop, stop - 1, False)  # no new text, count one lower
            elif st.vllm:
                vllm_event(st, gen, start, stop, ev.finished)
            else:
                openai_event(st, gen, start, stop, ev.finished)
            if (start == 0 and stop > 0) or ev.finished:
                st.to_stamp.append(gen)
            if st.n_done == len(st.gens):
                vllm_stream_tail(st) if st.vllm else stream_tail(st)
            st.wake()
        elif st.n_done == len(st.gens):
            st.wake()

    def _fault_hits(self, st: Stream) -> bool:
        """Apply token-threshold faults; True if this event must not be delivered normally."""
        f = self.faults
        n = self.tokens_served
        if f.crash_after_tokens is not None and n >= f.crash_after_tokens:
            if not self.crashing:
                self.crashing = True
                self.log.error(
                    "Scheduler hit an exception: RuntimeError: CUDA error: an illegal memory "
                    f"access was encountered (simulated: --sim-fault crash-after-tokens="
                    f"{f.crash_after_tokens}, {n} tokens served)"
                )
                self._exit_process(1)
            return True
        if self.hung or (
            f.hang_stream_after_tokens is not None and n >= f.hang_stream_after_tokens
        ):
            if not self.hung:
                self.hung = True
                self._note_fault(f"hang-stream-after-tokens={f.hang_stream_after_tokens}")
            return True
        if f.cut_stream_after_tokens is not None and n >= f.cut_stream_after_tokens:
            if not st.cut:
                self._note_fault(f"cut-stream-after-tokens={f.cut_stream_after_tokens}")
                st.cut = True
                self.abort_unfinished(st)
                if not st.streaming:
                    st.n_done = len(st.gens)
                st.wake()
            return True
        if f.stream_error_after_tokens is not None and n >= f.stream_error_after_tokens:
            if not st.closed:
                self._note_fault(f"stream-error-after-tokens={f.stream_error_after_tokens}")
                msg = (
                    "Simulated engine error after "
                    f"{n} tokens (--sim-fault stream-error-after-tokens="
                    f"{f.stream_error_after_tokens})"
                )
                self.abort_unfinished(st)
                if st.kind == NATIVE:
                    err: dict[str, Any] = {"error": {"message": msg}}
                else:
                    err = {
                        "error": {
                            "object": "error",
                            "message": msg,
                            "type": "InternalServerError",
                            "param": None,
                            "code": 500,
                        }
                    }
                st.pending.append(b"data: " + orjson.dumps(err) + b"\n\n")
                st.pending.append(DONE)
                st.closed = True
                st.n_done = len(st.gens)
                st.error = msg
                st.wake()
            return True
        return False

    def _count_down_due(self, st: Stream, stop: int, finished: bool) -> bool:
        """Whether this stream now gets its one event with a lower count (the fault)."""
        f = self.faults
        due = (
            f.count_down_after_tokens is not None
            and self.tokens_served >= f.count_down_after_tokens
            and not (st.internal or st.counted_down or finished)
            and stop > 1
        )
        if due:
            st.counted_down = True
            self._note_fault(f"count-down-after-tokens={f.count_down_after_tokens}")
        return due

    def _note_fault(self, what: str) -> None:
        if what not in self.fault_log:
            self.fault_log.append(what)
            self.log.error(f"Simulated fault fired: {what} ({self.tokens_served} tokens served)")

    def context_len(self) -> int | None:
        v = getattr(getattr(self.engine, "model", None), "context_len", None)
        if isinstance(v, int):
            return v
        return self.knobs.context_length

    def server_counters(self) -> dict[str, Any]:
        return {
            "ready": self.ready,
            "tokens_served": self.tokens_served,
            "requests_started": self.requests_started,
            "requests_finished": self.requests_finished,
            "requests_aborted": self.requests_aborted,
            "open_streams": len(self.streams),
            "faults": self.faults.describe(),
            "faults_fired": list(self.fault_log),
        }

    def check_lengths(self, prompts: Prompt | list[Prompt], max_new: int) -> int:
        """Refuse a prompt the context cannot hold; the max_new_tokens to generate. With
        ``--allow-auto-truncate`` SGLang's tokenizer manager cuts it to ``context_len - input``;
        its scheduler then caps every request at ``max_req_len - input - 1`` with
        ``max_req_len = context_len - 1`` (0.5.23 ``init_req_max_new_tokens``; its KV-pool
        bound is left out here). At least one token, where SGLang would allow 0."""
        ctx = self.context_len()
        if not ctx:
            return max_new
        plist = prompts if isinstance(prompts, list) else [prompts]
        longest = max((p.length for p in plist), default=0)
        if self.knobs.allow_auto_truncate:
            max_new = min(max_new, ctx - longest)
        max_new = max(1, min(max_new, ctx - longest - 2))
        for prompt in plist:
            plen = prompt.length
            if plen >= ctx:
                raise RequestError(
                    f"The input ({plen} tokens) is longer than the model's context length "
                    f"({ctx} tokens)."
                )
        return max_new

    async def serve_wait(self, request: web.Request, st: Stream) -> None:
        """Non-streaming: wait for all sequences; abort them if the client goes away."""
        self.streams.add(st)
        try:
            await self.wait_done(st)
            if st.cut:
                # Fault: drop the connection without any response.
                if request.transport is not None:
                    request.transport.abort()
                raise asyncio.CancelledError
        finally:
            self.streams.discard(st)
            self.abort_unfinished(st)

    def _note_writes(self, gens: list[Gen]) -> None:
        """Record when first/last token events go to the socket: just before the write, so a
        client on this host (same monotonic clock) can never have seen them earlier."""
        t = time.perf_counter()
        times = self.write_times
        for gen in gens:
            rec = times.get(gen.rid)
            if rec is None:
                rec = times[gen.rid] = [t, None]
                if len(times) > WRITE_TIMES_LIMIT:
                    del times[next(iter(times))]
            if gen.finished:
                rec[1] = t

    async def serve_stream(self, request: web.Request, st: Stream) -> web.StreamResponse:
        """Write queued events as they come; headers go out with the first event, as in SGLang."""
        resp = web.StreamResponse(status=200, headers=SSE_HEADERS)
        loop = asyncio.get_running_loop()
        self.streams.add(st)
        try:
            while True:
                pending = st.pending
                if pending:
                    st.pending = []
                    stamp = st.to_stamp
                    if stamp:
                        st.to_stamp = []
                    data = pending[0] if len(pending) == 1 else b"".join(pending)
                    try:
                        if not resp.prepared:
                            await resp.prepare(request)
                        if stamp:
                            self._note_writes(stamp)
                        await resp.write(data)
                    except ConnectionResetError:
                        break  # the client went away; finally aborts the engine request
                    continue
                if st.cut:
                    # Fault: drop the connection mid-stream, no terminating chunk or [DONE].
                    if not resp.prepared:
                        await resp.prepare(request)
                    if request.transport is not None:
                        request.transport.abort()
                    raise asyncio.CancelledError
                if st.closed:
                    break
                st.waiter = loop.create_future()
                await st.waiter
                st.waiter = None
            if resp.prepared and not st.pending and st.closed:
                with contextlib.suppress(ConnectionResetError):
                    await resp.write_eof()
        finally:
            self.streams.discard(st)
            self.abort_unfinished(st)
        return resp


def _listening_socket(host: str, port: int) -> socket.socket:
    """A bound, listening TCP socket (SO_REUSEADDR, as asyncio's create_server sets it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(1024)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock
