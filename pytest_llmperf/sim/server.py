"""The simulator's HTTP front: SGLang's endpoints, stream formats, auth, metrics and faults.

The engine (``engine_api.Engine``) owns time and pushes ``TokenEvent``s; this module turns each
event into one SSE event on the wire, byte-for-byte in SGLang's layout. One process must serve
hundreds of streams at tens of thousands of tokens per second on one core, so the hot path
(``_Gen.on_event``) builds events from prebuilt byte pieces and keeps the cumulative text and
ids of ``/generate`` as growing byte buffers instead of re-serialising them per event.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web

from pytest_llmperf.sim.args import SimArgs
from pytest_llmperf.sim.engine_api import Engine, SimRequest, TokenEvent
from pytest_llmperf.sim.faults import Faults
from pytest_llmperf.sim.knobs import ServerKnobs
from pytest_llmperf.sim.logfmt import get_logger

# A plausible SGLang release; /server_info also says "simulated": true so nobody is fooled.
SGLANG_VERSION = "0.5.9"
READY_LINE = "The server is fired up and ready to roll!"
SPEC_CAP_WARNING = (
    "Max running requests is reset to 48 for speculative decoding. You can override this "
    "by explicitly setting --max-running-requests."
)
FLUSH_TEXT = (
    "Cache flushed.\nPlease check backend logs for more details. (When there are running or "
    "waiting requests, the operation will not be performed.)\n"
)
OOM_LINE = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
WARMUP_TEXT = "The capital city of France is"

# Deterministic "tokens": a small cyclic vocabulary. Each entry's JSON-escaped text and id
# bytes are prebuilt so an SSE event is a concatenation of ready-made pieces.
_WORDS = (
    " the quick brown fox jumps over a lazy dog and then runs far into the green"
    " forest where many small birds sing songs about sun rain wind snow river stone"
    " light dark night day time space star moon earth fire water air tree leaf root"
).split(" ")[1:]
VOCAB_TEXT: tuple[str, ...] = tuple(" " + w for w in _WORDS)
VOCAB_IDS: tuple[int, ...] = tuple(1000 + 37 * k for k in range(len(VOCAB_TEXT)))
_V = len(VOCAB_TEXT)
_TEXT_JSON: tuple[bytes, ...] = tuple(orjson.dumps(t)[1:-1] for t in VOCAB_TEXT)
_ID_BYTES: tuple[bytes, ...] = tuple(str(i).encode() for i in VOCAB_IDS)
_ID_BYTES_COMMA: tuple[bytes, ...] = tuple(b"," + b for b in _ID_BYTES)

DONE = b"data: [DONE]\n\n"
SSE_HEADERS = {"Content-Type": "text/event-stream"}
WRITE_TIMES_LIMIT = 100_000  # requests whose first/last write times /_sim/ground_truth keeps
_NATIVE, _COMPLETIONS, _CHAT = 0, 1, 2


def token_text(start: int, stop: int) -> str:
    """The generated text for output tokens [start, stop) of any request."""
    return "".join(VOCAB_TEXT[i % _V] for i in range(start, stop))


def _text_json(start: int, stop: int) -> bytes:
    return b"".join([_TEXT_JSON[i % _V] for i in range(start, stop)])


def count_prompt_words(text: str) -> int:
    """A rough prompt length for text prompts: whitespace-separated words (at least 1)."""
    return max(1, len(text.split()))


class RequestError(Exception):
    """A client error answered as HTTP 400 (SGLang's ValueError path)."""


@dataclasses.dataclass
class _Usage:
    prompt: int
    completion: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt,
            "total_tokens": self.prompt + self.completion,
            "completion_tokens": self.completion,
            "prompt_tokens_details": None,
            "reasoning_tokens": 0,
        }


