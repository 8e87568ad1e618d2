"""The generation endpoints: ``/generate``, ``/v1/completions`` and ``/v1/chat/completions``.

Each handler parses its body (``bodies.py``), starts one engine sequence per prompt on a
``Stream`` and either streams its events or waits and answers one JSON object, in SGLang's
shapes. The server front subclasses ``GenerationRoutes`` and adds its info endpoints.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from pytest_llmperf.sim.answers import answer
from pytest_llmperf.sim.bodies import (
    RequestError,
    chat_prompt,
    completion_prompt,
    int_field,
    json_response,
    native_prompts,
    read_json,
)
from pytest_llmperf.sim.greedy import greedy_ids, ids_text
from pytest_llmperf.sim.server_api import Server
from pytest_llmperf.sim.wire import CHAT, COMPLETIONS, NATIVE, Gen, Stream, Usage


def whole_ids(gen: Gen) -> list[int]:
    """The ids of a non-streamed answer: greedy, drawn from the prompt (``greedy.py``)."""
    return greedy_ids(gen.prompt_tokens, gen.n, gen.stream.server.knobs)


def native_whole(gen: Gen) -> dict[str, Any]:
    """A non-streamed ``/generate`` answer, with SGLang's ``output_ids``."""
    ids = whole_ids(gen)
    return {"text": ids_text(ids), "output_ids": ids, "meta_info": gen.final_meta()}


