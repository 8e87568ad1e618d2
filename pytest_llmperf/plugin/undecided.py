"""The session's word on checks left inconclusive: one summary line, one warning, the exit status.

Each test enacts the ``undecided`` setting itself (``plugin/checks.enact``: "warn" passes,
"fail" fails, "exit" skips); here the session says once which checks stayed inside the noise
and, under "exit", ends with ``EXIT_UNDECIDED`` when nothing failed, so CI can tell "could not
decide" from "regressed" (125 under ``--llmperf-bisect``: ``git bisect run`` skips the commit).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import pytest

from pytest_llmperf.plugin.warnings import LLMPerfInconclusiveWarning
from pytest_llmperf.verdicts.compare import EXIT_UNDECIDED
from pytest_llmperf.verdicts.verdict import Verdict

if TYPE_CHECKING:
    from pytest_llmperf.plugin.session import LLMPerfSession

_WHAT = {
    "warn": "they pass (--llmperf-undecided=warn)",
    "fail": "their tests failed (--llmperf-undecided=fail)",
    "exit": f"their tests were skipped; exit status {EXIT_UNDECIDED} when nothing failed "
    "(--llmperf-undecided=exit)",
}


def undecided_checks(llm: LLMPerfSession) -> list[str]:
    """Labels of every check whose verdict is inconclusive (points, gates, whole-sweep checks,
    each kind's own results such as A/B points)."""
    out = [
        f"{p.config} C={p.concurrency}"
        for ps in llm.points.values()
        for p in ps
        if p.verdict == Verdict.INCONCLUSIVE
    ]
    out += [g.gate.describe() for g in llm.gates if g.verdict == Verdict.INCONCLUSIVE]
    out += [r.label for r in llm.sweep_checks if r.verdict == Verdict.INCONCLUSIVE]
    for name, results in llm.kind_results.items():
        for r in results:
            if getattr(r, "verdict", None) == Verdict.INCONCLUSIVE:
                c = getattr(r, "concurrency", None)
                label = getattr(r, "ab", None) or name
                out.append(f"{label} C={c}" if c is not None else str(label))
    return out


def summary_text(llm: LLMPerfSession) -> str | None:
    """The one sentence (None when every check decided)."""
    labels = undecided_checks(llm)
    if not labels:
        return None
    shown = ", ".join(labels[:8]) + (", ..." if len(labels) > 8 else "")
    n = len(labels)
    return (
        f"{n} check{'s' if n != 1 else ''} inconclusive after re-runs ({shown}): within the "
        f"noise, neither pass nor fail; {_WHAT.get(llm.settings['undecided'], _WHAT['warn'])}. "
        "'what green means' says what this run could have caught"
    )


def undecided_line(llm: LLMPerfSession) -> list[str]:
    text = summary_text(llm)
    return [f"INCONCLUSIVE: {text}"] if text else []


def undecided_exit_status(llm: LLMPerfSession, session: pytest.Session) -> None:
    """ "warn": one warning for the session; "exit": its own exit status when nothing failed
    (``--llmperf-bisect`` maps it to 125 in ``reports.bisect_status``)."""
    text = summary_text(llm)
    if text is None:
        return
    policy = llm.settings["undecided"]
    if policy == "warn":
        try:
            warnings.warn(LLMPerfInconclusiveWarning(f"pytest-llmperf: {text}"), stacklevel=1)
        except LLMPerfInconclusiveWarning:
            # -W error: the user asked warnings to fail the run; say so by the exit status.
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
    elif policy == "exit" and not llm.settings["bisect"]:
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = EXIT_UNDECIDED
