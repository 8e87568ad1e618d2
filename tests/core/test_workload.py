"""Prompts are deterministic, distinct per request and identical across levels and runs."""

from __future__ import annotations

import pytest

from pytest_llmperf.base.results import Workload
from pytest_llmperf.core.workload import (
    TOKEN_ID_HIGH,
    TOKEN_ID_LOW,
    build_prompts,
    poisson_offsets,
    prompt_ids,
    prompt_text,
    warmup_prompt,
)


def test_same_seed_same_prompts_and_prefix_of_bigger_levels() -> None:
    w = Workload(input_len=50)
    small, big = build_prompts(w, 4), build_prompts(w, 256)
    assert small == big[:4]
    assert build_prompts(w, 256) == big


def test_lengths_and_range() -> None:
    for ids in build_prompts(Workload(input_len=1000), 8):
        assert isinstance(ids, list)
        assert len(ids) == 1000
        assert all(TOKEN_ID_LOW <= t < TOKEN_ID_HIGH for t in ids)
    assert prompt_ids(3, 1) == [TOKEN_ID_LOW + 3]


def test_first_tokens_all_distinct_so_no_shared_prefix() -> None:
    prompts = build_prompts(Workload(input_len=20), 4096)
    firsts = {p[0] for p in prompts}
    assert len(firsts) == 4096
    warm = warmup_prompt(Workload(input_len=20))
    assert isinstance(warm, list) and warm[0] not in firsts


def test_seed_changes_the_prompt_body() -> None:
    assert prompt_ids(0, 100, seed=0) != prompt_ids(0, 100, seed=1)


def test_chat_prompts_are_deterministic_text() -> None:
    w = Workload(backend="openai-chat", input_len=100)
    prompts = build_prompts(w, 3)
    assert all(isinstance(p, str) for p in prompts)
    assert prompts == build_prompts(w, 3)
    assert len(set(prompts)) == 3
    assert len(prompt_text(0, 100).split()) == 100


def test_poisson_offsets_seeded_and_increasing() -> None:
    a = poisson_offsets(10.0, 200, seed=1)
    assert a == poisson_offsets(10.0, 200, seed=1)
    assert a[0] == 0.0 and all(y >= x for x, y in zip(a, a[1:], strict=False))
    # mean gap close to 1/rate for 200 draws (loose: a property, not a flaky timing check)
    assert 0.07 < a[-1] / 199 < 0.13
    with pytest.raises(ValueError):
        poisson_offsets(0.0, 3)


def test_ordinals_continue_and_never_share_a_first_token() -> None:
    w = Workload(input_len=8)
    assert build_prompts(w, 4, start=2) == build_prompts(w, 6)[2:]
    a, b = build_prompts(w, 100), build_prompts(w, 100, start=100)
    assert not {p[0] for p in a} & {p[0] for p in b}
    with pytest.raises(ValueError, match="ordinal"):
        build_prompts(w, 1, start=-1)


def test_past_the_first_token_range_the_second_token_differs() -> None:
    span = TOKEN_ID_HIGH - TOKEN_ID_LOW
    early, late = prompt_ids(7, 8), prompt_ids(7 + span, 8)
    assert early[0] == late[0] and early[:2] != late[:2]
    assert all(TOKEN_ID_LOW <= t < TOKEN_ID_HIGH for t in late)


def test_warmup_prompt_differs_per_start_and_from_level_prompts() -> None:
    w = Workload(input_len=8)
    w0, w1 = warmup_prompt(w, 0), warmup_prompt(w, 40)
    assert isinstance(w0, list) and isinstance(w1, list) and w0[:1] != w1[:1]
    assert w0[0] >= TOKEN_ID_HIGH and w1[0] >= TOKEN_ID_HIGH


def test_every_ordinal_a_fresh_base_can_reach_is_a_distinct_prompt() -> None:
    """perfrun.fresh_prompt_base draws from PROMPT_ORDINALS for servers that keep every
    prompt: ordinals up to there (plus a long run) must be distinct prompts, as ids (by their
    first two tokens) and as sized chat text (by their digits)."""
    import random

    from pytest_llmperf.core.workload import chat_prompt
    from pytest_llmperf.run.perfrun import PROMPT_ORDINALS

    top = PROMPT_ORDINALS + 20_000
    span = TOKEN_ID_HIGH - TOKEN_ID_LOW
    # every residue class of the first token, with ordinals from all over the range
    picks = random.Random(5).sample(range(top), 3000) + [k * span + 7 for k in range(top // span)]
    heads = {tuple(prompt_ids(k, 2)) for k in picks}
    assert len(heads) == len(set(picks))
    assert len({chat_prompt(k, 1) for k in picks}) == len(set(picks))
    assert top <= 10**6  # six digits tell chat prompts apart
