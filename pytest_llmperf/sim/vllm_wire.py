"""vLLM's OpenAI stream chunks, as ``chat_completion/serving.py`` and ``completion/serving.py``
of vllm-project/vllm write them.

Chat chunks are dumped with ``exclude_unset=True``: the role chunk's delta is
``{"role":"assistant","content":""}``, token chunks' ``{"content":...}``, the last token chunk
adds ``finish_reason`` and ``stop_reason``, and ``usage`` appears only with
``stream_options.continuous_usage_stats``. Completion chunks are dumped in full
(``"usage": null`` unless continuous). With ``include_usage`` a last chunk with
``"choices": []`` and the usage (``exclude_none``) precedes ``[DONE]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from pytest_llmperf.sim.wire import CHAT, DONE, token_text

if TYPE_CHECKING:
    from pytest_llmperf.sim.wire import Gen, Stream


def vllm_usage(prompt: int, completion: int, cached: int | None = None) -> dict[str, Any]:
    """vLLM's UsageInfo field order; ``prompt_tokens_details`` only when reported."""
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
    }
    if cached:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return usage


def reported_cached(gen: Gen) -> int:
    """vLLM reports cached tokens only with --enable-prompt-tokens-details."""
    return gen.cached if gen.stream.server.knobs.enable_prompt_tokens_details else 0


def _chunk(st: Stream, choices: list[dict[str, Any]], usage: dict[str, Any] | None) -> bytes:
    obj: dict[str, Any] = {
        "id": st.oai_id,
        "object": "chat.completion.chunk" if st.kind == CHAT else "text_completion",
        "created": st.created,
        "model": st.model,
        "choices": choices,
    }
    if st.kind != CHAT or usage is not None:
        obj["usage"] = usage  # completion chunks always carry it (null); chat ones when set
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def vllm_event(st: Stream, gen: Gen, start: int, stop: int, fin: bool) -> None:
    """Queue the chunk(s) for output tokens [start, stop) of ``gen``."""
    usage = vllm_usage(gen.prompt_len, stop) if st.continuous_usage else None
    reason = (gen.finish_reason or {}).get("type", "length") if fin else None
    if st.kind == CHAT:
        if not st.role_sent:
            st.role_sent = True
            first: dict[str, Any] = {
                "index": 0,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": None,
                "finish_reason": None,
            }
            role_usage = vllm_usage(gen.prompt_len, 0) if st.continuous_usage else None
            st.pending.append(_chunk(st, [first], role_usage))
        choice: dict[str, Any] = {
            "index": 0,
            "delta": {"content": token_text(start, stop)} if stop > start else {},
            "logprobs": None,
            "finish_reason": reason,
        }
    else:
        choice = {
            "index": 0,
            "text": token_text(start, stop),
            "logprobs": None,
            "finish_reason": reason,
            "stop_reason": None,
        }
    if fin and st.kind == CHAT:
        choice["stop_reason"] = None
    st.pending.append(_chunk(st, [choice], usage))


def vllm_stream_tail(st: Stream) -> None:
    """The usage chunk (if asked for) and ``[DONE]``."""
    if st.include_usage:
        gen = st.gens[0]
        usage = vllm_usage(gen.prompt_len, gen.n, reported_cached(gen))
        obj: dict[str, Any] = {
            "id": st.oai_id,
            "object": "chat.completion.chunk" if st.kind == CHAT else "text_completion",
            "created": st.created,
            "model": st.model,
            "choices": [],
            "usage": usage,
        }
        st.pending.append(b"data: " + orjson.dumps(obj) + b"\n\n")
    st.pending.append(DONE)
    st.closed = True
