"""Request bodies in, JSON out: the parsing every generation endpoint shares.

Prompt lengths are all the engine needs: token-id prompts count ids, text prompts count
whitespace-separated words. Malformed bodies raise ``RequestError`` (answered as HTTP 400).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from pytest_llmperf.base.errors import LLMPerfError


class RequestError(LLMPerfError):
    """A client error answered as HTTP 400 (SGLang's ValueError path)."""


# ------------------------------------------------------------------ helpers
def json_response(obj: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=orjson.dumps(obj), status=status, headers={"Content-Type": "application/json"}
    )


async def read_json(request: web.Request) -> Any:
    raw = await request.read()
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise RequestError(f"Invalid JSON body: {e}") from None


def int_field(d: dict[str, Any], name: str, default: int) -> int:
    v = d.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise RequestError(f"{name} must be an integer, got {v!r}")
    return v


@dataclass(frozen=True)
class Prompt:
    """A prompt as the simulator sees it: its tokens (ids, or words of a text prompt, plus the
    chat template's marker tokens), used for the length and for prefix-cache matching."""

    tokens: tuple[int | str, ...]

    @property
    def length(self) -> int:
        return max(1, len(self.tokens))

    @classmethod
    def from_text(cls, text: str) -> Prompt:
        return cls(tuple(text.split()))


def native_prompts(body: dict[str, Any]) -> Prompt | list[Prompt]:
    """Prompt(s) of a /generate body: one, or a list for a batch request."""
    text = body.get("text")
    ids = body.get("input_ids")
    if (text is None) == (ids is None):
        raise RequestError("Either text, input_ids or input_embeds should be provided.")
    if text is not None:
        if isinstance(text, str):
            return Prompt.from_text(text)
        if isinstance(text, list) and text and all(isinstance(t, str) for t in text):
            return [Prompt.from_text(t) for t in text]
        raise RequestError("text must be a string or a non-empty list of strings.")
    if isinstance(ids, list) and ids:
        if all(isinstance(t, int) for t in ids):
            return Prompt(tuple(ids))
        if all(isinstance(t, list) and all(isinstance(x, int) for x in t) for t in ids):
            return [Prompt(tuple(t)) for t in ids]
    raise RequestError("input_ids must be a non-empty list of ints or of lists of ints.")


def completion_prompt(prompt: Any) -> Prompt:
    if isinstance(prompt, str) and prompt:
        return Prompt.from_text(prompt)
    if isinstance(prompt, list) and prompt:
        if all(isinstance(t, int) for t in prompt):
            return Prompt(tuple(prompt))
        if len(prompt) == 1 and isinstance(prompt[0], str):
            return Prompt.from_text(prompt[0])
        if len(prompt) == 1 and isinstance(prompt[0], list):
            return Prompt(tuple(prompt[0]))
        raise RequestError("The simulator supports one prompt per request (no batches).")
    raise RequestError("Prompt cannot be empty")


def chat_prompt(messages: Any, per_message: int = 0, constant: int = 0) -> Prompt:
    """The templated chat prompt: ``per_message`` marker tokens around each message's words
    (role header, end-of-turn) and ``constant`` more (begin-of-text, the assistant header), as
    a Llama-3-style chat template adds; ``usage.prompt_tokens`` counts them, as engines do."""
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list.")
    tokens: list[int | str] = ["<|begin_of_text|>"] if constant > 0 else []
    for m in messages:
        role = str(m.get("role", "user")) if isinstance(m, dict) else "user"
        head = max(0, per_message - 1)
        tokens.extend(f"<|hdr{j}:{role}|>" for j in range(head))
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, str):
            tokens.extend(content.split())
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    tokens.extend(part["text"].split())
        if per_message > 0:
            tokens.append("<|eot_id|>")
    tokens.extend(f"<|gen{j}|>" for j in range(max(0, constant - 1)))
    return Prompt(tuple(tokens))
