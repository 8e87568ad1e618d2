"""vLLM's OpenAI-compatible front (``--sim-api vllm``): its routes and JSON shapes only.

Checked against vllm-project/vllm ``vllm/entrypoints/openai/api_server.py`` (routes),
``engine/serving.py`` ``_check_model`` (404 for a model not served) and ``engine/protocol.py``
(``ErrorResponse`` = ``{"error": {message, type, param, code}}``, ``UsageInfo``,
``ModelCard``). SGLang's own routes (``/generate``, ``/server_info``, ``/flush_cache``, ...)
are not served and answer FastAPI's 404.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from aiohttp import web

from pytest_llmperf.sim.bodies import json_response
from pytest_llmperf.sim.http_api import SglangApi
from pytest_llmperf.sim.vllm_wire import reported_cached, vllm_usage
from pytest_llmperf.sim.wire import COMPLETIONS, Stream

# A plausible vLLM release for GET /version.
VLLM_VERSION = "0.11.0"


class VllmApi(SglangApi):
    """vLLM's routes over one ``SimServer``; generation is shared with the SGLang front."""

    def build_app(self) -> web.Application:
        app = self.new_app()
        r = app.router
        r.add_get("/health", self.health)
        r.add_get("/v1/models", self.v1_models)
        r.add_get("/version", self.version)
        r.add_post("/v1/completions", self.v1_completions)
        r.add_post("/v1/chat/completions", self.v1_chat_completions)
        r.add_post("/reset_prefix_cache", self.reset_prefix_cache)
        r.add_get("/metrics", self.metrics_handler)
        r.add_get("/_sim/ground_truth", self.sim_ground_truth)
        r.add_get("/_sim/stats", self.sim_stats)
        return app

    # --------------------------------------------------------------- hooks
    def error_body(self, message: str, err_type: str, code: int, param: str | None = None) -> Any:
        return {"error": {"message": message, "type": err_type, "param": param, "code": code}}

    def check_model(self, body: dict[str, Any]) -> web.Response | None:
        model = body.get("model")
        if not model or model == self.server.served_model_name:
            return None  # vLLM's _is_model_supported: no model means the served one
        return json_response(
            self.error_body(
                f"The model `{model}` does not exist.", "NotFoundError", 404, param="model"
            ),
            status=404,
        )

    def response_model(self, body: dict[str, Any]) -> str:
        return self.server.served_model_name

    def openai_response(self, st: Stream, kind: int) -> dict[str, Any]:
        gen = st.gens[0]
        usage = vllm_usage(gen.prompt_len, gen.n)
        cached = reported_cached(gen)
        usage["prompt_tokens_details"] = {"cached_tokens": cached} if cached else None
        choice_tail: dict[str, Any] = {
            "finish_reason": (gen.finish_reason or {}).get("type"),
            "stop_reason": None,
        }
        if kind == COMPLETIONS:
            choice_tail["prompt_logprobs"] = None  # only completions choices carry it
        return self.openai_body(
            st,
            kind,
            choice_tail=choice_tail,
            usage=usage,
            body_tail={"prompt_logprobs": None},
            tool_calls=[],
        )

    # ------------------------------------------------------------ endpoints
    async def health(self, request: web.Request) -> web.Response:
        # vLLM answers 200 with an empty body once the engine is up.
        if not self.server.ready or self.server.hung:
            return web.Response(status=503)
        return web.Response(status=200)

    async def version(self, request: web.Request) -> web.Response:
        return json_response({"version": self.server.knobs.sim_version or VLLM_VERSION})

    async def reset_prefix_cache(self, request: web.Request) -> web.Response:
        if self.server.prefix_cache is not None:
            self.server.prefix_cache.clear()
        self.server.log.info("Resetting prefix cache with specific None...")
        return web.Response(status=200)

    async def v1_models(self, request: web.Request) -> web.Response:
        name = self.server.served_model_name
        now = int(time.time())
        card = {
            "id": name,
            "object": "model",
            "created": now,
            "owned_by": "vllm",
            "root": self.server.knobs.model_path,
            "parent": None,
            "max_model_len": self.server.context_len(),
            "permission": [
                {
                    "id": f"modelperm-{uuid.uuid4().hex}",
                    "object": "model_permission",
                    "created": now,
                    "allow_create_engine": False,
                    "allow_sampling": True,
                    "allow_logprobs": True,
                    "allow_search_indices": False,
                    "allow_view": True,
                    "allow_fine_tuning": False,
                    "organization": "*",
                    "group": None,
                    "is_blocking": False,
                }
            ],
        }
        return json_response({"object": "list", "data": [card]})
