"""Deterministic prompts that no prefix cache can serve.

Prompt number ``n`` (its ordinal) depends only on (seed, n, input_len). Each measurement takes
the next unused ordinals: a sweep's level k starts where level k-1 ended, and a perf run keeps
counting across levels, repeats and re-runs of one server. So no measured request shares a
prefix with an earlier one, also on servers without ``/flush_cache`` (llama.cpp, vLLM), and the
same command sends the same prompts tomorrow. The first token encodes the ordinal (distinct for
the first 29000 prompts of a run); the second its high part, so later prompts share at most one
token with an earlier one. The warm-up prompt has first tokens of its own.

A ``shared-prefix`` workload puts one of G seeded prefixes of P tokens (group = ordinal mod G)
in front of such a fresh suffix of ``input_len - P`` tokens: a prefix cache can serve exactly
the prefix. ``prime_prompts`` holds one short prompt per group, sent after the flush, so every
measured request finds its prefix cached (warm-up -> flush -> prime -> measure, as SGLang's
own hit-rate test does).
"""

from __future__ import annotations

from collections.abc import Sequence

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


_PREFIX_STREAM = 0x5BF
# Prime prompts end in a token no level or warm-up prompt starts its suffix with.
_PRIME_TOKEN = TOKEN_ID_HIGH + 1000


# The largest id any prompt holds: warm-up and prime prompts start above TOKEN_ID_HIGH.
MAX_PROMPT_ID = TOKEN_ID_HIGH + 1999


def fold_ids(ids: Sequence[int], vocab_size: int) -> list[int]:
    """``ids`` kept inside a vocabulary smaller than the prompts assume: an id past it would
    index past the model's embedding (SGLang's whole server dies of it). Ids are folded into
    the vocabulary's upper nine tenths (clear of the special tokens at its low end), so the
    same prompt folds alike every time; with so few ids prompts share more first tokens."""
    if vocab_size > MAX_PROMPT_ID:
        return list(ids)
    low = min(TOKEN_ID_LOW, vocab_size // 10)
    span = max(1, vocab_size - low)
    return [i if i < vocab_size else low + (i - TOKEN_ID_LOW) % span for i in ids]


def prefix_ids(group: int, prefix_len: int, seed: int = 0) -> list[int]:
    """The shared prefix of ``group``: seeded, the same for every prompt of the group."""
    rng = np.random.default_rng([seed & 0xFFFFFFFF, group & 0xFFFFFFFF, _PREFIX_STREAM])
    return rng.integers(TOKEN_ID_LOW, TOKEN_ID_HIGH, size=prefix_len).tolist()


def _shared_prefix_sizes(workload: Workload) -> tuple[int, int]:
    if workload.prefix_len is None or workload.prefix_groups is None:
        raise ValueError("a shared-prefix workload needs prefix_len and prefix_groups")
    return workload.prefix_len, workload.prefix_groups


def shared_prefix_ids(workload: Workload, index: int) -> list[int]:
    """Prompt ``index`` of a shared-prefix workload: its group's prefix, then a fresh suffix."""
    p, g = _shared_prefix_sizes(workload)
    suffix = prompt_ids(index, workload.input_len - p, workload.seed)
    return prefix_ids(index % g, p, workload.seed) + suffix


def prime_prompts(workload: Workload) -> list[list[int]]:
    """One prompt per group (its prefix plus one token) that puts the prefixes in the cache."""
    if workload.kind != "shared-prefix":
        return []
    p, g = _shared_prefix_sizes(workload)
    return [[*prefix_ids(i, p, workload.seed), _PRIME_TOKEN + i % 1000] for i in range(g)]


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
    if workload.kind == "shared-prefix":
        return [shared_prefix_ids(workload, i) for i in ordinals]
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
