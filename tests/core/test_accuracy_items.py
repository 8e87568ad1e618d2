"""The accuracy probe's items: deterministic per seed, each answer right, and the scoring."""

from __future__ import annotations

import pytest

from pytest_llmperf.base.accuracy_items import (
    ITEMS_VERSION,
    MAX_ITEMS,
    Item,
    extract,
    generate_items,
    is_right,
    parse_item_count,
    prompt,
    question_of,
    solve,
)
from pytest_llmperf.core.greedy_requests import request_body
from pytest_llmperf.sim.answers import answer


def test_items_are_deterministic_per_seed_and_distinct() -> None:
    a, b = generate_items(300, seed=7), generate_items(300, seed=7)
    assert a == b
    assert generate_items(300, seed=8) != a
    assert generate_items(50, seed=7) == a[:50]  # a prefix: more items keep the first ones
    assert len({i.question for i in a}) == 300
    assert {i.kind for i in a} == {"add", "sub", "mul", "letter", "day", "month", "length"}
    assert ITEMS_VERSION >= 1


def test_every_answer_is_the_true_one() -> None:
    for item in generate_items(MAX_ITEMS, seed=1):
        assert solve(item.question) == item.answer
    assert solve("What is 3 + 4?") == "7"
    assert solve("What letter comes after F in the alphabet?") == "G"
    assert solve("What day comes after Sunday?") == "Monday"
    assert solve("What month comes after December?") == "January"
    assert solve("How many letters are in the word 'banana'?") == "6"
    assert solve("What is 12 times 11?") == "132"
    assert solve("What day comes after Funday?") is None
    assert solve("Who wrote Hamlet?") is None


def test_prompt_round_trips_its_question() -> None:
    q = "What is 5 - 2?"
    text = prompt(q)
    assert text.endswith(f"Q: {q}\nA:") and "Answer each question" in text
    assert question_of(text) == q
    assert question_of("Q: What is 5 - 2?\nA:") is None  # not our few-shot block


@pytest.mark.parametrize(
    ("output", "numeric", "want"),
    [
        (" 7", True, "7"),
        (" 7.\n\nQ: What is 1 + 1?\nA: 2", True, "7"),
        ("**42**", True, "42"),
        ("\n\n 1,234 apples", True, "1234"),
        ("-3", True, "-3"),
        ("The answer is 7", True, "7"),
        ("seven", True, None),
        ("", True, None),
        (" Tuesday.", False, "Tuesday"),
        ("  g\n", False, "g"),
        ("The answer is G", False, "The"),
        ("42", False, None),
    ],
)
def test_extract(output: str, numeric: bool, want: str | None) -> None:
    assert extract(output, numeric) == want


def test_is_right_matches_exactly() -> None:
    seven = Item("What is 3 + 4?", "7", "add")
    assert is_right(seven, " 7\n")
    assert not is_right(seven, " 77")
    assert not is_right(seven, " 17")
    assert not is_right(seven, None)
    g = Item("What letter comes after F in the alphabet?", "G", "letter")
    assert is_right(g, " g") and not is_right(g, " Go") and not is_right(g, "H")
    day = Item("What day comes after Monday?", "Tuesday", "day")
    assert is_right(day, " TUESDAY!") and not is_right(day, " Tues")


def test_item_count_setting() -> None:
    assert parse_item_count("0") == 0 and parse_item_count(200) == 200
    with pytest.raises(ValueError, match="at most"):
        parse_item_count(MAX_ITEMS + 1)
    with pytest.raises(ValueError):
        parse_item_count(-1)


def test_simulator_answers_a_share_and_a_lower_share_is_a_subset() -> None:
    items = generate_items(400, seed=0)
    hi = [is_right(i, answer(prompt(i.question), 0.8)) for i in items]
    lo = [is_right(i, answer(prompt(i.question), 0.6)) for i in items]
    assert 0.72 < sum(hi) / 400 < 0.88 and 0.52 < sum(lo) / 400 < 0.68
    assert all(h for h, lo_ in zip(hi, lo, strict=True) if lo_)
    assert answer(prompt(items[0].question), 0.0) is None  # a random model's text
    assert answer("some other prompt", 0.9) is None


def test_probe_bodies_are_greedy_and_short() -> None:
    route, body = request_body("sglang", "p", 8, None, ["\n"])
    assert route == "/generate" and body["text"] == "p"
    assert body["sampling_params"] == {"max_new_tokens": 8, "temperature": 0.0, "stop": ["\n"]}
    _, body = request_body("sglang", "p", 16, None)  # consistency probes: no stop
    assert body["sampling_params"] == {"max_new_tokens": 16, "temperature": 0.0}
    route, body = request_body("openai", "p", 8, "m")
    assert route == "/v1/completions" and body["prompt"] == "p" and body["max_tokens"] == 8
    assert body["temperature"] == 0.0 and body["model"] == "m"
    route, body = request_body("openai-chat", "p", 8, None)
    assert route == "/v1/chat/completions" and body["messages"][0]["content"] == "p"
