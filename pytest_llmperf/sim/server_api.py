"""The contract between the simulated server (``sim/server.py``) and what it is built from.

The HTTP fronts (``http_api``, ``vllm_api``, ``generation``, ``app``) and the Prometheus pages
(``prom``) read the server's state and hand it requests; the server builds them. Naming the
server here, not its class, keeps that one direction: ``server.py`` imports its parts and no
part imports ``server.py``. ``SimServer`` satisfies ``Server`` structurally (mypy checks it
where the server hands itself to a part).
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from aiohttp import web

from pytest_llmperf.sim.bodies import Prompt
from pytest_llmperf.sim.engine_api import Engine
from pytest_llmperf.sim.faults import Faults
from pytest_llmperf.sim.prefix_cache import PrefixCache
from pytest_llmperf.sim.wire import Gen, Stream, StreamOwner


class MetricsPage(Protocol):
    """A ``/metrics`` page: SGLang's or vLLM's (``prom.py``)."""

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type."""


class Server(StreamOwner, Protocol):
    """What the routes and metrics read from the server and ask of it."""

    api: str  # "sglang" or "vllm": which HTTP API it speaks
    log: logging.Logger
    faults: Faults
    engine: Engine
    prefix_cache: PrefixCache | None
    served_model_name: str
    spec_algorithm: str | None
    trust_remote_code: bool
    cuda_visible_devices: str | None
    port: int
    ready: bool
    hung: bool
    write_times: dict[str, list[float | None]]
    cached_by_rid: dict[str, int]

    @property
    def metrics(self) -> MetricsPage | None: ...

    def context_len(self) -> int | None: ...

    def server_counters(self) -> dict[str, Any]: ...

    def check_lengths(self, prompts: Prompt | list[Prompt], max_new: int) -> int:
        """Raise ``RequestError`` for a prompt longer than the context; else the max_new_tokens
        to generate (capped as SGLang's scheduler caps it)."""

    def new_rid(self) -> str: ...

    def add_gen(
        self,
        st: Stream,
        rid: str,
        prompt: Prompt,
        max_new: int,
        ignore_eos: bool,
        stream_interval: int = 0,
    ) -> Gen:
        """Hand one sequence of ``st`` to the engine."""

    async def serve_stream(self, request: web.Request, st: Stream) -> web.StreamResponse:
        """Write ``st``'s events as they come."""

    async def serve_wait(self, request: web.Request, st: Stream) -> None:
        """Wait for all of ``st``'s sequences (non-streaming)."""
