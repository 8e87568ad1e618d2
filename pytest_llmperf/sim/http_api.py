"""SGLang's HTTP API: the aiohttp app, its routes, middlewares and info endpoints.

FastAPI-shaped 404/405 bodies, SGLang's api-key check, ``/health``, ``/model_info``,
``/server_info``, ``/flush_cache``, ``/v1/models``, ``/metrics`` and the simulator's own
``/_sim/*`` debug endpoints. Generation handlers come from ``generation.GenerationRoutes``.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from pytest_llmperf.sim.bodies import json_response
from pytest_llmperf.sim.generation import GenerationRoutes

# A plausible SGLang release; /server_info also says "simulated": true so nobody is fooled.
SGLANG_VERSION = "0.5.9"
FLUSH_TEXT = (
    "Cache flushed.\nPlease check backend logs for more details. (When there are running or "
    "waiting requests, the operation will not be performed.)\n"
)


def _captured_bs(max_bs: int) -> list[int]:
    """Decode batch sizes captured as CUDA graphs up to ``max_bs`` (SGLang's default list
    steps by 1 to 16, then wider; only its largest entry is read by clients)."""
    return sorted({*range(1, min(max_bs, 16) + 1), *range(16, max_bs + 1, 8), max_bs} - {0})


def _const_eq(a: str, b: str) -> bool:
    return secrets.compare_digest(a.encode(), b.encode())


class SglangApi(GenerationRoutes):
    """SGLang's routes over one ``SimServer``."""

    def new_app(self) -> web.Application:
        """An empty app with the error bodies and, with ``--api-key``, the key check."""
        middlewares = [self._errors_middleware]
        if self.server.knobs.api_key:
            middlewares.append(self._auth_middleware)
        return web.Application(middlewares=middlewares, client_max_size=64 * 1024**2)

    def build_app(self) -> web.Application:
        app = self.new_app()
        r = app.router
        for path in ("/health", "/health_generate"):
            r.add_get(path, self.health)
        for path in ("/model_info", "/get_model_info"):
            r.add_get(path, self.model_info)
        for path in ("/server_info", "/get_server_info"):
            r.add_get(path, self.server_info)
        r.add_route("GET", "/flush_cache", self.flush_cache)
        r.add_route("POST", "/flush_cache", self.flush_cache)
        r.add_get("/v1/models", self.v1_models)
        r.add_route("POST", "/generate", self.generate)
        r.add_route("PUT", "/generate", self.generate)
        r.add_post("/v1/completions", self.v1_completions)
        r.add_post("/v1/chat/completions", self.v1_chat_completions)
        r.add_get("/ping", self.ping)
        if self.server.metrics is not None:
            r.add_get("/metrics", self.metrics_handler)
        r.add_get("/_sim/ground_truth", self.sim_ground_truth)
        r.add_get("/_sim/stats", self.sim_stats)
        return app

    @web.middleware
    async def _errors_middleware(
        self, request: web.Request, handler: Callable[[web.Request], Any]
    ) -> web.StreamResponse:
        """FastAPI's JSON 404/405 bodies, and the http-500 fault."""
        if self.server.faults.http_500 and (
            request.path == "/generate" or request.path.startswith("/v1/")
        ):
            return json_response(
                {
                    "object": "error",
                    "message": "Internal Server Error (simulated: --sim-fault http-500)",
                    "type": "InternalServerError",
                    "param": None,
                    "code": 500,
                },
                status=500,
            )
        try:
            resp: web.StreamResponse = await handler(request)
            return resp
        except web.HTTPNotFound:
            return json_response({"detail": "Not Found"}, status=404)
        except web.HTTPMethodNotAllowed:
            return json_response({"detail": "Method Not Allowed"}, status=405)

    @web.middleware
    async def _auth_middleware(
        self, request: web.Request, handler: Callable[[web.Request], Any]
    ) -> web.StreamResponse:
        """SGLang's api-key check: Bearer (or x-api-key); /health*, /metrics, OPTIONS exempt."""
        path = request.path
        if (
            request.method == "OPTIONS"
            or path.startswith("/health")
            or path.startswith("/ready")
            or path.startswith("/metrics")
            or path.startswith("/_sim/")
        ):
            resp: web.StreamResponse = await handler(request)
            return resp
        key = self.server.knobs.api_key or ""
        ok = False
        authz = request.headers.get("Authorization")
        if authz:
            scheme, _, token = authz.partition(" ")
            ok = scheme.lower() == "bearer" and _const_eq(token, key)
        if not ok:
            x_key = request.headers.get("x-api-key")
            ok = bool(x_key) and _const_eq(x_key or "", key)
        if not ok:
            return json_response({"error": "Unauthorized"}, status=401)
        resp = await handler(request)
        return resp

    async def health(self, request: web.Request) -> web.Response:
        # SGLang answers 503 until warmup succeeded; a stalled engine makes its 1-token
        # health generate time out, which the hang fault mirrors with an immediate 503.
        if not self.server.ready or self.server.hung:
            return web.Response(status=503)
        return web.Response(status=200)

    async def ping(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def model_info(self, request: web.Request) -> web.Response:
        if request.path == "/get_model_info":
            self.server.log.warning(
                "Endpoint '/get_model_info' is deprecated and will be removed in a future "
                "version. Please use '/model_info' instead."
            )
        return json_response(
            {
                "model_path": self.server.knobs.model_path,
                "tokenizer_path": self.server.knobs.model_path,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": "default",
                "has_image_understanding": False,
                "has_audio_understanding": False,
                "model_type": None,
                "architectures": self._architectures(),
                "served_model_name": self.server.served_model_name,
            }
        )

    def _architectures(self) -> list[str] | None:
        profile = getattr(getattr(self.server.engine, "model", None), "profile", None)
        arch = getattr(getattr(profile, "model", None), "architecture", None)
        return [arch] if isinstance(arch, str) else None

    def server_args(self) -> dict[str, Any]:
        """The flat server-args dict SGLang's /server_info starts with (a relevant subset)."""
        k = self.server.knobs
        args: dict[str, Any] = {
            "model_path": k.model_path,
            "tokenizer_path": k.model_path,
            "served_model_name": self.server.served_model_name,
            "trust_remote_code": self.server.trust_remote_code,
            "context_length": k.context_length,
            "host": k.host,
            "port": self.server.port,
            "mem_fraction_static": k.mem_fraction_static,
            "max_running_requests": k.max_running_requests,
            "max_total_tokens": k.max_total_tokens,
            "chunked_prefill_size": k.chunked_prefill_size,
            "device": "cuda",
            "tp_size": k.tp_size,
            "pp_size": 1,
            "dp_size": k.dp_size,
            "stream_interval": k.stream_interval,
            "stream_output": False,
            "random_seed": k.sim_seed,
            "base_gpu_id": 0,
            "gpu_id_step": 1,
            "log_level": k.log_level,
            "enable_metrics": k.enable_metrics,
            "decode_log_interval": k.decode_log_interval,
            "api_key": k.api_key,
            "speculative_algorithm": self.server.spec_algorithm,
            "speculative_draft_model_path": k.speculative_draft_model_path,
            "speculative_num_steps": k.speculative_num_steps,
            "speculative_eagle_topk": k.speculative_eagle_topk,
            "speculative_num_draft_tokens": k.speculative_num_draft_tokens,
            "cuda_graph_max_bs": k.cuda_graph_max_bs,
            "disable_cuda_graph": k.disable_cuda_graph,
            "skip_server_warmup": k.skip_server_warmup,
            "enable_deterministic_inference": k.enable_deterministic_inference,
        }
        # The engine resolves "auto" values as SGLang's ServerArgs does (e.g. the 48 cap).
        m = getattr(self.server.engine, "model", None)
        if m is not None:
            args["tp_size"] = m.tp_size
            args["mem_fraction_static"] = m.mem_fraction_static
            args["chunked_prefill_size"] = m.chunked_prefill_size
            args["cuda_graph_max_bs"] = m.cuda_graph_max_bs
            args["cuda_graph_config"] = {
                "decode": {
                    "backend": "full" if m.cuda_graph_enabled else "disabled",
                    "max_bs": m.cuda_graph_max_bs,
                    "bs": _captured_bs(m.cuda_graph_max_bs),
                }
            }
            spec = m.spec
            if spec is not None:
                args["speculative_num_steps"] = spec.num_steps
                args["speculative_eagle_topk"] = spec.eagle_topk
                args["speculative_num_draft_tokens"] = spec.num_draft_tokens
                if k.max_running_requests is None:
                    args["max_running_requests"] = 48
        return args

    async def server_info(self, request: web.Request) -> web.Response:
        if self.server.faults.server_info_html:
            return web.Response(
                text="<html><body>502 Bad Gateway</body></html>", content_type="text/html"
            )
        if request.path == "/get_server_info":
            self.server.log.warning(
                "Endpoint '/get_server_info' is deprecated and will be removed in a future "
                "version. Please use '/server_info' instead."
            )
        s = self.server.engine.stats()
        args = self.server_args()
        dp = max(1, self.server.knobs.dp_size)
        mem = {
            "weight": 0.0,
            "kvcache": 0.0,
            "token_capacity": s.max_total_num_tokens,
            "graph": 0.0,
        }
        mem_gb = getattr(getattr(self.server.engine, "model", None), "memory_gb", None)
        if isinstance(mem_gb, dict):
            mem.update({k: v for k, v in mem_gb.items() if k in ("weight", "kvcache", "graph")})
        m = getattr(self.server.engine, "model", None)
        states = []
        for _ in range(dp):
            state: dict[str, Any] = dict(args)
            state["last_gen_throughput"] = s.last_gen_throughput
            state["memory_usage"] = dict(mem)
            state["effective_max_running_requests_per_dp"] = max(
                1, s.effective_max_running_requests // dp
            )
            if m is not None:
                graphs = m.cuda_graph_enabled and m.cuda_graph_max_bs > 0
                state["decode_cuda_graph_bs"] = _captured_bs(m.cuda_graph_max_bs) if graphs else []
            if self.server.spec_on and s.avg_spec_accept_length is not None:
                state["avg_spec_accept_length"] = s.avg_spec_accept_length
            states.append(state)
        ctx = self.server.context_len()
        max_req_input = min(ctx, s.max_total_num_tokens) - 1 if ctx else s.max_total_num_tokens - 1
        info: dict[str, Any] = {
            **args,
            "status": "ready",
            "max_total_num_tokens": s.max_total_num_tokens,
            "max_req_input_len": max_req_input,
            "internal_states": states,
            "version": self.server.knobs.sim_version or SGLANG_VERSION,
            # Simulator-only fields: never present on a real SGLang server.
            "simulated": True,
            "sim_profile": self._profile_name(),
            "sim_cuda_visible_devices": self.server.cuda_visible_devices,
            "sim_faults": self.server.faults.describe(),
        }
        return json_response(info)

    def _profile_name(self) -> str | None:
        profile = getattr(getattr(self.server.engine, "model", None), "profile", None)
        name = getattr(profile, "name", None)
        return name if isinstance(name, str) else self.server.knobs.sim_profile

    async def flush_cache(self, request: web.Request) -> web.Response:
        if self.server.engine.is_idle():
            self.server.engine.reset_metrics()
            if self.server.prefix_cache is not None:
                self.server.prefix_cache.clear()
            self.server.log.info("Cache flushed successfully!")
            return web.Response(text=FLUSH_TEXT, status=200)
        s = self.server.engine.stats()
        self.server.log.warning(
            "Cache not flushed because there are pending requests. "
            f"#queue-req: {s.num_queued}, #running-req: {s.num_running}"
        )
        return web.Response(text=FLUSH_TEXT, status=400)

    async def v1_models(self, request: web.Request) -> web.Response:
        return json_response(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.server.served_model_name,
                        "object": "model",
                        "created": int(time.time()),
                        "owned_by": "sglang",
                        "root": self.server.served_model_name,
                        "parent": None,
                        "max_model_len": self.server.context_len(),
                    }
                ],
            }
        )

    async def metrics_handler(self, request: web.Request) -> web.Response:
        assert self.server.metrics is not None
        body, ctype = self.server.metrics.render()
        return web.Response(body=body, headers={"Content-Type": ctype})

    async def sim_ground_truth(self, request: web.Request) -> web.Response:
        gt = dict(self.server.engine.ground_truth())
        fields = gt.get("fields")
        if isinstance(fields, list) and "rid" in fields:
            # the HTTP front's side: when the first and last token events were written
            i = fields.index("rid")
            none = (None, None)
            gt["fields"] = [*fields, "t_first_write", "t_last_write", "cached_tokens"]
            gt["requests"] = [
                [
                    *row,
                    *self.server.write_times.get(row[i], none),
                    self.server.cached_by_rid.get(row[i], 0),
                ]
                for row in gt["requests"]
            ]
        gt["server"] = self.server.server_counters()
        return json_response(gt)

    async def sim_stats(self, request: web.Request) -> web.Response:
        s = self.server.engine.stats()
        return json_response(
            {"engine": dataclasses.asdict(s), "server": self.server.server_counters()},
        )
