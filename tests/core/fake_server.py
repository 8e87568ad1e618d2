"""A tiny SGLang-shaped SSE server for client tests: real sockets, real pacing, and the stream
shapes that break naive clients (multi-token events, errors inside a 200 stream, cut streams,
U+2028 inside JSON, CRLF framing, bytes split at awkward places)."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

Scenario = (
    str  # "ok" | "error_in_stream" | "cut" | "clean_cut" | "http_500" | "no_finish" | "abort"
    # | "count_down": past half the output, one event repeats with completion_tokens one lower
)


@dataclass
class FakeConfig:
    step_s: float = 0.001  # pacing between events
    tokens_per_event: tuple[int, ...] = (1,)  # cycled: (1, 3) alternates 1- and 3-token events
    scenario: Scenario = "ok"
    fail_every: int = 0  # apply the scenario to every n-th request only (0: all)
    crlf: bool = False
    split_writes: bool = False  # write each event in 3-byte pieces
    text_piece: str = "a\u2028b "  # U+2028 stays raw in orjson output
    cap: int | None = 48
    accept_length: float | None = None
    flush_status: int = 200
    legacy_info_only: bool = False  # only /get_server_info exists
    continuous_usage: bool = True
    api_key: str | None = None
    cached_tokens: int = 0  # prompt tokens reported as prefix-cache hits, per request


@dataclass
class FakeState:
    requests: int = 0
    bodies: list[dict[str, Any]] = field(default_factory=list)
    flushes: int = 0
    running: int = 0
    max_running: int = 0
    auth_headers: list[str | None] = field(default_factory=list)


class FakeServer:
    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.tls = tls  # serve https with this context
        self.config = FakeConfig()
        self.state = FakeState()
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True, name="fake-sglang")
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fake server did not start within 10 s")

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)

    def reset(self) -> None:
        self.config = FakeConfig()
        self.state = FakeState()

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        app = web.Application()
        app.router.add_route("POST", "/generate", self.generate)
        app.router.add_route("POST", "/v1/completions", self.openai)
        app.router.add_route("POST", "/v1/chat/completions", self.openai)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/server_info", self.server_info)
        app.router.add_get("/get_server_info", self.server_info)
        app.router.add_route("*", "/flush_cache", self.flush)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/health_generate", self.health)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=2048, ssl_context=self.tls)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"{'https' if self.tls else 'http'}://127.0.0.1:{port}"
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()

    # --- helpers ---------------------------------------------------------------------------
    def _unauthorized(self, request: web.Request) -> web.Response | None:
        self.state.auth_headers.append(request.headers.get("Authorization"))
        if self.config.api_key and (
            request.headers.get("Authorization") != f"Bearer {self.config.api_key}"
        ):
            return web.json_response({"error": "Unauthorized"}, status=401)
        return None

    def _faulty(self) -> bool:
        cfg = self.config
        if cfg.scenario == "ok":
            return False
        return cfg.fail_every == 0 or self.state.requests % cfg.fail_every == 0

    async def _send(self, resp: web.StreamResponse, payload: bytes) -> None:
        frame = b"data: " + payload + b"\n\n"
        if self.config.crlf:
            frame = frame.replace(b"\n", b"\r\n")
        if self.config.split_writes:
            for i in range(0, len(frame), 3):
                await resp.write(frame[i : i + 3])
        else:
            await resp.write(frame)

    def _chunks(self, n: int) -> Iterator[int]:
        pattern = self.config.tokens_per_event
        produced, i = 0, 0
        while produced < n:
            k = min(pattern[i % len(pattern)], n - produced)
            produced += k
            i += 1
            yield k

    async def _open_stream(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        return resp

    # --- endpoints -------------------------------------------------------------------------
    async def generate(self, request: web.Request) -> web.StreamResponse:
        if (denied := self._unauthorized(request)) is not None:
            return denied
        body = orjson.loads(await request.read())
        self.state.requests += 1
        self.state.bodies.append(body)
        faulty = self._faulty()
        scenario = self.config.scenario if faulty else "ok"
        if scenario == "http_500":
            return web.json_response({"error": {"message": "boom"}}, status=500)
        n = int(body["sampling_params"]["max_new_tokens"])
        prompt_len = len(body.get("input_ids") or [])
        self.state.running += 1
        self.state.max_running = max(self.state.max_running, self.state.running)
        try:
            resp = await self._open_stream(request)
            text, ct, counted_down = "", 0, False
            for k in self._chunks(n):
                await asyncio.sleep(self.config.step_s)
                ct += k
                text += self.config.text_piece * k
                if scenario in ("cut", "clean_cut") and ct > n // 2:
                    if scenario == "cut":
                        assert request.transport is not None
                        request.transport.close()  # no terminating chunk: a broken stream
                        return resp
                    await resp.write_eof()  # a clean end without [DONE]
                    return resp
                if scenario == "error_in_stream" and ct > n // 2:
                    await self._send(resp, orjson.dumps({"error": {"message": "KV cache OOM"}}))
                    break
                last = ct == n
                finish: Any = None
                if last and scenario != "no_finish":
                    finish = {"type": "length", "length": n}
                    if scenario == "abort":
                        finish = {"type": "abort", "message": "aborted by test"}
                meta: dict[str, Any] = {
                    "id": "r",
                    "finish_reason": finish,
                    "prompt_tokens": prompt_len,
                    "completion_tokens": ct,
                    "cached_tokens": self.config.cached_tokens,
                }
                if last and self.config.accept_length is not None:
                    meta["spec_accept_length"] = self.config.accept_length
                out = {"text": text, "output_ids": list(range(ct)), "meta_info": meta}
                await self._send(resp, orjson.dumps(out))
                if scenario == "count_down" and ct > n // 2 and not counted_down:
                    counted_down = True
                    meta = {**meta, "completion_tokens": ct - 1}
                    await self._send(resp, orjson.dumps({**out, "meta_info": meta}))
            await self._send(resp, b"[DONE]")
            await resp.write_eof()
            return resp
        finally:
            self.state.running -= 1

    async def openai(self, request: web.Request) -> web.StreamResponse:
        if (denied := self._unauthorized(request)) is not None:
            return denied
        body = orjson.loads(await request.read())
        self.state.requests += 1
        self.state.bodies.append(body)
        chat = request.path.endswith("/chat/completions")
        n = int(body.get("max_completion_tokens") or body.get("max_tokens") or 16)
        scenario = self.config.scenario if self._faulty() else "ok"
        if chat:  # a 4-token chat template around one token per word
            prompt_len = 4 + len(body["messages"][0]["content"].split())
        else:
            prompt_len = len(body["prompt"]) if isinstance(body.get("prompt"), list) else 7
        cont = self.config.continuous_usage and bool(
            (body.get("stream_options") or {}).get("continuous_usage_stats")
        )
        resp = await self._open_stream(request)

        def usage(ct: int) -> dict[str, int]:
            return {"prompt_tokens": prompt_len, "completion_tokens": ct, "total_tokens": ct}

        def chunk(delta: str | None, finish: str | None, ct: int) -> bytes:
            choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
            if chat:
                choice["delta"] = {"content": delta} if delta is not None else {}
            else:
                choice["text"] = delta or ""
            return orjson.dumps(
                {
                    "id": "x",
                    "object": "chunk",
                    "choices": [choice],
                    "usage": usage(ct) if cont else None,
                }
            )

        if chat:
            role = {"role": "assistant", "content": ""}
            first = {"index": 0, "delta": role, "finish_reason": None}
            await self._send(
                resp,
                orjson.dumps({"id": "x", "choices": [first], "usage": usage(0) if cont else None}),
            )
        ct, counted_down = 0, False
        for k in self._chunks(n):
            await asyncio.sleep(self.config.step_s)
            ct += k
            if scenario == "error_in_stream" and ct > n // 2:
                await self._send(resp, orjson.dumps({"object": "error", "message": "boom"}))
                break
            finish = "length" if ct == n and not chat else None
            await self._send(resp, chunk(self.config.text_piece * k, finish, ct))
            if scenario == "count_down" and ct > n // 2 and not counted_down:
                counted_down = True
                await self._send(resp, chunk("", None, ct - 1))
        if chat and scenario != "error_in_stream":
            await self._send(resp, chunk(None, "length", ct))
        final = {**usage(ct), "prompt_tokens_details": {"cached_tokens": self.config.cached_tokens}}
        await self._send(resp, orjson.dumps({"id": "x", "choices": [], "usage": final}))
        await self._send(resp, b"[DONE]")
        await resp.write_eof()
        return resp

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "fake/model"}]})

    async def server_info(self, request: web.Request) -> web.Response:
        if self.config.legacy_info_only and request.path == "/server_info":
            return web.json_response({"detail": "Not Found"}, status=404)
        cfg = self.config
        state: dict[str, Any] = {"effective_max_running_requests_per_dp": cfg.cap}
        if cfg.accept_length is not None:
            state["avg_spec_accept_length"] = cfg.accept_length
        return web.json_response(
            {
                "model_path": "fake/model",
                "version": "0.0-fake",
                "dp_size": 1,
                "max_running_requests": None,
                "speculative_algorithm": "EAGLE" if cfg.accept_length else None,
                "internal_states": [state],
            }
        )

    async def flush(self, request: web.Request) -> web.Response:
        self.state.flushes += 1
        return web.Response(text="Cache flushed.\n", status=self.config.flush_status)

    async def metrics(self, request: web.Request) -> web.Response:
        lines = [
            "# HELP sglang:num_running_reqs The number of running requests.",
            "# TYPE sglang:num_running_reqs gauge",
            f'sglang:num_running_reqs{{model_name="m",tp_rank="0"}} {self.state.running}',
            "# HELP sglang:num_queue_reqs The number of queued requests.",
            "# TYPE sglang:num_queue_reqs gauge",
            'sglang:num_queue_reqs{model_name="m",tp_rank="0"} 0.0',
        ]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)


@contextlib.contextmanager
def running_fake_server(tls: ssl.SSLContext | None = None) -> Iterator[FakeServer]:
    server = FakeServer(tls)
    server.start()
    try:
        yield server
    finally:
        server.stop()
