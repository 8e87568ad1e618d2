"""Deterministic prompts that no prefix cache can serve.

Prompt number ``n`` (its ordinal) depends only on (seed, n, input_len). Each measurement takes
the next unused ordinals: a sweep's level k starts where level k-1 ended, and a perf run keeps
counting across levels, repeats and re-runs of one server. So no measured request shares a
prefix with an earlier one, also on servers without ``/flush_cache`` (llama.cpp, vLLM), and the
same command sends the same prompts tomorrow. The first token encodes the ordinal (distinct for
the first 29000 prompts of a run); the second its high part, so later prompts share at most one
token with an earlier one. The warm-up prompt has first tokens of its own.
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
    """Token ids of prompt ordinal ``index``: first tokens from the ordinal, the rest seeded."""
    if input_len < 1:
        raise ValueError(f"input_len must be >= 1, got {input_len}")
    # Warm-up (negative index) gets its own first token range so it never prefixes a level prompt.
    head = TOKEN_ID_LOW + (index % _INDEX_SPAN) if index >= 0 else TOKEN_ID_HIGH + (-index % 1000)
    if input_len == 1:
        return [head]
    rng = np.random.default_rng([seed & 0xFFFFFFFF, index & 0xFFFFFFFF, 0x11F])
    rest = rng.integers(TOKEN_ID_LOW, TOKEN_ID_HIGH, size=input_len - 1).tolist()
    if index >= _INDEX_SPAN:  # past the first-token range: the second token tells them apart
        rest[0] = TOKEN_ID_LOW + (index // _INDEX_SPAN) % _INDEX_SPAN
    return [head, *rest]


def prompt_text(index: int, input_len: int, seed: int = 0) -> str:
    """A deterministic text prompt of about ``input_len`` tokens (chat cannot send ids)."""
    ids = prompt_ids(index, input_len, seed)
    words = [_WORDS[t % len(_WORDS)] for t in ids[1:]]
    return " ".join([f"#{index}", *words]) if words else f"#{index}"


CHAT_NUMBER_DIGITS = 6
CHAT_FILLER = " the"  # one token in SentencePiece and BPE vocabularies alike


def chat_prompt(index: int, filler: int) -> str:
    """A chat message whose token count is linear in ``filler``: the ordinal, then filler.

    The ordinal is written as fixed-width digits, least significant first, so its token count
    is the same for every prompt (digits split alike in every common tokenizer) and
    consecutive prompts differ at their first token. ``core/chat_sizing.py`` finds the
    ``filler`` that makes the server count exactly ``input_len`` prompt tokens.
    """
    number = f"{index % 10**CHAT_NUMBER_DIGITS:0{CHAT_NUMBER_DIGITS}d}"[::-1]
    return number + CHAT_FILLER * filler


def build_prompts(
    workload: Workload, count: int, start: int = 0, *, chat_filler: int | None = None
) -> list[list[int]] | list[str]:
    """Prompts ``start .. start + count - 1`` of a workload, ids or text by backend.

    ``chat_filler``: chat prompts sized to the server (``chat_prompt``); else word prompts of
    about ``input_len`` tokens.
    """
    if start < 0:
        raise ValueError(f"the first prompt ordinal must be >= 0, got {start}")
    ordinals = range(start, start + count)
    if workload.backend == "openai-chat" and chat_filler is not None:
        return [chat_prompt(i, chat_filler) for i in ordinals]
    if workload.backend == "openai-chat":
        return [prompt_text(i, workload.input_len, workload.seed) for i in ordinals]
    return [prompt_ids(i, workload.input_len, workload.seed) for i in ordinals]


def warmup_prompt(workload: Workload, start: int = 0) -> list[int] | str:
    """A prompt that shares no prefix with any level prompt, nor with the warm-up of a sweep
    that started at another ordinal."""
    index = WARMUP_INDEX - start % 999
    if workload.backend == "openai-chat":
        return prompt_text(index, workload.input_len, workload.seed)
    return prompt_ids(index, workload.input_len, workload.seed)


def poisson_offsets(rate: float, count: int, seed: int = 0) -> list[float]:
    """Seeded open-loop send offsets (seconds from level start) with exponential gaps."""
    if rate <= 0:
        raise ValueError(f"request rate must be > 0 req/s, got {rate}")
    rng = np.random.default_rng([seed & 0xFFFFFFFF, 0x9015])
    gaps = rng.exponential(1.0 / rate, size=count)
    gaps[0] = 0.0  # the first request goes at once, as in bench_serving's first yield
    return np.cumsum(gaps).tolist()
