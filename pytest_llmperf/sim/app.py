"""Which HTTP API a simulated server speaks: SGLang's (default) or vLLM's (``--sim-api``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from pytest_llmperf.sim.http_api import SglangApi
from pytest_llmperf.sim.vllm_api import VllmApi

if TYPE_CHECKING:
    from pytest_llmperf.sim.server import SimServer


def build_app(server: SimServer) -> web.Application:
    """The aiohttp application serving ``server``'s API."""
    api = VllmApi(server) if server.api == "vllm" else SglangApi(server)
    return api.build_app()
