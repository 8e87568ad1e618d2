"""Chat prompt sizing: two probe counts -> the filler that makes input_len exact."""

from __future__ import annotations

import pytest

from pytest_llmperf.core.chat_sizing import ChatSizingError, solve
from pytest_llmperf.core.workload import chat_prompt


def test_linear_counts_give_an_exact_filler() -> None:
    s = solve((8 + 11, 24 + 11), 128)  # 11 tokens of template and number
    assert (s.overhead, s.per_unit, s.filler, s.exact) == (11, 1, 117, True)
    assert s.tokens(s.filler) == 128


def test_two_tokens_per_unit_and_an_odd_remainder_is_not_exact() -> None:
    s = solve((2 * 8 + 9, 2 * 24 + 9), 100)
    assert (s.per_unit, s.filler, s.exact) == (2, 45, False)
    assert s.tokens(s.filler) == 99


def test_input_shorter_than_the_template_is_not_exact() -> None:
    s = solve((8 + 40, 24 + 40), 20)
    assert s.filler == 0 and not s.exact


def test_non_linear_counts_raise() -> None:
    with pytest.raises(ChatSizingError, match="did not grow linearly"):
        solve((30, 30), 100)


def test_chat_prompt_number_is_fixed_width_and_least_significant_first() -> None:
    a, b = chat_prompt(123, 3), chat_prompt(124, 3)
    assert a == "321000 the the the" and b.startswith("421000")
    assert len(chat_prompt(999_999, 0)) == len(chat_prompt(0, 0)) == 6