class _Gen:
    """One generated sequence: its engine request and its growing output."""

    __slots__ = (
        "stream",
        "index",
        "rid",
        "prompt_len",
        "max_new",
        "n",
        "text_json",
        "ids_json",
        "finished",
        "finish_reason",
        "spec_verify_ct",
        "t_start",
        "t_first",
        "t_last",
        "meta_head",
        "meta_tail",
        "internal",
    )

    def __init__(
        self, stream: _Stream, index: int, rid: str, prompt_len: int, max_new: int
    ) -> None:
        self.stream = stream
        self.index = index
        self.rid = rid
        self.prompt_len = prompt_len
        self.max_new = max_new
        self.n = 0
        self.text_json = bytearray()
        self.ids_json = bytearray()
        self.finished = False
        self.finish_reason: dict[str, Any] | None = None
        self.spec_verify_ct = 0
        self.t_start = time.perf_counter()
        self.t_first = 0.0
        self.t_last = 0.0
        self.meta_head = (
            b'{"id":'
            + orjson.dumps(rid)
            + b',"finish_reason":null,"prompt_tokens":'
            + str(prompt_len).encode()
            + b',"weight_version":"default","total_retractions":0,"completion_tokens":'
        )
        self.meta_tail = b',"cached_tokens":0}'
        self.internal = stream.internal

    def on_event(self, ev: TokenEvent) -> None:
        self.stream.server._on_event(self, ev)

    def final_meta(self) -> dict[str, Any]:
        """meta_info of the last chunk: adds e2e_latency and, with spec decoding, accept stats."""
        meta: dict[str, Any] = {
            "id": self.rid,
            "finish_reason": self.finish_reason,
            "prompt_tokens": self.prompt_len,
            "weight_version": "default",
            "total_retractions": 0,
            "completion_tokens": self.n,
            "cached_tokens": 0,
            "e2e_latency": self.t_last - self.t_start,
        }
        server = self.stream.server
        if server.spec_on and self.spec_verify_ct > 0:
            draft = server.spec_draft_tokens
            meta["spec_verify_ct"] = self.spec_verify_ct
            meta["spec_accept_length"] = self.n / self.spec_verify_ct
            accepted = max(0, self.n - self.spec_verify_ct)
            proposed = self.spec_verify_ct * max(1, draft - 1)
            meta["spec_accept_rate"] = accepted / proposed
            meta["spec_accept_token_num"] = accepted
            meta["spec_draft_token_num"] = proposed
        return meta

    def native_dict(self) -> dict[str, Any]:
        return {
            "text": token_text(0, self.n),
            "output_ids": [VOCAB_IDS[i % _V] for i in range(self.n)],
            "meta_info": self.final_meta(),
        }


