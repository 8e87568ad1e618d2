"""The session's word on a machine too busy to measure: one summary line and the exit status.

The checks (``run/busy.py``) re-measure such points and leave their tests undecided; here the
session says so once and lets the ``invalid`` setting decide whether the run may still exit 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_llmperf.base.values import LOOP_LAG_P99_LIMIT_MS
from pytest_llmperf.run.busy import summary_line

if TYPE_CHECKING:
    from pytest_llmperf.plugin.session import LLMPerfSession

BISECT_CANNOT_MEASURE = 125  # ``git bisect run``: skip this commit


def busy_line(llm: LLMPerfSession) -> list[str]:
    """The one summary line (none when every point was measured)."""
    fail = llm.settings["invalid"] == "fail" or bool(llm.settings["bisect"])
    limits = [llm.effective(s, {}, "loop_lag_limit", "[sweep]") for s in llm.suites.values()]
    line = summary_line(llm.busy, float(max(limits, default=LOOP_LAG_P99_LIMIT_MS)), fail)
    return [f"TOO BUSY: {line}"] if line else []


def busy_exit_status(llm: LLMPerfSession, session: pytest.Session) -> None:
    """Unmeasured points never exit 0 under ``invalid=fail`` (the default): a CI runner too
    busy to measure must not go green on them. Under ``--llmperf-bisect`` they mean
    'cannot measure this commit' (125), as an invalid level does."""
    if not llm.busy:
        return
    if llm.settings["bisect"]:
        session.exitstatus = BISECT_CANNOT_MEASURE
    elif llm.settings["invalid"] == "fail" and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
