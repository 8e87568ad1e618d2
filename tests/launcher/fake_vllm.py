"""A tiny vLLM-shaped server: only vLLM's routes, 404 everywhere else, 404 for a wrong model.

Routes as vLLM's OpenAI server has them: ``GET /health`` (503 while "loading"), ``GET
/v1/models`` (``owned_by: "vllm"``), streaming ``POST /v1/completions`` and
``/v1/chat/completions`` (continuous usage stats), ``GET /metrics`` and, in dev mode only,
``POST /reset_prefix_cache``. No ``/generate``, ``/health_generate``, ``/flush_cache`` or
``/server_info``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

SERVED = "small"


@dataclass
class VllmState:
    paths: list[str] = field(default_factory=list)
    models_asked: list[str] = field(default_factory=list)
    resets: int = 0


class FakeVllm:
    def __init__(self, *, loading_polls: int = 0, dev_mode: bool = True) -> None:
        self.loading_polls = loading_polls  # /health answers 503 this many times first
        self.dev_mode = dev_mode  # vLLM has /reset_prefix_cache only with VLLM_SERVER_DEV_MODE
        self.state = VllmState()
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> FakeVllm:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fake vLLM did not start within 10 s")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        app = web.Application(middlewares=[self._record])
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/completions", self.complete)
        app.router.add_post("/v1/chat/completions", self.complete)
        app.router.add_get("/metrics", self.metrics)
        if self.dev_mode:
            app.router.add_post("/reset_prefix_cache", self.reset)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.state.paths.append(f"{request.method} {request.path}")
        return await handler(request)  # type: ignore[no-any-return]

    async def health(self, request: web.Request) -> web.Response:
        if self.loading_polls > 0:
            self.loading_polls -= 1
            return web.Response(status=503)
        return web.Response(status=200)

    async def models(self, request: web.Request) -> web.Response:
        card = {"id": SERVED, "object": "model", "created": int(time.time()), "owned_by": "vllm"}
        return web.json_response({"object": "list", "data": [card]})

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(text="vllm:num_requests_running 0.0\n")

    async def reset(self, request: web.Request) -> web.Response:
        self.state.resets += 1
        return web.Response(status=200)

    async def complete(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        model = body.get("model")
        self.state.models_asked.append(str(model))
        if model != SERVED:  # vLLM's _check_model: 404 NotFoundError
            return web.json_response(
                {
                    "object": "error",
                    "message": f"The model `{model}` does not exist.",
                    "type": "NotFoundError",
                    "code": 404,
                },
                status=404,
            )
        chat = request.path.endswith("/chat/completions")
        n = int(body.get("max_tokens") or body.get("max_completion_tokens") or 4)
        prompt = body.get("prompt")
        n_in = len(prompt) if isinstance(prompt, list) else 8
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(1, n + 1):
            choice: dict[str, Any] = {"index": 0, "finish_reason": "length" if i == n else None}
            if chat:
                choice["delta"] = {"content": "x"}
            else:
                choice["text"] = "x"
            usage = {"prompt_tokens": n_in, "completion_tokens": i, "total_tokens": n_in + i}
            event = {"id": "cmpl-1", "model": SERVED, "choices": [choice], "usage": usage}
            await resp.write(b"data: " + orjson.dumps(event) + b"\n\n")
            await asyncio.sleep(0.001)
        usage = {"prompt_tokens": n_in, "completion_tokens": n, "total_tokens": n_in + n}
        final = {"id": "cmpl-1", "model": SERVED, "choices": [], "usage": usage}
        await resp.write(b"data: " + orjson.dumps(final) + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp
