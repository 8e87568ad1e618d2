"""Prompts in, output texts out: untimed, greedy requests for probes of what a server answers.

Nothing here is measured. Each prompt is one non-streamed request (temperature 0, a few
tokens, stopping at a newline), at most ``concurrency`` at a time, each bounded by
``request_timeout_s`` and all of them by ``deadline_s``; a request that fails or runs out of
time gives ``None`` (its error is kept) instead of ending the others. The requests go through
the control client (``control_http``), so they share its timeouts, auth header and TLS policy.

Request and answer fields, as SGLang 0.5.23 defines them: native ``/generate`` takes ``text``
and ``sampling_params`` (``max_new_tokens``, ``temperature``, ``stop``) and answers ``text``;
``/v1/completions`` takes ``prompt``, ``max_tokens``, ``temperature``, ``stop`` and answers
``choices[0].text``; ``/v1/chat/completions`` answers ``choices[0].message.content``.
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

__all__ = ["Completions", "complete", "complete_async", "probe_body"]

STOP = ["\n"]


@dataclass
class Completions:
    """Each prompt's output text (None: no answer) and why the failed ones failed."""

    texts: list[str | None]
    errors: list[str] = field(default_factory=list)

    @property
    def failed(self) -> int:
        return sum(t is None for t in self.texts)


def probe_body(
    backend: Backend, prompt: str, max_tokens: int, model: str | None
) -> tuple[str, dict[str, Any]]:
    """The route and JSON body of one greedy request."""
    if backend == "sglang":
        sp = {"max_new_tokens": max_tokens, "temperature": 0.0, "stop": STOP}
        return "/generate", {"text": prompt, "sampling_params": sp, "stream": False}
    body: dict[str, Any] = {"model": model or "default", "temperature": 0.0, "stop": STOP}
    if backend == "openai":
        return "/v1/completions", {**body, "prompt": prompt, "max_tokens": max_tokens}
    msgs = [{"role": "user", "content": prompt}]
    return "/v1/chat/completions", {**body, "messages": msgs, "max_completion_tokens": max_tokens}


def _text(backend: Backend, answer: Any) -> str:
    if backend == "sglang":
        text = answer["text"]
    elif backend == "openai":
        text = answer["choices"][0]["text"]
    else:
        text = answer["choices"][0]["message"]["content"]
    if not isinstance(text, str):
        raise TypeError(f"the answer's text is {type(text).__name__}, not a string")
    return text


async def complete_async(
    url: str,
    prompts: Sequence[str],
    *,
    backend: Backend = "sglang",
    api_key: str | None = None,
    model: str | None = None,
    max_tokens: int = 8,
    concurrency: int = 4,
    request_timeout_s: float = 60.0,
    deadline_s: float = 300.0,
) -> Completions:
    out = Completions([None] * len(prompts))
    limit = asyncio.Semaphore(max(1, concurrency))
    end = time.monotonic() + deadline_s
    async with async_client(url, api_key=api_key, read_timeout_s=request_timeout_s) as client:

        async def one(i: int, prompt: str) -> None:
            async with limit:
                left = end - time.monotonic()
                if left <= 0:
                    out.errors.append(f"prompt {i}: not sent, the {deadline_s:g} s deadline passed")
                    return
                route, body = probe_body(backend, prompt, max_tokens, model)
                try:
                    async with asyncio.timeout(left):
                        r = await client.post(route, json=body)
                    r.raise_for_status()
                    out.texts[i] = _text(backend, r.json())
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


def complete(url: str, prompts: Sequence[str], **kwargs: Any) -> Completions:
    """``complete_async`` from synchronous code (no event loop running)."""
    return asyncio.run(complete_async(url, prompts, **kwargs))
