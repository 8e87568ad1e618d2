"""Untimed greedy requests: prompts in, whole answers out (text, and token ids where served).

The one request path for every probe of what a server answers (the accuracy probe's items,
the consistency probes): nothing here is measured. Each prompt is one non-streamed request
(temperature 0, at most ``max_tokens``, optionally stopping at ``stop``), at most
``concurrency`` at a time, each bounded by ``request_timeout_s`` and all of them by
``deadline_s``; a request that fails or runs out of time gives ``None`` (its error is kept)
instead of ending the others, until ``concurrency`` have failed: a server that answers none of
a first wave (hung, crashed) costs about two timeouts, not one per prompt. The requests go
through the control client (``control_http``), so they share its timeouts, auth header and TLS
policy.

Request and answer fields, as SGLang 0.5.23 defines them: native ``/generate`` takes ``text``
and ``sampling_params`` (``max_new_tokens``, ``temperature``, ``stop``) and answers ``text``
and ``output_ids``; ``/v1/completions`` takes ``prompt``, ``max_tokens``, ``temperature``,
``stop`` and answers ``choices[0].text``; ``/v1/chat/completions`` answers
``choices[0].message.content``. Only ``/generate`` gives token ids.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from pytest_llmperf.base.results import Backend
from pytest_llmperf.core.control_http import async_client

__all__ = ["GreedyAnswers", "ask", "ask_async", "request_body"]


@dataclass
class GreedyAnswers:
    """Each prompt's output text and token ids (None: no answer, or no ids on this route)
    and why the failed ones failed."""

    texts: list[str | None]
    ids: list[list[int] | None]
    errors: list[str] = field(default_factory=list)

    @property
    def failed(self) -> int:
        return sum(t is None for t in self.texts)


def request_body(
    backend: Backend,
    prompt: str,
    max_tokens: int,
    model: str | None,
    stop: Sequence[str] | None = None,
) -> tuple[str, dict[str, Any]]:
    """The route and JSON body of one greedy request."""
    extra: dict[str, Any] = {"stop": list(stop)} if stop else {}
    if backend == "sglang":
        sp = {"max_new_tokens": max_tokens, "temperature": 0.0, **extra}
        return "/generate", {"text": prompt, "sampling_params": sp, "stream": False}
    body: dict[str, Any] = {"model": model or "default", "temperature": 0.0, **extra}
    if backend == "openai":
        return "/v1/completions", {**body, "prompt": prompt, "max_tokens": max_tokens}
    msgs = [{"role": "user", "content": prompt}]
    return "/v1/chat/completions", {**body, "messages": msgs, "max_completion_tokens": max_tokens}


def _answer(backend: Backend, body: Any) -> tuple[str, list[int] | None]:
    ids = None
    if backend == "sglang":
        item = body[0] if isinstance(body, list) and body else body
        text = item["text"]
        raw = item.get("output_ids")
        if isinstance(raw, list) and all(isinstance(i, int) for i in raw):
            ids = list(raw)
    elif backend == "openai":
        text = body["choices"][0]["text"]
    else:
        text = body["choices"][0]["message"]["content"]
    if not isinstance(text, str):
        raise TypeError(f"the answer's text is {type(text).__name__}, not a string")
    return text, ids


async def ask_async(
    url: str,
    prompts: Sequence[str],
    *,
    backend: Backend = "sglang",
    api_key: str | None = None,
    model: str | None = None,
    max_tokens: int = 8,
    stop: Sequence[str] | None = None,
    concurrency: int = 4,
    request_timeout_s: float = 60.0,
    deadline_s: float = 300.0,
) -> GreedyAnswers:
    n = len(prompts)
    out = GreedyAnswers([None] * n, [None] * n)
    give_up = max(1, concurrency)
    limit = asyncio.Semaphore(max(1, concurrency))
    end = time.monotonic() + deadline_s
    async with async_client(url, api_key=api_key, read_timeout_s=request_timeout_s) as client:

        async def one(i: int, prompt: str) -> None:
            async with limit:
                left = end - time.monotonic()
                if left <= 0:
                    out.errors.append(f"prompt {i}: not sent, the {deadline_s:g} s deadline passed")
                    return
                if len(out.errors) >= give_up:
                    out.errors.append(
                        f"prompt {i}: not sent, {give_up} requests before it got no answer"
                    )
                    return
                route, body = request_body(backend, prompt, max_tokens, model, stop)
                try:
                    async with asyncio.timeout(left):
                        r = await client.post(route, json=body)
                    r.raise_for_status()
                    out.texts[i], out.ids[i] = _answer(backend, r.json())
                except (
                    httpx.HTTPError,
                    TimeoutError,
                    ValueError,
                    KeyError,
                    IndexError,
                    TypeError,
                ) as exc:
                    out.errors.append(f"prompt {i}: {route}: {type(exc).__name__}: {exc}")

        await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
    return out


def ask(url: str, prompts: Sequence[str], **kwargs: Any) -> GreedyAnswers:
    """``ask_async`` from synchronous code (no event loop running)."""
    return asyncio.run(ask_async(url, prompts, **kwargs))
