"""Async streaming requests against SGLang's native and OpenAI-compatible APIs.

Measured streams to ``http://`` servers go through ``transport.py`` (an ``asyncio.Protocol`` per
keep-alive connection, llhttp framing, each read's body parsed inside ``data_received``: no
task wake-up per read); ``https://`` ones through aiohttp (one session, no connection cap).
Control requests (``/server_info``, ``/flush_cache``, ``/metrics``) use an httpx client over the
httpx-aiohttp transport. Stock httpx spends most of its CPU in connection-pool bookkeeping at
128+ concurrent streams and then stamps tokens tens of milliseconds late (see
``benchmarks/bench_loadgen.py``).

The hot path works per network read, not per event: every event in one read arrived at the
same instant, so a read gets one stamp, the time its bytes came off the socket (taken before
any parsing), and is handed to a parser in ``stream_parsers.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import time
from collections.abc import Sequence
from typing import Any, cast

import aiohttp
import httpx
import orjson
from aiohttp.client_proto import ResponseHandler
from httpx_aiohttp import AiohttpTransport
from yarl import URL

from pytest_llmperf.base.errors import LLMPerfError
from pytest_llmperf.base.results import Backend
from pytest_llmperf.core.records import RequestRecord
from pytest_llmperf.core.stream_parsers import (
    GenerateStreamParser,
    OpenAIStreamParser,
    error_message,
    short_error,
)
from pytest_llmperf.core.transport import Exchange, StreamPool
from pytest_llmperf.core.workload import fold_ids

BACKEND_PATHS: dict[str, str] = {
    "sglang": "/generate",
    "openai": "/v1/completions",
    "openai-chat": "/v1/chat/completions",
}
CONNECT_TIMEOUT_S = 10.0
# A stream with no new event for this long (or the request's deadline, if shorter) has stalled:
# it fails then, not at the deadline. Longer than any decode step or prefill a benchmark sees.
IDLE_READ_TIMEOUT_S = 60.0
WRITE_TIMEOUT_S = 30.0
# Measured streams: aiohttp's own 64 KiB. With a bigger buffer aiohttp calls resume_reading()
# for every HTTP chunk it hands over (it does so whenever less than the buffer size is queued),
# which cost ~20 % more CPU per event when reads coalesce (benchmarks/bench_loadgen.py). Large
# events are fine: readany() has no line limit, the buffer only paces the socket.
STREAM_READ_BUFSIZE = 1 << 16
PROBE_READ_BUFSIZE = 1 << 20  # control requests: /metrics bodies can exceed 64 KiB
_JSON_HEADERS = {"content-type": "application/json"}


class ServerError(LLMPerfError, RuntimeError):
    """The server answered a control request (not a measured one) with something unusable."""


class _ArrivalStamper(ResponseHandler):
    """aiohttp's connection protocol, plus the time the last bytes came off the socket.

    A stream task learns about new bytes only after the event loop has run every other ready
    socket's callbacks: with 64 first tokens landing together, aiohttp's header handling
    alone delays the last one by about a millisecond. Stamping here, before aiohttp does
    anything, removes that from TTFT and ITL.
    """

    t_arrival = math.nan

    def data_received(self, data: bytes) -> None:
        if data:  # b"" is aiohttp resuming its own parser, not an arrival
            self.t_arrival = time.perf_counter()
        super().data_received(data)

    def resume_reading(self, resume_parser: bool = True) -> None:
        # aiohttp's StreamReader calls this for every HTTP chunk it hands over while less than
        # its low-water mark is queued, paused or not; each call re-enters the parser and the
        # transport. SGLang sends one chunk per event, so that costs a third of the client's CPU
        # per event. Nothing paused: nothing to resume.
        if self._reading_paused or getattr(self, "_buffer_paused", False):
            super().resume_reading(resume_parser)


def make_session(
    read_bufsize: int = STREAM_READ_BUFSIZE,
    *,
    force_close: bool = False,
    trace_configs: list[aiohttp.TraceConfig] | None = None,
) -> aiohttp.ClientSession:
    """An aiohttp session with no connection cap and no total timeout.

    Concurrency is bounded by the sweep's workers, not by the pool: a pool limit below C
    would queue requests inside the client and show up as TTFT. Must be created inside the
    running loop that will use it. Environment proxies are ignored (loopback benchmarks must
    not detour through one). ``force_close``: every request on its own new connection.
    """
    conn = aiohttp.TCPConnector(
        limit=0,
        limit_per_host=0,
        keepalive_timeout=None if force_close else 75.0,
        force_close=force_close,
    )
    # aiohttp has no public hook for its connection protocol; every connector has built it with
    # self._factory since 3.0. Should that change, streams fall back to stamping on resume.
    if callable(getattr(conn, "_factory", None)):
        factory = functools.partial(_ArrivalStamper, loop=asyncio.get_running_loop())
        conn._factory = cast("functools.partial[ResponseHandler]", factory)
    return aiohttp.ClientSession(
        connector=conn,
        read_bufsize=read_bufsize,
        timeout=aiohttp.ClientTimeout(total=None),
        trust_env=False,
        trace_configs=trace_configs,
    )


class _Attempt:
    """What one try of a request learned about its connection (aiohttp trace context)."""

    __slots__ = ("answered", "reused")

    def __init__(self) -> None:
        self.reused = False  # the connection came from the keep-alive pool
        self.answered = False  # response headers arrived: the server saw the request


async def _on_reuse(
    _session: aiohttp.ClientSession,
    ctx: Any,
    _params: aiohttp.TraceConnectionReuseconnParams,
) -> None:
    attempt = ctx.trace_request_ctx
    if isinstance(attempt, _Attempt):
        attempt.reused = True


def _reuse_tracer() -> aiohttp.TraceConfig:
    tc = aiohttp.TraceConfig()
    tc.on_connection_reuseconn.append(_on_reuse)
    tc.freeze()
    return tc


def _never_reached_server(e: BaseException) -> bool:
    """Whether a failure before any response byte proves the server did not read the request.

    A pooled connection the server had already closed (an idle keep-alive timeout, or a server
    that closes after every response without saying ``Connection: close``) fails in one of two
    ways: the body cannot be written (the transport is closing: aiohttp's "Can not write
    request body") or the server's FIN comes before any answer (``ServerDisconnectedError``).
    A reset (RST) after the request was written may come from a server that read it, so it is
    not one of these.
    """
    if isinstance(e, aiohttp.ServerDisconnectedError):
        return True
    return isinstance(e, aiohttp.ClientOSError) and "write request body" in str(e)


def make_http_client(
    base_url: str,
    *,
    api_key: str | None = None,
    read_timeout_s: float = 600.0,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
) -> httpx.AsyncClient:
    """An httpx client over aiohttp with no connection cap and no pool timeout.

    ``read`` must cover the longest TTFT under queueing and every inter-token gap. The API key
    travels only in the Authorization header and is never logged.
    """

    def session() -> aiohttp.ClientSession:
        # Created lazily by the transport, inside the running loop that will use it.
        return make_session(PROBE_READ_BUFSIZE)

    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx.AsyncClient(
        base_url=base_url.rstrip("/"),
        transport=AiohttpTransport(client=session),
        timeout=httpx.Timeout(
            connect=connect_timeout_s, read=read_timeout_s, write=WRITE_TIMEOUT_S, pool=None
        ),
        headers=headers,
        trust_env=False,  # loopback benchmarks must not detour through an env proxy
        follow_redirects=False,
    )


# Fields of our OpenAI-API bodies that are not in OpenAI's API (vLLM and SGLang take them;
# a strict server answers 400/422): ignore_eos fixes the output length, continuous_usage_stats
# gives exact per-chunk token counts.
OPENAI_EXTENSION_FIELDS = ("ignore_eos", "continuous_usage_stats")


def request_body(
    backend: Backend,
    prompt: Sequence[int] | str,
    output_len: int,
    *,
    temperature: float = 0.0,
    model: str | None = None,
    extensions: bool = True,
) -> bytes:
    """The JSON body of one streaming request (fixed output length: ignore_eos).

    ``extensions=False`` leaves the OpenAI-API extension fields out (strict servers); outputs
    may then stop at EOS, which the validity check reports.
    """
    if backend == "sglang":
        key = "text" if isinstance(prompt, str) else "input_ids"
        body: dict[str, Any] = {
            key: prompt,
            "sampling_params": {
                "max_new_tokens": output_len,
                "ignore_eos": True,
                "temperature": temperature,
            },
            "stream": True,
        }
    else:
        body = {
            "model": model or "default",
            "stream": True,
            "temperature": temperature,
            "stream_options": {"include_usage": True},
        }
        if extensions:
            body["ignore_eos"] = True
            body["stream_options"]["continuous_usage_stats"] = True
        if backend == "openai":
            body["prompt"] = prompt if isinstance(prompt, str) else list(prompt)
            body["max_tokens"] = output_len
        else:
            text = prompt if isinstance(prompt, str) else " ".join(map(str, prompt))
            body["messages"] = [{"role": "user", "content": text}]
            body["max_completion_tokens"] = output_len
    return orjson.dumps(body)


class _Watch:
    """A request in flight, as the idle watchdog sees it."""

    __slots__ = ("deadline", "events", "idle", "rec", "since")

    def __init__(self, rec: RequestRecord, deadline: asyncio.Timeout) -> None:
        self.rec = rec
        self.deadline = deadline
        self.events = -1  # the record's event count when last seen
        self.since = time.perf_counter()
        self.idle = False  # the watchdog ended it


class LoadGenerator:
    """One HTTP session plus one backend's request format; ``request()`` measures one request.

    Use as ``async with LoadGenerator(url, "sglang") as gen: rec = await gen.request(...)``.
    """

    def __init__(
        self,
        base_url: str,
        backend: Backend = "sglang",
        *,
        api_key: str | None = None,
        request_timeout_s: float = 600.0,
        model: str | None = None,
        temperature: float = 0.0,
        extensions: bool = True,
        idle_timeout_s: float = IDLE_READ_TIMEOUT_S,
    ) -> None:
        if backend not in BACKEND_PATHS:
            raise ValueError(f"unknown backend {backend!r}; choose one of {sorted(BACKEND_PATHS)}")
        self.base_url = base_url.rstrip("/")
        self.backend: Backend = backend
        self.model = model
        self.temperature = temperature
        self.extensions = extensions
        self.request_timeout_s = request_timeout_s
        self.idle_timeout_s = min(idle_timeout_s, request_timeout_s)
        self._inflight: dict[int, _Watch] = {}
        # Set by the sweep when the served model's vocabulary is known and smaller than the
        # prompt ids: bodies then fold them into it (core/workload.py).
        self.vocab_size: int | None = None
        self._watchdog: asyncio.Task[None] | None = None
        self._api_key = api_key
        self._path = BACKEND_PATHS[backend]
        self._url = URL(self.base_url + self._path)  # parsed once, not per request
        self._headers = dict(_JSON_HEADERS)
        if api_key:
            self._headers["authorization"] = f"Bearer {api_key}"
        # No sock_read: the request's own deadline (asyncio.timeout below, the same length)
        # already bounds every gap, and aiohttp re-arms a sock_read timer on every read.
        self._timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=CONNECT_TIMEOUT_S, sock_read=None
        )
        self._session: aiohttp.ClientSession | None = None
        self._fresh_session: aiohttp.ClientSession | None = None
        self._http: httpx.AsyncClient | None = None
        self._pool: StreamPool | None = None

    async def __aenter__(self) -> LoadGenerator:
        self._session = make_session(trace_configs=[_reuse_tracer()])
        self._fresh_session = make_session(force_close=True)
        if self._url.scheme == "http":  # plain HTTP: the stream transport; else aiohttp
            self._pool = StreamPool(self._url, self._headers, CONNECT_TIMEOUT_S)
        self._http = make_http_client(
            self.base_url, api_key=self._api_key, read_timeout_s=self.request_timeout_s
        )
        self._watchdog = asyncio.get_running_loop().create_task(self._watch_idle())
        if self.backend != "sglang" and self.model is None:
            try:
                self.model = await self.resolve_model()
            except BaseException:
                await self.__aexit__()
                raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
            self._watchdog = None
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._fresh_session is not None:
            await self._fresh_session.close()
            self._fresh_session = None

    async def _watch_idle(self) -> None:
        """End every request that received no event for ``idle_timeout_s``.

        One task for all requests, checking a quarter of the timeout apart: nothing runs per
        read (the hot path), and a stall is caught within 1.25 times the timeout.
        """
        step = self.idle_timeout_s / 4
        loop = asyncio.get_running_loop()
        while True:  # cancelled by __aexit__
            await asyncio.sleep(step)
            now = time.perf_counter()
            for w in list(self._inflight.values()):  # bounded by the requests in flight
                if w.rec.events != w.events:
                    w.events, w.since = w.rec.events, now
                elif now - w.since >= self.idle_timeout_s and not w.idle:
                    w.idle = True
                    w.deadline.reschedule(loop.time())

    @property
    def api_key(self) -> str | None:
        """The key the generator sends (for client processes it starts; never logged)."""
        return self._api_key

    @property
    def http(self) -> httpx.AsyncClient:
        """The httpx client for probes (``/server_info``, ``/flush_cache``, ``/metrics``)."""
        if self._http is None:
            raise RuntimeError("LoadGenerator is not open; use 'async with LoadGenerator(...)'")
        return self._http

    @property
    def session(self) -> aiohttp.ClientSession:
        """The aiohttp session the measured streams use."""
        if self._session is None:
            raise RuntimeError("LoadGenerator is not open; use 'async with LoadGenerator(...)'")
        return self._session

    @property
    def fresh_session(self) -> aiohttp.ClientSession:
        """A session that opens a new connection per request (retries after a stale one)."""
        if self._fresh_session is None:
            raise RuntimeError("LoadGenerator is not open; use 'async with LoadGenerator(...)'")
        return self._fresh_session

    async def resolve_model(self) -> str:
        """The served model name from ``/v1/models`` (OpenAI APIs require one)."""
        try:
            r = await self.http.get("/v1/models", timeout=CONNECT_TIMEOUT_S * 3)
        except httpx.HTTPError as e:
            raise ServerError(f"GET {self.base_url}/v1/models failed: {e!r}") from e
        if r.status_code != 200:
            text = short_error(r.text)
            status = r.status_code
            raise ServerError(f"GET {self.base_url}/v1/models returned HTTP {status}: {text}")
        data = r.json().get("data") or []
        if not data or "id" not in data[0]:
            text = short_error(r.text)
            raise ServerError(f"GET {self.base_url}/v1/models listed no model: {text}")
        return str(data[0]["id"])

    def body(self, prompt: Sequence[int] | str, output_len: int) -> bytes:
        if self.vocab_size is not None and not isinstance(prompt, str):
            prompt = fold_ids(prompt, self.vocab_size)
        return request_body(
            self.backend,
            prompt,
            output_len,
            temperature=self.temperature,
            model=self.model,
            extensions=self.extensions,
        )

    async def request(
        self,
        index: int,
        prompt: Sequence[int] | str,
        output_len: int,
        *,
        t_scheduled: float | None = None,
        body: bytes | None = None,
    ) -> RequestRecord:
        """Send one streaming request and measure it; never raises for request failures."""
        payload = body if body is not None else self.body(prompt, output_len)
        rec = RequestRecord(
            index=index,
            prompt_tokens=len(prompt) if not isinstance(prompt, str) else 0,
            t_scheduled=t_scheduled,
        )
        rec.t_send = time.perf_counter()
        attempt = _Attempt()
        watch: _Watch | None = None
        try:
            async with asyncio.timeout(self.request_timeout_s) as deadline:
                watch = self._inflight[id(rec)] = _Watch(rec, deadline)
                try:
                    await self._attempt(rec, payload, attempt, fresh=False)
                except aiohttp.ClientError as e:
                    # Retried once, on a new connection, only when a pooled connection died
                    # before any response byte in a way that shows the server never read this
                    # request. A fresh connection's failure, a reset after the request was
                    # written, or anything after the headers is never re-sent.
                    if attempt.answered or not attempt.reused or not _never_reached_server(e):
                        raise
                    rec.retries += 1
                    # The start stamp belongs to the attempt that succeeds (this one): the
                    # dead connection's milliseconds are the client's, not the server's.
                    rec.t_send = time.perf_counter()
                    await self._attempt(rec, payload, _Attempt(), fresh=True)
        except aiohttp.ClientError as e:  # before TimeoutError: a read timeout is both
            rec.fail(_cut_message(rec, e))
        except TimeoutError:
            if watch is not None and watch.idle:
                rec.fail(
                    f"the stream stalled: no event for {self.idle_timeout_s:g}s after "
                    f"{rec.output_tokens} tokens (idle-read timeout)"
                )
            else:
                rec.fail(f"request exceeded its total deadline of {self.request_timeout_s:g}s")
        except (OSError, ValueError) as e:  # ValueError: orjson.JSONDecodeError
            rec.fail(_cut_message(rec, e))
        finally:
            self._inflight.pop(id(rec), None)
        if not rec.ok:
            rec.e2e = time.perf_counter() - rec.t_send if math.isnan(rec.e2e) else rec.e2e
        return rec

    def _parser(self, rec: RequestRecord) -> GenerateStreamParser | OpenAIStreamParser:
        if self.backend == "sglang":
            return GenerateStreamParser(rec)
        return OpenAIStreamParser(rec, chat=self.backend == "openai-chat")

    async def _attempt(
        self, rec: RequestRecord, payload: bytes, attempt: _Attempt, *, fresh: bool
    ) -> None:
        """One try of a request: send, then parse the stream into ``rec``."""
        if self._pool is None:
            session = self.fresh_session if fresh else self.session
            await self._attempt_aiohttp(rec, session, payload, attempt)
            return
        ex = Exchange()
        try:
            await self._pool.send(ex, payload, fresh=fresh)
        finally:
            attempt.reused = ex.reused
        attempt.answered = True
        if ex.status != 200:
            await self._pool.finish(ex, None)
            raw = b"".join(data for data, _ in ex.body)
            _fail_from_body(rec, ex.status, raw, openai=self.backend != "sglang")
            return
        parser = self._parser(rec)
        await self._pool.finish(ex, parser.feed)  # inside data_received: one call per read
        if rec.ok:
            parser.finish()

    async def _attempt_aiohttp(
        self,
        rec: RequestRecord,
        session: aiohttp.ClientSession,
        payload: bytes,
        attempt: _Attempt,
    ) -> None:
        """One try through aiohttp (https, or anything the stream transport does not speak)."""
        async with session.post(
            self._url,
            data=payload,
            headers=self._headers,
            timeout=self._timeout,
            allow_redirects=False,
            trace_request_ctx=attempt,
        ) as resp:
            attempt.answered = True
            if resp.status != 200:
                raw = await resp.read()
                _fail_from_body(rec, resp.status, raw, openai=self.backend != "sglang")
                return
            conn = resp.connection
            proto = conn.protocol if conn is not None else None
            stamper = proto if isinstance(proto, _ArrivalStamper) else None
            await _stream(self._parser(rec), resp.content, stamper)


async def _stream(
    parser: GenerateStreamParser | OpenAIStreamParser,
    content: aiohttp.StreamReader,
    stamper: _ArrivalStamper | None,
) -> None:
    """Feed one response body to its parser, a read at a time with its arrival stamp.

    After ``[DONE]`` the body is drained to EOF so the connection is reused.
    """
    read = content.readany
    while True:
        chunk = await read()
        # the bytes' arrival; else now, before parsing can delay it
        t = stamper.t_arrival if stamper is not None else time.perf_counter()
        if not chunk:
            break
        if not parser.feed(chunk, t):  # after [DONE] it drains to EOF: the connection is reused
            return
    parser.finish()


def _fail_from_body(rec: RequestRecord, status: int, raw: bytes, *, openai: bool) -> None:
    """A non-200 answer: the request fails with the server's own message."""
    text = raw[:2000].decode("utf-8", "replace")
    try:
        msg = error_message(orjson.loads(raw)) or text
    except orjson.JSONDecodeError:
        msg = text
    hint = extension_hint(status, text) if openai else ""
    # the hint goes first: a long server message is cut at the end, never the advice
    rec.fail(hint + short_error(f"HTTP {status}: {msg}"))


def extension_hint(status: int, body: str) -> str:
    """Advice when a 4xx answer names one of our OpenAI-API extension fields, else ''."""
    if not 400 <= status < 500:
        return ""
    named = [f for f in OPENAI_EXTENSION_FIELDS if f in body]
    if not named:
        return ""
    return (
        f"the server rejects the non-standard field(s) {', '.join(named)}: set "
        "openai_extensions = false in [sweep] of llmperf.toml (or the marker); "
    )


def _cut_message(rec: RequestRecord, e: BaseException) -> str:
    where = f"stream cut after {rec.output_tokens} tokens: " if rec.events else ""
    name = type(e).__name__
    return short_error(f"{where}{name}: {e}" if str(e) else f"{where}{name}")
