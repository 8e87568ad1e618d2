"""pytest's outcomes for the objects a perf test gets from the kinds' fixtures.

The judging lives in ``run/`` (``checks``, ``sweep_checks``, ``ab``) and ends in an
``Outcome``; here it becomes ``pytest.fail`` / ``pytest.skip`` / a warning, secrets masked.
``__tracebackhide__`` keeps the traceback at the user's test line, not inside the plugin.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, NoReturn, TypeVar

import pytest

from pytest_llmperf.base.errors import LLMPerfError
from pytest_llmperf.plugin.warnings import warn
from pytest_llmperf.report.tables import redact
from pytest_llmperf.run.checks import Outcome

T = TypeVar("T")
R = TypeVar("R")  # what a comparison check evaluates to


def _fail(message: str) -> NoReturn:
    __tracebackhide__ = True
    pytest.fail(redact(message), pytrace=False)


def call(fn: Callable[[], T]) -> T:
    """Run one step of a check; a measuring or baseline error fails the test in one sentence."""
    __tracebackhide__ = True
    error = None
    try:
        return fn()
    except LLMPerfError as exc:
        error = str(exc)
    _fail(error)  # outside the except block: no chained traceback in the report


def enact(outcome: Outcome, undecided: str = "warn") -> None:
    """Turn a check's outcome into pytest's: fail, skip, or pass with warnings.

    An inconclusive verdict follows the ``undecided`` setting: "warn" passes (the session
    warns once for all of them, ``plugin/undecided.py``: a warning in every test of every run
    is soon ignored), "fail" fails the test, "exit" skips it (neither pass nor fail; the
    session then exits with its own status)."""
    __tracebackhide__ = True
    if outcome.kind == "fail":
        _fail(outcome.message)
    if outcome.kind == "skip":
        pytest.skip(redact(outcome.message))
    open_ = [message for kind, message in outcome.warnings if kind == "inconclusive"]
    if open_ and undecided in ("fail", "exit"):
        text = f"INCONCLUSIVE (--llmperf-undecided={undecided}): " + "\n".join(open_)
        if undecided == "fail":
            _fail(text)
        pytest.skip(redact(text))
    for kind, message in outcome.warnings:
        if kind != "inconclusive":
            warn(kind, redact(message))


def policy(check: object) -> str:
    """The session's ``undecided`` setting, as the check's run holds it."""
    run = getattr(check, "run", None)
    return str(getattr(getattr(run, "options", None), "undecided", "warn"))


class ComparisonAsserts(Generic[R]):
    """``.evaluate()`` and ``.check()`` for a comparison of two configs (gate, A/B)."""

    def evaluate(self) -> R:
        """The judgement, without asserting (a ``GateResult``, an ``ABPoint``)."""
        __tracebackhide__ = True
        return call(super().evaluate)  # type: ignore[misc]

    def check(self) -> None:
        """Fail with a sentence saying where, by how much and why the comparison is not met;
        warn when it is inconclusive."""
        __tracebackhide__ = True
        enact(call(self.judge), policy(self))  # type: ignore[attr-defined]


class SweepAsserts:
    """``.measure()`` and ``.check()`` for a whole-sweep check (crossover, SLO)."""

    def measure(self) -> int:
        """The whole-sweep number (a concurrency), measuring the sweep if need be."""
        __tracebackhide__ = True
        return call(super().measure)  # type: ignore[misc]

    def check(self) -> None:
        """Fail when the number fell below its baseline; warn when it rose (stale)."""
        __tracebackhide__ = True
        enact(call(self.judge), policy(self))  # type: ignore[attr-defined]

    assert_baseline = check  # the older name, kept as an alias
