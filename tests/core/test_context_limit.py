"""The context one request gets, from the answers real servers give (captured or documented)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx

from pytest_llmperf.core.context_limit import (
    context_from_models,
    context_from_props,
    request_context,
)

CAPTURES = Path(__file__).resolve().parents[1] / "data" / "sglang-0.5.23"
# llama-server -c 256 -np 4: /props reports one slot's context (its shape as llama.cpp's server
# sends it, trimmed), 256 / 4 = 64 tokens per request.
LLAMA_PROPS = {
    "default_generation_settings": {"id": 0, "n_ctx": 64, "params": {"n_predict": -1}},
    "total_slots": 4,
    "model_path": "small.gguf",
}


def test_sglang_0_5_23_v1_models_carries_the_context_length() -> None:
    models = json.loads((CAPTURES / "v1_models.json").read_text())
    assert context_from_models(models) == (4096, "/v1/models max_model_len")
    # /server_info's context_length is the flag as given (None: the model's own)
    info = json.loads((CAPTURES / "server_info.json").read_text())
    assert info["context_length"] is None


def test_llama_props_is_one_slots_context() -> None:
    assert context_from_props(LLAMA_PROPS) == (64, "/props n_ctx per slot of 4 slots")
    assert context_from_props({"default_generation_settings": {"n_ctx": 0}}) == (None, None)
    assert context_from_props("<html>") == (None, None)
    assert context_from_models({"data": [{"id": "m"}]}) == (None, None)


def _serve(routes: dict[str, Any]) -> httpx.AsyncClient:
    def handler(request: httpx.Request) -> httpx.Response:
        body = routes.get(request.url.path)
        return httpx.Response(404) if body is None else httpx.Response(200, json=body)

    return httpx.AsyncClient(base_url="http://server", transport=httpx.MockTransport(handler))


def test_props_first_then_v1_models_then_unknown() -> None:
    models = {"data": [{"id": "m", "max_model_len": 8192}]}

    async def ask(routes: dict[str, Any]) -> tuple[int | None, str | None]:
        async with _serve(routes) as http:
            return await request_context(http)

    assert asyncio.run(ask({"/props": LLAMA_PROPS, "/v1/models": models}))[0] == 64
    assert asyncio.run(ask({"/v1/models": models})) == (8192, "/v1/models max_model_len")
    assert asyncio.run(ask({})) == (None, None)