class GenerationRoutes:
    """The generation handlers over one server (``SimServer``)."""

    def __init__(self, server: Server) -> None:
        self.server = server

    async def generate(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await read_json(request)
            if not isinstance(body, dict):
                raise RequestError("The request body must be a JSON object.")
            prompts = native_prompts(body)
            sp = body.get("sampling_params") or {}
            if not isinstance(sp, dict):
                raise RequestError("sampling_params must be an object.")
            max_new = int_field(sp, "max_new_tokens", 128)
            ignore_eos = bool(sp.get("ignore_eos", False))
            # SGLang's per-request override of --stream-interval (native API only)
            interval = int_field(sp, "stream_interval", 0)
            if interval < 0:
                raise RequestError(f"stream_interval must be positive, got {interval}")
            streaming = bool(body.get("stream", False))
            max_new = self.server.check_lengths(prompts, max_new)
        except RequestError as e:
            self.server.log.error(f"[http_server] Error: {e}")
            return json_response({"error": {"message": str(e)}}, status=400)
        batch = isinstance(prompts, list)
        plist = prompts if isinstance(prompts, list) else [prompts]
        st = Stream(self.server, NATIVE, streaming, batch=batch)
        rids = body.get("rid")
        for i, prompt in enumerate(plist):
            rid = rids[i] if isinstance(rids, list) and i < len(rids) else None
            if not batch and isinstance(rids, str):
                rid = rids
            self.server.add_gen(
                st,
                str(rid) if rid else self.server.new_rid(),
                prompt,
                max_new,
                ignore_eos,
                interval,
            )
        if st.reject is not None:
            return json_response({"error": {"message": st.reject}}, status=400)
        if streaming:
            return await self.server.serve_stream(request, st)
        await self.server.serve_wait(request, st)
        if st.error or st.cut:
            return json_response({"error": {"message": st.error or "aborted"}}, status=400)
        out = [native_whole(g) for g in st.gens]
        raw = body.get("text")
        for d, text_in in zip(out, raw if isinstance(raw, list) else [raw], strict=False):
            text = answer(text_in, self.server.knobs.sim_accuracy)
            d["text"] = d["text"] if text is None else text
        if batch:
            for i, d in enumerate(out):
                d["index"] = i
            return json_response(out)
        return json_response(out[0])

    async def v1_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._openai(request, COMPLETIONS)

    async def v1_chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._openai(request, CHAT)

    # Hooks the vLLM front (``vllm_api.py``) overrides; these are SGLang's shapes.
    def error_body(self, message: str, err_type: str, code: int, param: str | None = None) -> Any:
        return {
            "object": "error",
            "message": message,
            "type": err_type,
            "param": param,
            "code": code,
        }

    def check_model(self, body: dict[str, Any]) -> web.Response | None:
        """SGLang serves any ``model`` name; vLLM answers 404 for one it does not serve."""
        return None

    def response_model(self, body: dict[str, Any]) -> str:
        return str(body.get("model") or "default")

    def openai_response(self, st: Stream, kind: int) -> dict[str, Any]:
        gen = st.gens[0]
        fr = gen.finish_reason or {}
        return self.openai_body(
            st,
            kind,
            choice_tail={"finish_reason": fr.get("type"), "matched_stop": fr.get("matched")},
            usage=Usage(gen.prompt_len, gen.n, gen.reported_cached()).as_dict(),
            body_tail={"metadata": {"weight_version": "default"}},
            tool_calls=None,
        )

    @staticmethod
    def openai_body(
        st: Stream,
        kind: int,
        *,
        choice_tail: dict[str, Any],
        usage: dict[str, Any],
        body_tail: dict[str, Any],
        tool_calls: list[Any] | None,
    ) -> dict[str, Any]:
        """A non-streamed OpenAI answer with the stream's first sequence as its one choice.

        SGLang and vLLM share this shape and differ only in what ends a choice
        (``choice_tail``), what ends the body (``body_tail``) and how a chat message without
        tool calls reports them (``tool_calls``); key order is kept as each engine sends it.
        """
        text = ids_text(whole_ids(st.gens[0]))
        if kind == COMPLETIONS:
            choice: dict[str, Any] = {"index": 0, "text": text, "logprobs": None, **choice_tail}
            obj = "text_completion"
        else:
            message = {
                "role": "assistant",
                "content": text,
                "reasoning_content": None,
                "tool_calls": tool_calls,
            }
            choice = {"index": 0, "message": message, "logprobs": None, **choice_tail}
            obj = "chat.completion"
        return {
            "id": st.oai_id,
            "object": obj,
            "created": st.created,
            "model": st.model,
            "choices": [choice],
            "usage": usage,
            **body_tail,
        }

    def _error(self, message: str, err_type: str, code: int) -> web.Response:
        return json_response(self.error_body(message, err_type, code), status=code)

    async def _openai(self, request: web.Request, kind: int) -> web.StreamResponse:
        server = self.server
        try:
            ctype = request.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
            if ctype != "application/json":
                raise RequestError(
                    "[{'loc': ['header', 'content-type'], 'msg': \"Unsupported Media Type: "
                    "Only 'application/json' is allowed\", 'type': 'value_error'}]"
                )
            body = await read_json(request)
            if not isinstance(body, dict):
                raise RequestError("The request body must be a JSON object.")
            not_served = self.check_model(body)
            if not_served is not None:
                return not_served
            if kind == COMPLETIONS:
                prompt = completion_prompt(body.get("prompt"))
                max_new = int_field(body, "max_tokens", 16)
            else:
                per_msg, const = server.knobs.sim_chat_template_overhead
                prompt = chat_prompt(body.get("messages"), per_msg, const)
                mct = body.get("max_completion_tokens")
                max_new = (
                    int_field(body, "max_completion_tokens", 16)
                    if mct is not None
                    else int_field(body, "max_tokens", 16)
                )
            if max_new <= 0:
                raise RequestError("max_tokens must be positive")
            if int(body.get("n", 1) or 1) != 1:
                raise RequestError("The simulator supports only n=1.")
            max_new = server.check_lengths(prompt, max_new)
        except RequestError as e:
            return self._error(str(e), "BadRequestError", 400)
        streaming = bool(body.get("stream", False))
        so = body.get("stream_options") or {}
        st = Stream(
            server,
            kind,
            streaming,
            model=self.response_model(body),
            include_usage=bool(isinstance(so, dict) and so.get("include_usage")),
            continuous_usage=bool(isinstance(so, dict) and so.get("continuous_usage_stats")),
            vllm=server.api == "vllm",
        )
        st.prepare_openai()
        server.add_gen(st, st.oai_id, prompt, max_new, bool(body.get("ignore_eos", False)))
        if st.reject is not None:
            return self._error(st.reject, "BadRequestError", 400)
        if streaming:
            return await server.serve_stream(request, st)
        await server.serve_wait(request, st)
        if st.error or st.cut:
            return self._error(st.error or "aborted", "InternalServerError", 500)
        reply = self.openai_response(st, kind)
        asked = body.get("prompt") if kind == COMPLETIONS else _last_user(body)
        asked = asked[0] if isinstance(asked, list) and len(asked) == 1 else asked
        text = answer(asked, server.knobs.sim_accuracy)
        if text is not None:
            choice = reply["choices"][0]
            if kind == COMPLETIONS:
                choice["text"] = text
            else:
                choice["message"]["content"] = text
        return json_response(reply)


def _last_user(body: dict[str, Any]) -> Any:
    """The content of a chat request's last message (where a probe's prompt goes)."""
    msgs = body.get("messages")
    last = msgs[-1] if isinstance(msgs, list) and msgs else None
    return last.get("content") if isinstance(last, dict) else None
