"""The simulator's answers to the accuracy probe's prompts (``base/accuracy_items``).

The simulator has no model, so it answers by solving the question and then, for a share
``--sim-accuracy`` of the questions, gives that answer and otherwise a wrong one. Which
questions are answered right depends on a hash of the question alone: deterministic (greedy
decoding is), and a lower accuracy loses a subset of the items a higher one answers, as a
server that got worse at the same questions would.
"""

from __future__ import annotations

import hashlib
from typing import Any

from pytest_llmperf.base.accuracy_items import question_of, solve

__all__ = ["answer"]


def _fraction(question: str) -> float:
    digest = hashlib.sha256(question.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def answer(prompt: Any, accuracy: float) -> str | None:
    """The text to answer ``prompt`` with, or None when it is no probe prompt (or the
    accuracy is 0: the engine's usual meaningless text, as a random-weight model gives)."""
    if accuracy <= 0 or not isinstance(prompt, str):
        return None
    question = question_of(prompt)
    right = solve(question) if question is not None else None
    if right is None:
        return None
    if _fraction(question or "") < accuracy:
        return f" {right}\n"
    return f" {int(right) + 1}\n" if right.lstrip("-").isdigit() else " No\n"
