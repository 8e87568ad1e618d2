"""Request bodies in, JSON out: the parsing every generation endpoint shares.

Prompt lengths are all the engine needs: token-id prompts count ids, text prompts count
whitespace-separated words. Malformed bodies raise ``RequestError`` (answered as HTTP 400).
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web


def count_prompt_words(text: str) -> int:
    """A rough prompt length for text prompts: whitespace-separated words (at least 1)."""
    return max(1, len(text.split()))


class RequestError(Exception):
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


def native_prompts(body: dict[str, Any]) -> int | list[int]:
    """Prompt length(s) of a /generate body: an int, or a list for a batch request."""
    text = body.get("text")
    ids = body.get("input_ids")
    if (text is None) == (ids is None):
        raise RequestError("Either text, input_ids or input_embeds should be provided.")
    if text is not None:
        if isinstance(text, str):
            return count_prompt_words(text)
        if isinstance(text, list) and text and all(isinstance(t, str) for t in text):
            return [count_prompt_words(t) for t in text]
        raise RequestError("text must be a string or a non-empty list of strings.")
    if isinstance(ids, list) and ids:
        if all(isinstance(t, int) for t in ids):
            return len(ids)
        if all(isinstance(t, list) and all(isinstance(x, int) for x in t) for t in ids):
            return [max(1, len(t)) for t in ids]
    raise RequestError("input_ids must be a non-empty list of ints or of lists of ints.")


def completion_prompt_len(prompt: Any) -> int:
    if isinstance(prompt, str) and prompt:
        return count_prompt_words(prompt)
    if isinstance(prompt, list) and prompt:
        if all(isinstance(t, int) for t in prompt):
            return len(prompt)
        if len(prompt) == 1 and isinstance(prompt[0], str):
            return count_prompt_words(prompt[0])
        if len(prompt) == 1 and isinstance(prompt[0], list):
            return max(1, len(prompt[0]))
        raise RequestError("The simulator supports one prompt per request (no batches).")
    raise RequestError("Prompt cannot be empty")


def chat_prompt_len(messages: Any) -> int:
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list.")
    words = 0
    for m in messages:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, str):
            words += len(content.split())
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    words += len(part["text"].split())
    return max(1, words)
