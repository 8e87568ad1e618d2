"""The simulator as a test double: a ``SimServer`` in-process, and its vLLM front recording
what it was asked.

Tests outside ``tests/sim`` that need a well-behaved SGLang- or vLLM-shaped server use the
simulator itself rather than a fake of their own; the fakes left in ``tests/`` exist because
they misbehave in ways the simulator does not (byte-level stream shapes in
``tests/core/fake_server.py``, process faults in ``tests/launch/fixtures/fake_sglang``).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from pytest_llmperf.sim.args import parse_args
from pytest_llmperf.sim.faults import Faults
from pytest_llmperf.sim.knobs import ServerKnobs
from pytest_llmperf.sim.server import SimServer


class ServerThread:
    """A ``SimServer`` on its own event loop in a daemon thread, bound to a free port."""

    def __init__(self, server: SimServer) -> None:
        self.server = server
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.exit_codes: list[int] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the server's loop (engine state is not thread-safe)."""

        async def _do() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(_do(), self.loop).result(5)

    def start(self, wait_ready: bool = True) -> ServerThread:
        self.thread.start()
        fut = asyncio.run_coroutine_threadsafe(
            self.server.start(host="127.0.0.1", port=0), self.loop
        )
        fut.result(10)
        if wait_ready:
            deadline = time.monotonic() + 10
            while not self.server.ready:
                assert time.monotonic() < deadline, "server did not become ready"
                time.sleep(0.01)
        return self

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@contextlib.contextmanager
def running_sim(*flags: str) -> Iterator[ServerThread]:
    """``python -m pytest_llmperf.sim *flags`` (SGLang's front) in-process, until the block ends."""
    thread = ServerThread(SimServer(parse_args(list(flags)).knobs)).start()
    try:
        yield thread
    finally:
        thread.stop()


@dataclass
class Requests:
    """What a ``VllmSim`` was asked, in order."""

    paths: list[str] = field(default_factory=list)  # "GET /health", ...
    models_asked: list[str] = field(default_factory=list)  # "model" of each generation body

    @property
    def resets(self) -> int:
        return self.paths.count("POST /reset_prefix_cache")


class VllmSim:
    """``python -m pytest_llmperf.sim --sim-api vllm`` in-process, serving ``served``.

    ``loading_polls``: ``/health`` answers 503 that many times first (the sim's own not-ready
    answer, held until then). ``dev_mode=False``: no ``/reset_prefix_cache``, as vLLM without
    ``VLLM_SERVER_DEV_MODE`` (FastAPI's 404).
    """

    def __init__(self, served: str, *, loading_polls: int = 0, dev_mode: bool = True) -> None:
        self.requests = Requests()
        self._loading = loading_polls
        self._dev_mode = dev_mode
        knobs = ServerKnobs(port=0, sim_api="vllm", served_model_name=served, model_path=served)
        # hang-on-start keeps the server loading; the recorder marks it ready when due.
        self._sim = SimServer(knobs, faults=Faults(hang_on_start=loading_polls > 0))
        self._sim.app.middlewares.insert(0, self._record)
        self._thread = ServerThread(self._sim)

    @property
    def url(self) -> str:
        return self._thread.url

    def __enter__(self) -> VllmSim:
        self._thread.start(wait_ready=self._loading == 0)
        return self

    def __exit__(self, *exc: object) -> None:
        self._thread.stop()

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.requests.paths.append(f"{request.method} {request.path}")
        if request.path == "/health" and not self._sim.ready:
            if self._loading <= 0:
                self._sim.ready = True
            self._loading -= 1
        if request.path == "/reset_prefix_cache" and not self._dev_mode:
            return web.json_response({"detail": "Not Found"}, status=404)
        if request.method == "POST" and request.path.startswith("/v1/"):
            body = orjson.loads(await request.read())  # aiohttp keeps it for the handler
            self.requests.models_asked.append(str(body.get("model")))
        return await handler(request)
