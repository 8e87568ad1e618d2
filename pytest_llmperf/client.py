"""Async streaming requests against SGLang's native and OpenAI-compatible APIs.

Built on httpx's API with the httpx-aiohttp transport: stock httpx spends most of its CPU in
connection-pool bookkeeping at 128+ concurrent streams and then stamps tokens tens of
milliseconds late (see docs). Each chunk is stamped with ``perf_counter()`` before any parsing,
and the hot path only splits bytes and finds ``"completion_tokens":`` with a bytes search;
full JSON is parsed only for events that need it (errors, the last event, OpenAI chunks
without usage).
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import Sequence
from typing import Any, Literal, cast

import aiohttp
import httpx
import orjson
from httpx_aiohttp import AiohttpTransport

from pytest_llmperf.records import RequestRecord
from pytest_llmperf.results import Backend
from pytest_llmperf.sse import DONE, SSEDecoder

BACKEND_PATHS: dict[str, str] = {
    "sglang": "/generate",
    "openai": "/v1/completions",
    "openai-chat": "/v1/chat/completions",
}
CONNECT_TIMEOUT_S = 10.0
WRITE_TIMEOUT_S = 30.0
READ_BUFSIZE = 1 << 20  # aiohttp's 64 KiB default throttles long cumulative-text streams
MAX_ERROR_CHARS = 300
_CT_KEY = b'"completion_tokens":'
_INT = re.compile(rb"\s*(\d+)")
_JSON_HEADERS = {"content-type": "application/json"}


class ServerError(RuntimeError):
    """The server answered a control request (not a measured one) with something unusable."""


def make_http_client(
    base_url: str,
    *,
    api_key: str | None = None,
    read_timeout_s: float = 600.0,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
) -> httpx.AsyncClient:
    """An httpx client over aiohttp with no connection cap and no pool timeout.

    Concurrency is bounded by the sweep's workers, not by the pool: a pool limit below C
    would queue requests inside the client and show up as TTFT. ``read`` must cover the
    longest TTFT under queueing and every inter-token gap. The API key travels only in the
    Authorization header and is never logged.
    """

    def session() -> aiohttp.ClientSession:
        # Created lazily by the transport, inside the running loop that will use it.
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=75.0),
            read_bufsize=READ_BUFSIZE,
            timeout=aiohttp.ClientTimeout(total=None),
        )

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


def request_body(
    backend: Backend,
    prompt: Sequence[int] | str,
    output_len: int,
    *,
    temperature: float = 0.0,
    model: str | None = None,
) -> bytes:
    """The JSON body of one streaming request (fixed output length: ignore_eos)."""
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
            "ignore_eos": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
        if backend == "openai":
            body["prompt"] = prompt if isinstance(prompt, str) else list(prompt)
            body["max_tokens"] = output_len
        else:
            text = prompt if isinstance(prompt, str) else " ".join(map(str, prompt))
            body["messages"] = [{"role": "user", "content": text}]
            body["max_completion_tokens"] = output_len
    return orjson.dumps(body)


def _int_after(payload: bytes, pos: int) -> int:
    m = _INT.match(payload, pos)
    return int(m.group(1)) if m else -1


def _error_message(obj: object) -> str | None:
    """The error carried by an event (SGLang ``{"error": ...}`` or OpenAI ``object: error``)."""
    if not isinstance(obj, dict):
        return None
    err = obj.get("error")
    if err is not None:
        if isinstance(err, dict):
            return str(err.get("message") or err)
        return str(err)
    if obj.get("object") == "error":
        return str(obj.get("message") or obj)
    return None


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."


class LoadGenerator:
    """One HTTP client plus one backend's request format; ``request()`` measures one request.

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
    ) -> None:
        if backend not in BACKEND_PATHS:
            raise ValueError(f"unknown backend {backend!r}; choose one of {sorted(BACKEND_PATHS)}")
        self.base_url = base_url.rstrip("/")
        self.backend: Backend = backend
        self.model = model
        self.temperature = temperature
        self.request_timeout_s = request_timeout_s
        self._api_key = api_key
        self._path = BACKEND_PATHS[backend]
        self._http: httpx.AsyncClient | None = None

    async def __aenter__(self) -> LoadGenerator:
        self._http = make_http_client(
            self.base_url, api_key=self._api_key, read_timeout_s=self.request_timeout_s
        )
        if self.backend != "sglang" and self.model is None:
            self.model = await self.resolve_model()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    @property
    def http(self) -> httpx.AsyncClient:
        """The shared client, also used for probes (``/server_info``, ``/flush_cache``)."""
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
            raise ServerError(
                f"GET {self.base_url}/v1/models returned HTTP {r.status_code}: {_short(r.text)}"
            )
        data = r.json().get("data") or []
        if not data or "id" not in data[0]:
            raise ServerError(f"GET {self.base_url}/v1/models listed no model: {_short(r.text)}")
        return str(data[0]["id"])

    def body(self, prompt: Sequence[int] | str, output_len: int) -> bytes:
        return request_body(
            self.backend, prompt, output_len, temperature=self.temperature, model=self.model
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
        try:
            async with asyncio.timeout(self.request_timeout_s):
                if self.backend == "sglang":
                    await self._stream_generate(rec, payload)
                else:
                    await self._stream_openai(rec, payload)
        except TimeoutError:
            rec.fail(f"request exceeded its total deadline of {self.request_timeout_s:g}s")
        except (httpx.HTTPError, aiohttp.ClientError, OSError, orjson.JSONDecodeError) as e:
            where = f"stream cut after {rec.output_tokens} tokens: " if rec.events else ""
            rec.fail(_short(f"{where}{type(e).__name__}: {e}" if str(e) else type(e).__name__))
        if not rec.ok:
            rec.e2e = time.perf_counter() - rec.t_send if math.isnan(rec.e2e) else rec.e2e
        return rec

    async def _open_failed(self, rec: RequestRecord, resp: httpx.Response) -> bool:
        if resp.status_code == 200:
            return False
        raw = await resp.aread()
        text = raw[:2000].decode("utf-8", "replace")
        try:
            msg = _error_message(orjson.loads(raw)) or text
        except orjson.JSONDecodeError:
            msg = text
        rec.fail(_short(f"HTTP {resp.status_code}: {msg}"))
        return True

    async def _stream_generate(self, rec: RequestRecord, body: bytes) -> None:
        """SGLang ``/generate``: tokens from ``meta_info.completion_tokens`` deltas."""
        decoder = SSEDecoder()
        last_ct = 0
        last_payload: bytes | None = None
        t_done = -1.0
        async with self.http.stream(
            "POST", self._path, content=body, headers=_JSON_HEADERS
        ) as resp:
            if await self._open_failed(rec, resp):
                return
            async for chunk in resp.aiter_raw():
                t = time.perf_counter()  # stamp first: parsing below must not delay it
                if t_done >= 0:
                    continue  # drain to EOF so the connection is reused
                for data in decoder.feed(chunk):
                    if data == DONE:
                        t_done = t
                        break
                    j = data.rfind(_CT_KEY)
                    if j < 0:
                        msg = _error_message(orjson.loads(data))
                        if msg is not None:
                            rec.fail(_short(f"error in stream: {msg}"))
                            return
                        continue
                    ct = _int_after(data, j + len(_CT_KEY))
                    if ct > last_ct:
                        rec.add_tokens(t, ct - last_ct)
                        last_ct = ct
                    last_payload = data
        if t_done < 0:
            rec.fail(f"stream ended before [DONE] after {rec.output_tokens} tokens")
            return
        rec.e2e = t_done - rec.t_send
        if last_payload is None:
            rec.fail("stream finished without any token")
            return
        meta = orjson.loads(last_payload).get("meta_info") or {}
        finish = meta.get("finish_reason")
        if not finish:
            rec.fail(f"stream ended without a finish_reason after {rec.output_tokens} tokens")
        elif isinstance(finish, dict) and finish.get("type") == "abort":
            rec.fail(_short(f"request aborted by server: {finish.get('message') or finish}"))
        if isinstance(meta.get("prompt_tokens"), int):
            rec.prompt_tokens = meta["prompt_tokens"]
        sal = meta.get("spec_accept_length")
        if isinstance(sal, int | float):
            rec.spec_accept_length = float(sal)

    async def _stream_openai(self, rec: RequestRecord, body: bytes) -> None:
        """OpenAI completions/chat: tokens from continuous usage stats when the server sends
        them, else one per content chunk reconciled with the final usage."""
        decoder = SSEDecoder()
        chat = self.backend == "openai-chat"
        mode: Literal["usage", "chunks"] | None = None
        last_ct = 0
        final_usage: int | None = None
        usage_payload: bytes | None = None
        finish: bool = False
        t_done = -1.0
        async with self.http.stream(
            "POST", self._path, content=body, headers=_JSON_HEADERS
        ) as resp:
            if await self._open_failed(rec, resp):
                return
            async for chunk in resp.aiter_raw():
                t = time.perf_counter()
                if t_done >= 0:
                    continue
                for data in decoder.feed(chunk):
                    if data == DONE:
                        t_done = t
                        break
                    if b'"finish_reason":"' in data:
                        if b'"finish_reason":"abort"' in data:
                            rec.fail("request aborted by server (finish_reason abort)")
                            return
                        finish = True
                    j = data.rfind(_CT_KEY)
                    if j >= 0:
                        usage_payload = data
                        ct = _int_after(data, j + len(_CT_KEY))
                        if mode == "chunks":
                            final_usage = ct  # the closing usage chunk
                        else:
                            mode = "usage"
                            if ct > last_ct:
                                rec.add_tokens(t, ct - last_ct)
                                last_ct = ct
                        continue
                    obj = orjson.loads(data)
                    msg = _error_message(obj)
                    if msg is not None:
                        rec.fail(_short(f"error in stream: {msg}"))
                        return
                    if _has_content(obj, chat):
                        mode = "chunks"
                        rec.add_tokens(t, 1)
        if t_done < 0:
            rec.fail(f"stream ended before [DONE] after {rec.output_tokens} tokens")
            return
        rec.e2e = t_done - rec.t_send
        if not finish:
            rec.fail(f"stream ended without a finish_reason after {rec.output_tokens} tokens")
        if mode == "chunks" and final_usage is not None:
            # Chunks can carry several tokens; the server's count is the truth for throughput.
            rec.output_tokens = final_usage
        if usage_payload is not None:
            usage = orjson.loads(usage_payload).get("usage") or {}
            if isinstance(usage.get("prompt_tokens"), int):
                rec.prompt_tokens = usage["prompt_tokens"]
        if rec.output_tokens == 0 and rec.ok:
            rec.fail("stream finished without any token")


def _has_content(obj: object, chat: bool) -> bool:
    if not isinstance(obj, dict):
        return False
    choices = cast(list[dict[str, Any]], obj.get("choices") or [])
    if not choices:
        return False
    c0 = choices[0]
    if chat:
        delta = c0.get("delta") or {}
        return bool(delta.get("content") or delta.get("reasoning_content"))
    return bool(c0.get("text"))
