"""Deterministic prompts: the same token ids at every level and in every run.

Prompt ``i`` depends only on (seed, i, input_len), so level C=16 re-sends exactly the prompts
of C=4 plus more, and tomorrow's run sends today's. The first token encodes the request index,
so no two prompts of a run share a prefix and the radix cache cannot turn a prefill into a hit
(levels re-use prompts, which is why the sweep flushes the cache before each level).
"""

from __future__ import annotations

import numpy as np

from pytest_llmperf.base.results import Workload

# Ids well inside every common vocabulary (>= 32000 entries) and clear of the special tokens
# that tokenizers put at the low end.
TOKEN_ID_LOW = 1000
TOKEN_ID_HIGH = 30000
_INDEX_SPAN = TOKEN_ID_HIGH - TOKEN_ID_LOW
WARMUP_INDEX = -1

# For the chat backend, which cannot take token ids: short common words, roughly one token
# each in BPE vocabularies, so the text prompt is about input_len tokens long.
_WORDS = (
    "the of and to in is was for on are with as be at by this had not but from or have an they "
    "which one you were all she there would their we him been has when who will no more if out so "
    "said what up its about than into them can only other time new some could these two may first "
    "then do any like my now over such our man me even most made after also did many off before "
    "must well back through years much where your way down should because each just those people "
    "how too little state good very make world still see own men work long here get both between "
    "life being under never day same another know year while last might great old off come since "
    "go against came right used take three"
).split()


def prompt_ids(index: int, input_len: int, seed: int = 0) -> list[int]:
    """Token ids of prompt ``index``: first token from the index, the rest seeded random."""
    if input_len < 1:
        raise ValueError(f"input_len must be >= 1, got {input_len}")
    # Warm-up (negative index) gets its own first token range so it never prefixes a level prompt.
    head = TOKEN_ID_LOW + (index % _INDEX_SPAN) if index >= 0 else TOKEN_ID_HIGH + (-index % 1000)
    if input_len == 1:
        return [head]
    rng = np.random.default_rng([seed & 0xFFFFFFFF, index & 0xFFFFFFFF, 0x11F])
    rest = rng.integers(TOKEN_ID_LOW, TOKEN_ID_HIGH, size=input_len - 1)
    return [head, *rest.tolist()]


def prompt_text(index: int, input_len: int, seed: int = 0) -> str:
    """A deterministic text prompt of about ``input_len`` tokens (chat cannot send ids)."""
    ids = prompt_ids(index, input_len, seed)
    words = [_WORDS[t % len(_WORDS)] for t in ids[1:]]
    return " ".join([f"#{index}", *words]) if words else f"#{index}"


def build_prompts(workload: Workload, count: int) -> list[list[int]] | list[str]:
    """The first ``count`` prompts of a workload, ids or text depending on the backend."""
    if workload.backend == "openai-chat":
        return [prompt_text(i, workload.input_len, workload.seed) for i in range(count)]
    return [prompt_ids(i, workload.input_len, workload.seed) for i in range(count)]


def warmup_prompt(workload: Workload) -> list[int] | str:
    """A prompt that shares no prefix with any level prompt."""
    if workload.backend == "openai-chat":
        return prompt_text(WARMUP_INDEX, workload.input_len, workload.seed)
    return prompt_ids(WARMUP_INDEX, workload.input_len, workload.seed)


def poisson_offsets(rate: float, count: int, seed: int = 0) -> list[float]:
    """Seeded open-loop send offsets (seconds from level start) with exponential gaps."""
    if rate <= 0:
        raise ValueError(f"request rate must be > 0 req/s, got {rate}")
    rng = np.random.default_rng([seed & 0xFFFFFFFF, 0x9015])
    gaps = rng.exponential(1.0 / rate, size=count)
    gaps[0] = 0.0  # the first request goes at once, as in bench_serving's first yield
    return np.cumsum(gaps).tolist()
