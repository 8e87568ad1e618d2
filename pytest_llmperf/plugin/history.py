"""The session's results appended to the history store, once, by the process that reports.

Under xdist only the controller gets here (``pytest_sessionfinish`` after merging every
worker's payload), so a session is one run however many workers measured it. A database that
cannot be written is a warning and a summary line, like a report file that cannot be.
"""

from __future__ import annotations

import warnings
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pytest_llmperf.base.errors import LLMPerfError
from pytest_llmperf.base.redaction import redact

if TYPE_CHECKING:
    from pytest_llmperf.history.records import CheckRecord
    from pytest_llmperf.plugin.session import LLMPerfSession


def append_history(llm: LLMPerfSession) -> list[str]:
    """Append the session when ``history`` is set and it measured something; the summary
    lines (the appended run, or why it was not)."""
    setting = llm.settings.get("history")
    if setting is None or not llm.sweeps:
        return []
    from pytest_llmperf.history.append import append_run
    from pytest_llmperf.history.from_results import git_commit, record_from_results

    record = record_from_results(
        llm.sweeps,
        source="pytest",
        hardware=llm.safe_hardware,
        points=llm.points,
        gates=llm.gates,
        checks=_checks(llm),
        finished_at=datetime.now(UTC),
        commit=git_commit(llm.rootdir),
    )
    try:
        return [append_run(setting, record, llm.rootdir)]
    except LLMPerfError as exc:
        from pytest_llmperf.plugin.warnings import LLMPerfWarning

        message = f"history not appended: {redact(str(exc))}"
        warnings.warn(LLMPerfWarning(f"pytest-llmperf: {message}"), stacklevel=1)
        return [f"WARNING: {message}"]


def _checks(llm: LLMPerfSession) -> list[CheckRecord]:
    """Whole-sweep checks and A/B points as check rows (gates are ``record_from_results``')."""
    from pytest_llmperf.history.records import CheckRecord
    from pytest_llmperf.plugin.kinds.ab import points_of

    rows = [CheckRecord("sweep", r.label, r.verdict.value, r.line()) for r in llm.sweep_checks]
    for point in points_of(llm):
        name = f"{point.ab} {point.metric} C={point.concurrency}"
        rows.append(CheckRecord("ab", name, point.verdict.value, redact(point.message)))
    return rows