class _Stream:
    """One HTTP request: one or more ``_Gen``s and the bytes waiting to be written."""

    def __init__(
        self,
        server: SimServer,
        kind: int,
        streaming: bool,
        *,
        model: str = "default",
        include_usage: bool = False,
        continuous_usage: bool = False,
        batch: bool = False,
        internal: bool = False,
    ) -> None:
        self.server = server
        self.kind = kind
        self.streaming = streaming
        self.model = model
        self.include_usage = include_usage
        self.continuous_usage = continuous_usage
        self.batch = batch
        self.internal = internal
        self.gens: list[_Gen] = []
        self.pending: list[bytes] = []
        self.waiter: asyncio.Future[None] | None = None
        self.n_done = 0
        self.closed = False  # everything, [DONE] included, is queued
        self.cut = False  # fault: close the connection after writing what is queued
        self.created = int(time.time())
        self.oai_id = ""
        self.oai_head = b""
        self.oai_tail_open = b""
        self.role_sent = False
        self.error: str | None = None  # fault: the message sent inside the stream
        self.reject: str | None = None  # the engine refused a request before any token
        self.to_stamp: list[_Gen] = []  # first/last token events queued, not yet written

    def wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    def prepare_openai(self) -> None:
        """Prebuild the constant head/tail bytes of this stream's OpenAI chunks."""
        prefix = "chatcmpl-" if self.kind == _CHAT else "cmpl-"
        self.oai_id = prefix + uuid.uuid4().hex
        model = orjson.dumps(self.model)
        if self.kind == _COMPLETIONS:
            self.oai_head = (
                b'data: {"id":"'
                + self.oai_id.encode()
                + b'","object":"text_completion","created":'
                + str(self.created).encode()
                + b',"model":'
                + model
                + b',"choices":[{"index":0,"text":"'
            )
        else:
            self.oai_head = (
                b'data: {"id":"'
                + self.oai_id.encode()
                + b'","object":"chat.completion.chunk","created":'
                + str(self.created).encode()
                + b',"model":'
                + model
                + b',"choices":[{"index":0,"delta":{"role":null,"content":"'
            )

    def oai_chunk(self, choices: list[dict[str, Any]], usage: dict[str, Any] | None) -> bytes:
        obj = "chat.completion.chunk" if self.kind == _CHAT else "text_completion"
        chunk = {
            "id": self.oai_id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": choices,
            "usage": usage,
        }
        return b"data: " + orjson.dumps(chunk) + b"\n\n"


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
        self.streams: set[_Stream] = set()
        # rid -> [first, last] perf_counter() time its token events were handed to the socket:
        # the truth a client's TTFT is compared with (the engine's step ends exclude the front)
        self.write_times: dict[str, list[float | None]] = {}
        self._engine_task: asyncio.Task[None] | None = None
        self._runner: web.AppRunner | None = None
        self.port: int = knobs.port
        self.metrics = _Metrics(self) if knobs.enable_metrics else None
        self.app = self._build_app()

    # ------------------------------------------------------------------ app
    def _build_app(self) -> web.Application:
        middlewares = [self._errors_middleware]
        if self.knobs.api_key:
            middlewares.append(self._auth_middleware)
        app = web.Application(middlewares=middlewares, client_max_size=64 * 1024**2)
        r = app.router
        for path in ("/health", "/health_generate"):
            r.add_get(path, self.health)
        for path in ("/model_info", "/get_model_info"):
            r.add_get(path, self.model_info)
        for path in ("/server_info", "/get_server_info"):
            r.add_get(path, self.server_info)
        r.add_route("GET", "/flush_cache", self.flush_cache)
        r.add_route("POST", "/flush_cache", self.flush_cache)
        r.add_get("/v1/models", self.v1_models)
        r.add_route("POST", "/generate", self.generate)
        r.add_route("PUT", "/generate", self.generate)
        r.add_post("/v1/completions", self.v1_completions)
        r.add_post("/v1/chat/completions", self.v1_chat_completions)
        r.add_get("/ping", self.ping)
        if self.metrics is not None:
            r.add_get("/metrics", self.metrics_handler)
        r.add_get("/_sim/ground_truth", self.sim_ground_truth)
        r.add_get("/_sim/stats", self.sim_stats)
        return app

    @web.middleware
    async def _errors_middleware(
        self, request: web.Request, handler: Callable[[web.Request], Any]
    ) -> web.StreamResponse:
        """FastAPI's JSON 404/405 bodies, and the http-500 fault."""
        if self.faults.http_500 and (
            request.path == "/generate" or request.path.startswith("/v1/")
        ):
            return _json(
                {
                    "object": "error",
                    "message": "Internal Server Error (simulated: --sim-fault http-500)",
                    "type": "InternalServerError",
                    "param": None,
                    "code": 500,
                },
                status=500,
            )
        try:
            resp: web.StreamResponse = await handler(request)
            return resp
        except web.HTTPNotFound:
            return _json({"detail": "Not Found"}, status=404)
        except web.HTTPMethodNotAllowed:
            return _json({"detail": "Method Not Allowed"}, status=405)

    @web.middleware
    async def _auth_middleware(
        self, request: web.Request, handler: Callable[[web.Request], Any]
    ) -> web.StreamResponse:
        """SGLang's api-key check: Bearer (or x-api-key); /health*, /metrics, OPTIONS exempt."""
        path = request.path
        if (
            request.method == "OPTIONS"
            or path.startswith("/health")
            or path.startswith("/ready")
            or path.startswith("/metrics")
            or path.startswith("/_sim/")
        ):
            resp: web.StreamResponse = await handler(request)
            return resp
        key = self.knobs.api_key or ""
        ok = False
        authz = request.headers.get("Authorization")
        if authz:
            scheme, _, token = authz.partition(" ")
            ok = scheme.lower() == "bearer" and _const_eq(token, key)
        if not ok:
            x_key = request.headers.get("x-api-key")
            ok = bool(x_key) and _const_eq(x_key or "", key)
        if not ok:
            return _json({"error": "Unauthorized"}, status=401)
        resp = await handler(request)
        return resp

    # ------------------------------------------------------------ lifecycle
    async def start(self, *, host: str | None = None, port: int | None = None) -> None:
        """Bind, start the engine and warm up. Raises OSError if the port is taken."""
        host = host if host is not None else self.knobs.host
        port = port if port is not None else self.knobs.port
        self._engine_task = asyncio.get_running_loop().create_task(self.engine.run())
        self._runner = web.AppRunner(
            self.app, handler_cancellation=True, access_log=None, shutdown_timeout=0.5
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        try:
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
            st = _Stream(self, _NATIVE, False, internal=True)
            try:
                self._add_gen(st, self._new_rid(), count_prompt_words(WARMUP_TEXT), 8, False)
                await self._wait_done(st)
            except Exception as e:  # a broken engine must show in the log, like SGLang
                self.log.error(f"Initialization failed. warmup error: {e!r}")
                self._exit_process(1)
                return
        self.ready = True
        self.log.info(READY_LINE)

    # --------------------------------------------------------------- engine
    def _new_rid(self) -> str:
        return uuid.uuid4().hex

    def _add_gen(
        self, st: _Stream, rid: str, prompt_len: int, max_new: int, ignore_eos: bool
    ) -> _Gen:
        gen = _Gen(st, len(st.gens), rid, prompt_len, max_new)
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
            )
        )
        return gen

    async def _wait_done(self, st: _Stream) -> None:
        while st.n_done < len(st.gens):
            st.waiter = asyncio.get_running_loop().create_future()
            await st.waiter
            st.waiter = None

    def _abort_unfinished(self, st: _Stream) -> None:
        for gen in st.gens:
            if not gen.finished:
                gen.finished = True
                self.requests_aborted += 1
                if self.metrics is not None:
                    self.metrics.aborted.inc()
                self.engine.abort(gen.rid)

    def _on_event(self, gen: _Gen, ev: TokenEvent) -> None:
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
            self._abort_unfinished(st)
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
            if st.kind == _NATIVE:
                self._native_event(st, gen, start, stop, ev.finished)
            else:
                self._openai_event(st, gen, start, stop, ev.finished)
            if (start == 0 and stop > 0) or ev.finished:
                st.to_stamp.append(gen)
            if st.n_done == len(st.gens):
                self._stream_tail(st)
            st.wake()
        elif st.n_done == len(st.gens):
            st.wake()

    def _native_event(self, st: _Stream, gen: _Gen, start: int, stop: int, fin: bool) -> None:
        if stop > start:
            tj = gen.text_json
            ij = gen.ids_json
            for i in range(start, stop):
                k = i % _V
                tj += _TEXT_JSON[k]
                ij += _ID_BYTES_COMMA[k] if i else _ID_BYTES[k]
        if fin:
            meta = orjson.dumps(gen.final_meta())
        else:
            meta = gen.meta_head + str(stop).encode() + gen.meta_tail
        parts: list[bytes | bytearray] = [
            b'data: {"text":"',
            gen.text_json,
            b'","output_ids":[',
            gen.ids_json,
            b'],"meta_info":',
            meta,
        ]
        if st.batch:
            parts.append(b',"index":' + str(gen.index).encode())
        parts.append(b"}\n\n")
        st.pending.append(b"".join(parts))

    def _openai_event(self, st: _Stream, gen: _Gen, start: int, stop: int, fin: bool) -> None:
        usage = (
            orjson.dumps(_Usage(gen.prompt_len, stop).as_dict()) if st.continuous_usage else b"null"
        )
        if st.kind == _CHAT:
            if not st.role_sent:
                st.role_sent = True
                st.pending.append(
                    st.oai_chunk(
                        [
                            {
                                "index": 0,
                                "delta": {
                                    "role": "assistant",
                                    "content": "",
                                    "reasoning_content": None,
                                    "tool_calls": None,
                                },
                                "logprobs": None,
                                "finish_reason": None,
                                "matched_stop": None,
                            }
                        ],
                        _Usage(gen.prompt_len, 0).as_dict() if st.continuous_usage else None,
                    )
                )
            if stop > start:
                st.pending.append(
                    b"".join(
                        [
                            st.oai_head,
                            _text_json(start, stop),
                            b'","reasoning_content":null,"tool_calls":null},"logprobs":null,'
                            b'"finish_reason":null,"matched_stop":null}],"usage":',
                            usage,
                            b"}\n\n",
                        ]
                    )
                )
            if fin:
                reason = (gen.finish_reason or {}).get("type", "length")
                st.pending.append(
                    st.oai_chunk(
                        [
                            {
                                "index": 0,
                                "delta": {
                                    "role": None,
                                    "content": None,
                                    "reasoning_content": None,
                                    "tool_calls": None,
                                },
                                "logprobs": None,
                                "finish_reason": reason,
                                "matched_stop": (gen.finish_reason or {}).get("matched"),
                            }
                        ],
                        _Usage(gen.prompt_len, stop).as_dict() if st.continuous_usage else None,
                    )
                )
        else:
            if fin:
                fr = gen.finish_reason or {}
                tail = (
                    b'","logprobs":null,"finish_reason":'
                    + orjson.dumps(fr.get("type", "length"))
                    + b',"matched_stop":'
                    + orjson.dumps(fr.get("matched"))
                    + b'}],"usage":'
                )
            else:
                tail = b'","logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":'
            st.pending.append(
                b"".join([st.oai_head, _text_json(start, stop), tail, usage, b"}\n\n"])
            )

    def _stream_tail(self, st: _Stream) -> None:
        """After the last token: the usage chunk (OpenAI, if asked for) and [DONE]."""
        if st.kind != _NATIVE and st.include_usage:
            gen = st.gens[0]
            usage = _Usage(gen.prompt_len, gen.n).as_dict()
            if st.kind == _COMPLETIONS:
                # SGLang dumps this chunk with exclude_none=True
                usage.pop("prompt_tokens_details")
                chunk = {
                    "id": st.oai_id,
                    "object": "text_completion",
                    "created": st.created,
                    "model": st.model,
                    "choices": [],
                    "usage": usage,
                }
                st.pending.append(b"data: " + orjson.dumps(chunk) + b"\n\n")
            else:
                st.pending.append(st.oai_chunk([], usage))
        st.pending.append(DONE)
        st.closed = True

    def _fault_hits(self, st: _Stream) -> bool:
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
                self._abort_unfinished(st)
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
                self._abort_unfinished(st)
                if st.kind == _NATIVE:
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

    def _note_fault(self, what: str) -> None:
        if what not in self.fault_log:
            self.fault_log.append(what)
            self.log.error(f"Simulated fault fired: {what} ({self.tokens_served} tokens served)")

    # ------------------------------------------------------------ endpoints
    async def health(self, request: web.Request) -> web.Response:
        # SGLang answers 503 until warmup succeeded; a stalled engine makes its 1-token
        # health generate time out, which the hang fault mirrors with an immediate 503.
        if not self.ready or self.hung:
            return web.Response(status=503)
        return web.Response(status=200)

    async def ping(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def model_info(self, request: web.Request) -> web.Response:
        if request.path == "/get_model_info":
            self.log.warning(
                "Endpoint '/get_model_info' is deprecated and will be removed in a future "
                "version. Please use '/model_info' instead."
            )
        return _json(
            {
                "model_path": self.knobs.model_path,
                "tokenizer_path": self.knobs.model_path,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": "default",
                "has_image_understanding": False,
                "has_audio_understanding": False,
                "model_type": None,
                "architectures": self._architectures(),
                "served_model_name": self.served_model_name,
            }
        )

    def _architectures(self) -> list[str] | None:
        profile = getattr(getattr(self.engine, "model", None), "profile", None)
        arch = getattr(getattr(profile, "model", None), "architecture", None)
        return [arch] if isinstance(arch, str) else None

    def server_args(self) -> dict[str, Any]:
        """The flat server-args dict SGLang's /server_info starts with (a relevant subset)."""
        k = self.knobs
        args: dict[str, Any] = {
            "model_path": k.model_path,
            "tokenizer_path": k.model_path,
            "served_model_name": self.served_model_name,
            "trust_remote_code": self.trust_remote_code,
            "context_length": k.context_length,
            "host": k.host,
            "port": self.port,
            "mem_fraction_static": k.mem_fraction_static,
            "max_running_requests": k.max_running_requests,
            "max_total_tokens": k.max_total_tokens,
            "chunked_prefill_size": k.chunked_prefill_size,
            "device": "cuda",
            "tp_size": k.tp_size,
            "pp_size": 1,
            "dp_size": k.dp_size,
            "stream_interval": k.stream_interval,
            "stream_output": False,
            "random_seed": k.sim_seed,
            "base_gpu_id": 0,
            "gpu_id_step": 1,
            "log_level": k.log_level,
            "enable_metrics": k.enable_metrics,
            "decode_log_interval": k.decode_log_interval,
            "api_key": k.api_key,
            "speculative_algorithm": self.spec_algorithm,
            "speculative_draft_model_path": k.speculative_draft_model_path,
            "speculative_num_steps": k.speculative_num_steps,
            "speculative_eagle_topk": k.speculative_eagle_topk,
            "speculative_num_draft_tokens": k.speculative_num_draft_tokens,
            "cuda_graph_max_bs": k.cuda_graph_max_bs,
            "disable_cuda_graph": k.disable_cuda_graph,
            "skip_server_warmup": k.skip_server_warmup,
        }
        # The engine resolves "auto" values as SGLang's ServerArgs does (e.g. the 48 cap).
        m = getattr(self.engine, "model", None)
        if m is not None:
            args["tp_size"] = m.tp_size
            args["mem_fraction_static"] = m.mem_fraction_static
            args["chunked_prefill_size"] = m.chunked_prefill_size
            args["cuda_graph_max_bs"] = m.cuda_graph_max_bs
            spec = m.spec
            if spec is not None:
                args["speculative_num_steps"] = spec.num_steps
                args["speculative_eagle_topk"] = spec.eagle_topk
                args["speculative_num_draft_tokens"] = spec.num_draft_tokens
                if k.max_running_requests is None:
                    args["max_running_requests"] = 48
        return args

    def _context_len(self) -> int | None:
        v = getattr(getattr(self.engine, "model", None), "context_len", None)
        if isinstance(v, int):
            return v
        return self.knobs.context_length

    async def server_info(self, request: web.Request) -> web.Response:
        if request.path == "/get_server_info":
            self.log.warning(
                "Endpoint '/get_server_info' is deprecated and will be removed in a future "
                "version. Please use '/server_info' instead."
            )
        s = self.engine.stats()
        args = self.server_args()
        dp = max(1, self.knobs.dp_size)
        mem = {
            "weight": 0.0,
            "kvcache": 0.0,
            "token_capacity": s.max_total_num_tokens,
            "graph": 0.0,
        }
        mem_gb = getattr(getattr(self.engine, "model", None), "memory_gb", None)
        if isinstance(mem_gb, dict):
            mem.update({k: v for k, v in mem_gb.items() if k in ("weight", "kvcache", "graph")})
        states = []
        for _ in range(dp):
            state: dict[str, Any] = dict(args)
            state["last_gen_throughput"] = s.last_gen_throughput
            state["memory_usage"] = dict(mem)
            state["effective_max_running_requests_per_dp"] = max(
                1, s.effective_max_running_requests // dp
            )
            if self.spec_on and s.avg_spec_accept_length is not None:
                state["avg_spec_accept_length"] = s.avg_spec_accept_length
            states.append(state)
        ctx = self._context_len()
        max_req_input = min(ctx, s.max_total_num_tokens) - 1 if ctx else s.max_total_num_tokens - 1
        info: dict[str, Any] = {
            **args,
            "status": "ready",
            "max_total_num_tokens": s.max_total_num_tokens,
            "max_req_input_len": max_req_input,
            "internal_states": states,
            "version": SGLANG_VERSION,
            # Simulator-only fields: never present on a real SGLang server.
            "simulated": True,
            "sim_profile": self._profile_name(),
            "sim_cuda_visible_devices": self.cuda_visible_devices,
            "sim_faults": self.faults.describe(),
        }
        return _json(info)

    def _profile_name(self) -> str | None:
        profile = getattr(getattr(self.engine, "model", None), "profile", None)
        name = getattr(profile, "name", None)
        return name if isinstance(name, str) else self.knobs.sim_profile

    async def flush_cache(self, request: web.Request) -> web.Response:
        if self.engine.is_idle():
            self.engine.reset_metrics()
            self.log.info("Cache flushed successfully!")
            return web.Response(text=FLUSH_TEXT, status=200)
        s = self.engine.stats()
        self.log.warning(
            "Cache not flushed because there are pending requests. "
            f"#queue-req: {s.num_queued}, #running-req: {s.num_running}"
        )
        return web.Response(text=FLUSH_TEXT, status=400)

    async def v1_models(self, request: web.Request) -> web.Response:
        return _json(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.served_model_name,
                        "object": "model",
                        "created": int(time.time()),
                        "owned_by": "sglang",
                        "root": self.served_model_name,
                        "parent": None,
                        "max_model_len": self._context_len(),
                    }
                ],
            }
        )

    async def metrics_handler(self, request: web.Request) -> web.Response:
        assert self.metrics is not None
        body, ctype = self.metrics.render()
        return web.Response(body=body, headers={"Content-Type": ctype})

    async def sim_ground_truth(self, request: web.Request) -> web.Response:
        gt = dict(self.engine.ground_truth())
        fields = gt.get("fields")
        if isinstance(fields, list) and "rid" in fields:
            # the HTTP front's side: when the first and last token events were written
            i = fields.index("rid")
            none = (None, None)
            gt["fields"] = [*fields, "t_first_write", "t_last_write"]
            gt["requests"] = [[*row, *self.write_times.get(row[i], none)] for row in gt["requests"]]
        gt["server"] = self._server_counters()
        return _json(gt)

    async def sim_stats(self, request: web.Request) -> web.Response:
        s = self.engine.stats()
        return _json(
            {"engine": dataclasses.asdict(s), "server": self._server_counters()},
        )

    def _server_counters(self) -> dict[str, Any]:
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

    # ------------------------------------------------------------ generation
    async def generate(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await _read_json(request)
            if not isinstance(body, dict):
                raise RequestError("The request body must be a JSON object.")
            prompts = _native_prompts(body)
            sp = body.get("sampling_params") or {}
            if not isinstance(sp, dict):
                raise RequestError("sampling_params must be an object.")
            max_new = _int_field(sp, "max_new_tokens", 128)
            ignore_eos = bool(sp.get("ignore_eos", False))
            streaming = bool(body.get("stream", False))
            self._check_lengths(prompts, max_new)
        except RequestError as e:
            self.log.error(f"[http_server] Error: {e}")
            return _json({"error": {"message": str(e)}}, status=400)
        batch = isinstance(prompts, list)
        plist = prompts if isinstance(prompts, list) else [prompts]
        st = _Stream(self, _NATIVE, streaming, batch=batch)
        rids = body.get("rid")
        for i, plen in enumerate(plist):
            rid = rids[i] if isinstance(rids, list) and i < len(rids) else None
            if not batch and isinstance(rids, str):
                rid = rids
            self._add_gen(st, str(rid) if rid else self._new_rid(), plen, max_new, ignore_eos)
        if st.reject is not None:
            return _json({"error": {"message": st.reject}}, status=400)
        if streaming:
            return await self._serve_stream(request, st)
        await self._serve_wait(request, st)
        if st.error or st.cut:
            return _json({"error": {"message": st.error or "aborted"}}, status=400)
        out = [g.native_dict() for g in st.gens]
        if batch:
            for i, d in enumerate(out):
                d["index"] = i
            return _json(out)
        return _json(out[0])

    async def v1_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._openai(request, _COMPLETIONS)

    async def v1_chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._openai(request, _CHAT)

    async def _openai(self, request: web.Request, kind: int) -> web.StreamResponse:
        try:
            ctype = request.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
            if ctype != "application/json":
                raise RequestError(
                    "[{'loc': ['header', 'content-type'], 'msg': \"Unsupported Media Type: "
                    "Only 'application/json' is allowed\", 'type': 'value_error'}]"
                )
            body = await _read_json(request)
            if not isinstance(body, dict):
                raise RequestError("The request body must be a JSON object.")
            if kind == _COMPLETIONS:
                plen = _completion_prompt_len(body.get("prompt"))
                max_new = _int_field(body, "max_tokens", 16)
            else:
                plen = _chat_prompt_len(body.get("messages"))
                mct = body.get("max_completion_tokens")
                max_new = (
                    _int_field(body, "max_completion_tokens", 16)
                    if mct is not None
                    else _int_field(body, "max_tokens", 16)
                )
            if max_new <= 0:
                raise RequestError("max_tokens must be positive")
            if int(body.get("n", 1) or 1) != 1:
                raise RequestError("The simulator supports only n=1.")
            self._check_lengths(plen, max_new)
        except RequestError as e:
            return _json(
                {
                    "object": "error",
                    "message": str(e),
                    "type": "BadRequestError",
                    "param": None,
                    "code": 400,
                },
                status=400,
            )
        streaming = bool(body.get("stream", False))
        so = body.get("stream_options") or {}
        st = _Stream(
            self,
            kind,
            streaming,
            model=str(body.get("model") or "default"),
            include_usage=bool(isinstance(so, dict) and so.get("include_usage")),
            continuous_usage=bool(isinstance(so, dict) and so.get("continuous_usage_stats")),
        )
        st.prepare_openai()
        self._add_gen(st, st.oai_id, plen, max_new, bool(body.get("ignore_eos", False)))
        if st.reject is not None:
            return _json(
                {
                    "object": "error",
                    "message": st.reject,
                    "type": "BadRequestError",
                    "param": None,
                    "code": 400,
                },
                status=400,
            )
        if streaming:
            return await self._serve_stream(request, st)
        await self._serve_wait(request, st)
        gen = st.gens[0]
        if st.error or st.cut:
            return _json(
                {
                    "object": "error",
                    "message": st.error or "aborted",
                    "type": "InternalServerError",
                    "param": None,
                    "code": 500,
                },
                status=500,
            )
        fr = gen.finish_reason or {}
        text = token_text(0, gen.n)
        choice: dict[str, Any]
        if kind == _COMPLETIONS:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": fr.get("type"),
                "matched_stop": fr.get("matched"),
            }
            obj = "text_completion"
        else:
            choice = {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": text,
                    "reasoning_content": None,
                    "tool_calls": None,
                },
                "logprobs": None,
                "finish_reason": fr.get("type"),
                "matched_stop": fr.get("matched"),
            }
            obj = "chat.completion"
        return _json(
            {
                "id": st.oai_id,
                "object": obj,
                "created": st.created,
                "model": st.model,
                "choices": [choice],
                "usage": _Usage(gen.prompt_len, gen.n).as_dict(),
                "metadata": {"weight_version": "default"},
            }
        )

    def _check_lengths(self, prompts: int | list[int], max_new: int) -> None:
        ctx = self._context_len()
        if not ctx:
            return
        for plen in prompts if isinstance(prompts, list) else [prompts]:
            if plen >= ctx:
                raise RequestError(
                    f"The input ({plen} tokens) is longer than the model's context length "
                    f"({ctx} tokens)."
                )

    async def _serve_wait(self, request: web.Request, st: _Stream) -> None:
        """Non-streaming: wait for all sequences; abort them if the client goes away."""
        self.streams.add(st)
        try:
            await self._wait_done(st)
            if st.cut:
                # Fault: drop the connection without any response.
                if request.transport is not None:
                    request.transport.abort()
                raise asyncio.CancelledError
        finally:
            self.streams.discard(st)
            self._abort_unfinished(st)

    def _note_writes(self, gens: list[_Gen]) -> None:
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

    async def _serve_stream(self, request: web.Request, st: _Stream) -> web.StreamResponse:
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
            self._abort_unfinished(st)
        return resp


