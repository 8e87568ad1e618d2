"""Which HTTP API a simulated server speaks: SGLang's (default) or vLLM's (``--sim-api``)."""

from __future__ import annotations

from aiohttp import web

from pytest_llmperf.sim.http_api import SglangApi
from pytest_llmperf.sim.server_api import Server
from pytest_llmperf.sim.vllm_api import VllmApi


def build_app(server: Server) -> web.Application:
    """The aiohttp application serving ``server``'s API."""
    api = VllmApi(server) if server.api == "vllm" else SglangApi(server)
    return api.build_app()
