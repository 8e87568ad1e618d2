"""Greedy probe requests: prompts in, whole answers out, outside any timed level.

The prompts are seeded (``probe_prompts``), so two launches, two versions or a baseline made
months ago send byte-identical requests. Each is sent once, greedy (temperature 0), non-streamed,
with a few in flight at a time and one deadline for the whole set, through the control client
(``control_http``): the answers are compared, never timed. The SGLang backend asks
``/generate`` and keeps ``output_ids``; the OpenAI backend asks ``/v1/completions`` and keeps
the text, since a completion carries no token ids there.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import Any

import httpx

from pytest_llmperf.base.errors import LLMPerfError
from pytest_llmperf.base.probes import ProbeUnit
from pytest_llmperf.base.results import Backend
from pytest_llmperf.core.control_http import async_client

__all__ = ["ProbeError", "probe_prompts", "run_probes"]

_WORDS = (
    "river stone light cloud paper seven orange window market garden silver winter "
    "number letter question answer engine bridge forest castle music simple yellow "
    "mountain table dinner morning history planet ocean signal"
).split()


class ProbeError(LLMPerfError, RuntimeError):
    """The probes could not be answered (a refused request, an answer without output)."""


def probe_prompts(count: int, seed: int) -> list[str]:
    """``count`` short prompts, the same for the same seed on any machine and release."""
    rng = random.Random(f"llmperf-probes:{seed}")
    out = []
    for i in range(count):
        words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(6, 14)))
        out.append(f"Probe {i}: continue the list: {words}")
    return out


def _answer(body: Any, backend: Backend) -> list[int] | str:
    if backend == "sglang":
        item = body[0] if isinstance(body, list) and body else body
        ids = item.get("output_ids") if isinstance(item, dict) else None
        if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
            raise ProbeError(f"/generate answered without output_ids: {str(body)[:200]}")
        return ids
    choices = body.get("choices") if isinstance(body, dict) else None
    text = choices[0].get("text") if isinstance(choices, list) and choices else None
    if not isinstance(text, str):
        raise ProbeError(f"/v1/completions answered without choices[0].text: {str(body)[:200]}")
    return text


async def _run(
    url: str,
    prompts: Sequence[str],
    backend: Backend,
    max_new_tokens: int,
    model: str | None,
    api_key: str | None,
    concurrency: int,
    request_timeout_s: float,
) -> list[list[int] | str]:
    gate = asyncio.Semaphore(concurrency)
    async with async_client(url, api_key=api_key, read_timeout_s=request_timeout_s) as http:
        if backend != "sglang" and model is None:
            models = (await http.get("/v1/models")).json()
            model = str(models["data"][0]["id"])

        async def one(i: int, prompt: str) -> list[int] | str:
            if backend == "sglang":
                path = "/generate"
                sp = {"temperature": 0, "max_new_tokens": max_new_tokens}
                body: dict[str, Any] = {"text": prompt, "sampling_params": sp}
            else:
                path = "/v1/completions"
                body = {"model": model, "prompt": prompt, "temperature": 0}
                body["max_tokens"] = max_new_tokens
            async with gate:
                r = await http.post(path, json=body)
            if r.status_code != 200:
                raise ProbeError(f"probe {i}: {path} answered HTTP {r.status_code}: {r.text[:200]}")
            return _answer(r.json(), backend)

        return list(await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts))))


def run_probes(
    url: str,
    prompts: Sequence[str],
    *,
    backend: Backend = "sglang",
    max_new_tokens: int = 16,
    model: str | None = None,
    api_key: str | None = None,
    concurrency: int = 4,
    deadline_s: float = 120.0,
) -> tuple[ProbeUnit, list[list[int] | str]]:
    """Each prompt's greedy answer, in order, and what a position in them counts; raises
    ``ProbeError`` naming the probe and the cause if any is not answered by ``deadline_s``."""

    async def bounded() -> list[list[int] | str]:
        async with asyncio.timeout(deadline_s):
            return await _run(
                url, prompts, backend, max_new_tokens, model, api_key, concurrency, deadline_s
            )

    try:
        outputs = asyncio.run(bounded())
    except TimeoutError:
        raise ProbeError(f"{len(prompts)} probes not answered within {deadline_s:g} s") from None
    except (httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
        raise ProbeError(f"probes failed: {type(exc).__name__}: {exc}") from None
    return ("token" if backend == "sglang" else "char"), outputs
