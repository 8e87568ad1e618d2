"""Async streaming requests against SGLang's native and OpenAI-compatible APIs.

Measured streams, ``http://`` and ``https://``, go through ``transport.py`` (an
``asyncio.Protocol`` per keep-alive connection, llhttp framing, each read's body parsed inside
``data_received``: no task wake-up per read; ``benchmarks/bench_loadgen.py``). Control requests
(``/server_info``, ``/flush_cache``, ``/v1/models``, ``/metrics``) are few and go through one
plain httpx client (``control_http.py``). So a generator holds two pools: the stream pool,
which grows to the concurrency, and the control client's.

The hot path works per network read, not per event: every event in one read arrived at the
same instant, so a read gets one stamp, the time its bytes came off the socket (taken before
any parsing), and is handed to a parser in ``stream_parsers.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Sequence
from typing import Any

import httpx
import orjson

from pytest_llmperf.base.errors import LLMPerfError
from pytest_llmperf.base.results import Backend
from pytest_llmperf.base.values import DEFAULT_IDLE_TIMEOUT_S
from pytest_llmperf.core import control_http
from pytest_llmperf.core.control_http import CONNECT_TIMEOUT_S
from pytest_llmperf.core.records import RequestRecord
from pytest_llmperf.core.stream_parsers import (
    GenerateStreamParser,
    OpenAIStreamParser,
    error_message,
    short_error,
)
from pytest_llmperf.core.transport import Exchange, StreamPool
from pytest_llmperf.core.transport_errors import StaleConnection, TransportError
from pytest_llmperf.core.workload import fold_ids

BACKEND_PATHS: dict[str, str] = {
    "sglang": "/generate",
    "openai": "/v1/completions",
    "openai-chat": "/v1/chat/completions",
}
# A stream with no new event for this long (or the request's deadline, if shorter) has stalled:
# it fails then, not at the deadline. Longer than any decode step or prefill a benchmark sees;
# the idle_timeout setting changes it.
IDLE_READ_TIMEOUT_S = DEFAULT_IDLE_TIMEOUT_S
STALLED = "the stream stalled"  # how a request the idle watchdog ended begins its error
_JSON_HEADERS = {"content-type": "application/json"}


class ServerError(LLMPerfError, RuntimeError):
    """The server answered a control request (not a measured one) with something unusable."""


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
        self._url = self.base_url + self._path
        self._headers = dict(_JSON_HEADERS)
        if api_key:
            self._headers["authorization"] = f"Bearer {api_key}"
        self._http: httpx.AsyncClient | None = None
        self._pool: StreamPool | None = None

    async def __aenter__(self) -> LoadGenerator:
        tls = control_http.tls_context()  # one TLS policy for both pools
        self._pool = StreamPool(self._url, self._headers, CONNECT_TIMEOUT_S, tls)
        self._http = control_http.async_client(
            self.base_url, api_key=self._api_key, read_timeout_s=self.request_timeout_s, tls=tls
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
        prompt_tokens: int | None = None,
    ) -> RequestRecord:
        """Send one streaming request and measure it; never raises for request failures.
        With ``body`` built already, ``prompt_tokens`` stands for the prompt's length."""
        payload = body if body is not None else self.body(prompt, output_len)
        if prompt_tokens is None:
            prompt_tokens = len(prompt) if not isinstance(prompt, str) else 0
        rec = RequestRecord(
            index=index,
            prompt_tokens=prompt_tokens,
            t_scheduled=t_scheduled,
        )
        rec.t_send = time.perf_counter()
        watch: _Watch | None = None
        try:
            async with asyncio.timeout(self.request_timeout_s) as deadline:
                watch = self._inflight[id(rec)] = _Watch(rec, deadline)
                try:
                    await self._attempt(rec, payload, fresh=False)
                except StaleConnection:
                    # Re-sent once, on a new connection: a pooled connection the server had
                    # closed, so it never read this request. A new connection's failure, a
                    # reset, or anything after the headers is another type and never re-sent.
                    rec.retries += 1
                    # The start stamp belongs to the attempt that succeeds (this one): the
                    # dead connection's milliseconds are the client's, not the server's.
                    rec.t_send = time.perf_counter()
                    await self._attempt(rec, payload, fresh=True)
        except TransportError as e:
            rec.fail(_cut_message(rec, e))
        except TimeoutError:
            if watch is not None and watch.idle:
                rec.fail(
                    f"{STALLED}: no event for {self.idle_timeout_s:g}s after "
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

    async def _attempt(self, rec: RequestRecord, payload: bytes, *, fresh: bool) -> None:
        """One try of a request: send, then parse the stream into ``rec``."""
        if self._pool is None:
            raise RuntimeError("LoadGenerator is not open; use 'async with LoadGenerator(...)'")
        ex = Exchange()
        await self._pool.send(ex, payload, fresh=fresh)
        if ex.status != 200:
            await self._pool.finish(ex, None)
            raw = b"".join(data for data, _ in ex.body)
            _fail_from_body(rec, ex.status, raw, openai=self.backend != "sglang")
            return
        parser = self._parser(rec)
        await self._pool.finish(ex, parser.feed)  # inside data_received: one call per read
        if rec.ok:
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
