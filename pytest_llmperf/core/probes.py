"""The consistency probes: seeded prompts, and each launch's whole greedy answers to them.

The prompts are seeded (``probe_prompts``), so two launches, two versions or a baseline made
months ago send byte-identical requests. They go through the one untimed greedy request path
(``greedy_requests``), outside any timed level: the answers are compared, never timed. The
SGLang backend keeps ``/generate``'s ``output_ids``; the OpenAI backends keep the text, since a
completion carries no token ids there. A probe set is all or nothing: one unanswered probe
makes the set unusable (``ProbeError``), as a partial set cannot be compared probe by probe.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from pytest_llmperf.base.errors import LLMPerfError
from pytest_llmperf.base.probes import ProbeUnit
from pytest_llmperf.base.results import Backend
from pytest_llmperf.core.greedy_requests import ask

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


def run_probes(
    url: str,
    prompts: Sequence[str],
    *,
    backend: Backend = "sglang",
    max_new_tokens: int = 16,
    model: str | None = None,
    api_key: str | None = None,
    concurrency: int = 4,
    request_timeout_s: float = 60.0,
    deadline_s: float = 120.0,
) -> tuple[ProbeUnit, list[list[int] | str]]:
    """Each prompt's greedy answer, in order, and what a position in them counts; raises
    ``ProbeError`` naming the first probe not answered (by ``deadline_s``) and why."""
    got = ask(url, prompts, backend=backend, api_key=api_key, model=model,
              max_tokens=max_new_tokens, concurrency=concurrency,
              request_timeout_s=min(request_timeout_s, deadline_s),
              deadline_s=deadline_s)  # fmt: skip
    if got.failed:
        first = got.errors[0] if got.errors else "no answer"
        raise ProbeError(f"{got.failed} of {len(prompts)} probes not answered ({first})")
    if backend == "sglang":
        missing = [i for i, ids in enumerate(got.ids) if ids is None]
        if missing:
            raise ProbeError(f"probe {missing[0]}: /generate answered without output_ids")
        return "token", [ids for ids in got.ids if ids is not None]
    return "char", [t for t in got.texts if t is not None]