# ------------------------------------------------------------------ helpers
def _json(obj: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=orjson.dumps(obj), status=status, headers={"Content-Type": "application/json"}
    )


def _const_eq(a: str, b: str) -> bool:
    import secrets

    return secrets.compare_digest(a.encode(), b.encode())


async def _read_json(request: web.Request) -> Any:
    raw = await request.read()
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise RequestError(f"Invalid JSON body: {e}") from None


def _int_field(d: dict[str, Any], name: str, default: int) -> int:
    v = d.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise RequestError(f"{name} must be an integer, got {v!r}")
    return v


def _native_prompts(body: dict[str, Any]) -> int | list[int]:
    """Prompt length(s) of a /generate body: an int, or a list for a batch request."""
    text = body.get("text")
    ids = body.get("input_ids")
    if (text is None) == (ids is None):
        raise RequestError("Either text, input_ids or input_embeds should be provided.")
    if text is not None:
        if isinstance(text, str):
            return count_prompt_words(text)
        if isinstance(text, list) and text and all(isinstance(t, str) for t in text):
            return [count_prompt_words(t) for t in text]
        raise RequestError("text must be a string or a non-empty list of strings.")
    if isinstance(ids, list) and ids:
        if all(isinstance(t, int) for t in ids):
            return len(ids)
        if all(isinstance(t, list) and all(isinstance(x, int) for x in t) for t in ids):
            return [max(1, len(t)) for t in ids]
    raise RequestError("input_ids must be a non-empty list of ints or of lists of ints.")


