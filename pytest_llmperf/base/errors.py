"""The one exception root: ``except LLMPerfError`` catches everything this package raises on
purpose (bad input, a server that would not start, an unreadable baseline), and nothing else."""

from __future__ import annotations


class LLMPerfError(Exception):
    """Base of every error pytest-llmperf raises for a person to read."""


class InputError(LLMPerfError, ValueError):
    """Bad input (a flag, a file, a field): the message names where it came from."""
