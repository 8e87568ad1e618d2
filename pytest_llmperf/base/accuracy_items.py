"""Generated question items with known answers: the accuracy probe's test set, no download.

Each item is a short question (arithmetic, the next letter, day or month, the letters of a
word) drawn from a seed, so the same (``ITEMS_VERSION``, seed, n) always gives the same items;
the version changes whenever the generator does, so a stored score is never compared with a
score on other items. ``prompt`` wraps a question in a few-shot block that makes a small
instruct model answer with the answer alone; ``extract`` and ``is_right`` score an output.

It lives in ``base`` because both the measuring side (``core/greedy_requests``) and the simulator
(which answers the items, ``sim/answers``) need it, and they may not import each other.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pytest_llmperf.base.values import parse_nonneg_int

__all__ = [
    "ITEMS_VERSION",
    "MAX_ITEMS",
    "Item",
    "extract",
    "generate_items",
    "is_right",
    "parse_item_count",
    "prompt",
    "question_of",
    "solve",
]

# Bump on any change to the templates, the draws or the prompt: stored scores then stop
# matching (the judge refuses to compare scores on different items).
ITEMS_VERSION = 1

DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
)  # fmt: skip
WORDS = (
    "apple", "banana", "cherry", "garden", "house", "river", "window", "yellow", "pencil",
    "orange", "planet", "silver", "table", "music", "bridge", "forest", "candle", "rabbit",
    "school", "summer", "winter", "doctor", "mountain", "kitchen", "letter",
)  # fmt: skip
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
# Far below the distinct questions the templates can make (about 14 000).
MAX_ITEMS = 5000

_FEW_SHOT = (
    "Answer each question with just the answer, nothing else.\n\n"
    "Q: What is 3 + 4?\nA: 7\n\n"
    "Q: What letter comes after C in the alphabet?\nA: D\n\n"
    "Q: What day comes after Monday?\nA: Tuesday\n\n"
    "Q: How many letters are in the word 'cat'?\nA: 3\n\n"
)
_Q = re.compile(r"Q: (?P<q>[^\n]*)\nA:\s*$")


@dataclass(frozen=True)
class Item:
    question: str
    answer: str
    kind: str


def _draw(rng: random.Random) -> tuple[str, str]:
    kind = rng.choice(("add", "sub", "mul", "letter", "day", "month", "length"))
    if kind == "add":
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        return kind, f"What is {a} + {b}?"
    if kind == "sub":
        a = rng.randint(10, 99)
        return kind, f"What is {a} - {rng.randint(1, a - 1)}?"
    if kind == "mul":
        return kind, f"What is {rng.randint(2, 12)} times {rng.randint(2, 12)}?"
    if kind == "letter":
        return kind, f"What letter comes after {rng.choice(LETTERS[:-1])} in the alphabet?"
    if kind == "day":
        return kind, f"What day comes after {rng.choice(DAYS)}?"
    if kind == "month":
        return kind, f"What month comes after {rng.choice(MONTHS)}?"
    return kind, f"How many letters are in the word '{rng.choice(WORDS)}'?"


_SOLVERS: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], str]], ...] = (
    (re.compile(r"What is (\d+) \+ (\d+)\?"), lambda m: str(int(m[1]) + int(m[2]))),
    (re.compile(r"What is (\d+) - (\d+)\?"), lambda m: str(int(m[1]) - int(m[2]))),
    (re.compile(r"What is (\d+) times (\d+)\?"), lambda m: str(int(m[1]) * int(m[2]))),
    (
        re.compile(r"What letter comes after ([A-Y]) in the alphabet\?"),
        lambda m: LETTERS[LETTERS.index(m[1]) + 1],
    ),
    (re.compile(r"What day comes after (\w+)\?"), lambda m: DAYS[(DAYS.index(m[1]) + 1) % 7]),
    (
        re.compile(r"What month comes after (\w+)\?"),
        lambda m: MONTHS[(MONTHS.index(m[1]) + 1) % 12],
    ),
    (re.compile(r"How many letters are in the word '(\w+)'\?"), lambda m: str(len(m[1]))),
)


def solve(question: str) -> str | None:
    """The answer to one generated question (None for text no template made): the simulator
    answers with it, and the tests hold every generated item to it."""
    for pattern, fn in _SOLVERS:
        m = pattern.fullmatch(question.strip())
        if m is not None:
            try:
                return fn(m)
            except ValueError:  # a day or month name no template uses
                return None
    return None


def parse_item_count(text: Any) -> int:
    """The ``accuracy_items`` setting: 0 (no probe) up to ``MAX_ITEMS``."""
    n = parse_nonneg_int(text)
    if n > MAX_ITEMS:
        raise ValueError(f"at most {MAX_ITEMS} generated items, got {n}")
    return n


def generate_items(n: int, seed: int) -> list[Item]:
    """``n`` items drawn from ``seed``: the same arguments give the same items, in order."""
    if n < 0:
        raise ValueError(f"the number of items must be 0 or more, got {n}")
    if n > MAX_ITEMS:
        raise ValueError(f"at most {MAX_ITEMS} items can be generated, got {n}")
    rng = random.Random(f"llmperf-accuracy:{ITEMS_VERSION}:{seed}")
    items: list[Item] = []
    seen: set[str] = set()
    # Distinct questions only (a repeated one would count one answer twice): the small
    # templates (days, months) run out and the draw falls to the large ones (arithmetic).
    for _ in range(50 * n):
        if len(items) == n:
            break
        kind, question = _draw(rng)
        if question in seen:
            continue
        seen.add(question)
        answer = solve(question)
        assert answer is not None, question  # every template has its solver
        items.append(Item(question, answer, kind))
    return items


def prompt(question: str) -> str:
    """The few-shot prompt of one question: the model continues after ``A:``."""
    return f"{_FEW_SHOT}Q: {question}\nA:"


def question_of(text: str) -> str | None:
    """The question a ``prompt`` asks (None for any other text)."""
    m = _Q.search(text)
    return m["q"] if m is not None and text.startswith(_FEW_SHOT) else None


_NUMBER = re.compile(r"-?\d[\d,]*")
_WORD = re.compile(r"[A-Za-z]+")


def extract(output: str, numeric: bool) -> str | None:
    """The answer in an output: the first number (``numeric``) or word of its first non-empty
    line, so "7", " 7.", "**7**" and "7\\n\\nQ: ..." all read 7, and "Tuesday." reads Tuesday.
    A model that talks before answering ("The answer is 7") is scored by its first word."""
    line = next((s for s in output.splitlines() if s.strip()), "")
    m = (_NUMBER if numeric else _WORD).search(line)
    if m is None:
        return None
    return m[0].replace(",", "") if numeric else m[0]


def is_right(item: Item, output: str | None) -> bool:
    """Exact match of the extracted answer (letters and words case-insensitively)."""
    if output is None:
        return False
    got = extract(output, item.answer.lstrip("-").isdigit())
    return got is not None and got.casefold() == item.answer.casefold()