def _completion_prompt_len(prompt: Any) -> int:
    if isinstance(prompt, str) and prompt:
        return count_prompt_words(prompt)
    if isinstance(prompt, list) and prompt:
        if all(isinstance(t, int) for t in prompt):
            return len(prompt)
        if len(prompt) == 1 and isinstance(prompt[0], str):
            return count_prompt_words(prompt[0])
        if len(prompt) == 1 and isinstance(prompt[0], list):
            return max(1, len(prompt[0]))
        raise RequestError("The simulator supports one prompt per request (no batches).")
    raise RequestError("Prompt cannot be empty")


def _chat_prompt_len(messages: Any) -> int:
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list.")
    words = 0
    for m in messages:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, str):
            words += len(content.split())
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    words += len(part["text"].split())
    return max(1, words)


class _Metrics:
    """Prometheus metrics with SGLang's names, in a private registry (one per server)."""

    def __init__(self, server: SimServer) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.server = server
        self.registry = CollectorRegistry(auto_describe=True)
        model = server.served_model_name
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
        lab = ["model_name"]
        self.prompt_tokens = Counter(
            "sglang:prompt_tokens",
            "Number of prefill tokens processed.",
            lab,
            registry=self.registry,
        ).labels(model)
        self.gen_tokens = Counter(
            "sglang:generation_tokens",
            "Number of generation tokens processed.",
            lab,
            registry=self.registry,
        ).labels(model)
        self.cached_tokens = Counter(
            "sglang:cached_tokens", "Number of cached prompt tokens.", lab, registry=self.registry
        ).labels(model)
        self.requests = Counter(
            "sglang:num_requests", "Number of requests processed.", lab, registry=self.registry
        ).labels(model)
        self.aborted = Counter(
            "sglang:num_aborted_requests",
            "Number of requests aborted.",
            lab,
            registry=self.registry,
        ).labels(model)
        self.ttft = Histogram(
            "sglang:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            lab,
            registry=self.registry,
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160),
        ).labels(model)
        self.itl = Histogram(
            "sglang:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            lab,
            registry=self.registry,
            buckets=(
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
            ),
        ).labels(model)
        self.e2e = Histogram(
            "sglang:e2e_request_latency_seconds",
            "Histogram of End-to-end request latency in seconds",
            lab,
            registry=self.registry,
            buckets=(0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400),
        ).labels(model)

    def on_finish(self, gen: _Gen) -> None:
        self.requests.inc()
        self.prompt_tokens.inc(gen.prompt_len)
        self.gen_tokens.inc(gen.n)
        self.e2e.observe(gen.t_last - gen.t_start)

    def render(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

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
        self.g_hit.labels(*v).set(0.0)
        self.g_max.labels(*v).set(s.max_total_num_tokens)
        self.g_retract.labels(*v).set(0)
        self.g_graph.labels(*v).set(0 if server.knobs.disable_cuda_graph else 1)
        if server.spec_on:
            acc = s.avg_spec_accept_length or 0.0
            self.g_acc_len.labels(*v).set(acc)
            self.g_acc_rate.labels(*v).set(
                max(0.0, acc - 1.0) / max(1, server.spec_draft_tokens - 1)
            )
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


# ---------------------------------------------------------------- process main
def _server_args_line(args: SimArgs) -> str:
    """``server_args=ServerArgs(...)`` as SGLang logs at launch, with the api key redacted."""
    fields = dataclasses.asdict(args.knobs)
    if fields.get("api_key"):
        fields["api_key"] = "<redacted>"
    inner = ", ".join(f"{k}={v!r}" for k, v in fields.items())
    return f"server_args=ServerArgs({inner})"


async def run_main(args: SimArgs) -> int:
    """The whole process: startup log, serve until SIGTERM/SIGINT, exit code."""
    log = get_logger()
    knobs = args.knobs
    log.info(_server_args_line(args))
    if args.unknown_args:
        log.warning("Ignoring flags the simulator does not model: " + " ".join(args.unknown_args))
    faults = args.faults
    if faults.describe():
        log.warning("Simulated faults enabled: " + ", ".join(faults.describe()))
    try:
        from pytest_llmperf.sim.engine import create_engine

        engine, lines = create_engine(knobs, on_log=log.info)
    except Exception as e:
        log.error(f"Scheduler hit an exception: {type(e).__name__}: {e}")
        return 1
    spec_warned = any("reset to 48" in line for line in lines)
    if knobs.speculative_algorithm and knobs.max_running_requests is None and not spec_warned:
        log.warning(SPEC_CAP_WARNING)
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        n_visible = len([d for d in cvd.split(",") if d.strip()])
        need = knobs.tp_size * knobs.dp_size
        if n_visible < need:
            log.warning(
                f"CUDA_VISIBLE_DEVICES={cvd} exposes {n_visible} GPU(s) but tp_size*dp_size="
                f"{need}; a real server would fail here (simulated: continuing)."
            )
    if faults.crash_on_start:
        for line in lines[: max(1, len(lines) // 2)]:
            log.info(line)
        log.error("Scheduler hit an exception: Traceback (most recent call last):")
        log.error(OOM_LINE + " (simulated: --sim-fault crash-on-start)")
        return 1
    for line in lines:
        log.info(line)
    server = SimServer(
        knobs,
        faults=faults,
        engine=engine,
        startup_lines=lines,
        trust_remote_code=args.trust_remote_code,
        unknown_args=args.unknown_args,
    )
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await server.start()
    except OSError as e:
        log.error(
            f"[Errno {e.errno}] error while attempting to bind on address "
            f"('{knobs.host}', {knobs.port}): {e.strerror or e}"
        )
        return 1
    await stop.wait()
    log.info("Shutting down")
    log.info("Waiting for application shutdown.")
    await server.stop()
    log.info("Application shutdown complete.")
    log.info(f"Finished server process [{os.getpid()}]")
    sys.stderr.flush()
    return 0
