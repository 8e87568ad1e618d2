"""The plugin's warnings: pytest warnings, so ``-W error::pytest.PytestWarning`` and the
warnings summary treat them like pytest's own."""

from __future__ import annotations

import warnings

import pytest


class LLMPerfWarning(pytest.PytestWarning):
    """Base of every pytest-llmperf warning."""


class LLMPerfStaleBaselineWarning(LLMPerfWarning):
    """A metric improved beyond its tolerance: the baseline no longer describes the server."""


class LLMPerfInconclusiveWarning(LLMPerfWarning):
    """A point stayed inconclusive after its re-runs: too noisy to judge either way."""


WARNING_KINDS: dict[str, type[LLMPerfWarning]] = {
    "stale": LLMPerfStaleBaselineWarning,
    "inconclusive": LLMPerfInconclusiveWarning,
}


def warn(kind: str, message: str) -> None:
    """Emit one warning at the user's test (two frames up: enact → the assert method)."""
    warnings.warn(WARNING_KINDS[kind](message), stacklevel=4)
