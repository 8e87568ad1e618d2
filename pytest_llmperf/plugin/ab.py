"""The A/B glue of the session (``llmperf_ab``): one shared ``ABRun`` per compare, its files.

Kept out of ``session.py`` so that file stays one job: the state lives on ``LLMPerfSession``
(``ab_runs``, ``ab_points``), these functions act on it. They name only what they read of it
(``ABSession``), so the session imports them and they do not import the session.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from pytest_llmperf.plugin.params import ABParam
from pytest_llmperf.report.ab_table import AB_FILE_NAME, ABPoint, ab_markdown, ab_table, save_ab
from pytest_llmperf.run.ab import ABRun

if TYPE_CHECKING:
    from pytest_llmperf.base.results import Workload
    from pytest_llmperf.run.perfrun import PerfRun
    from pytest_llmperf.run.suite import Suite
    from pytest_llmperf.verdicts.validity import ValidityPolicy


class ABSession(Protocol):
    """What ``ab_run`` uses of the session (``LLMPerfSession``)."""

    suites: dict[Path, Suite]
    ab_runs: dict[tuple[Path, int, Workload, tuple[int, ...]], ABRun]

    def perf_run(self, suite: Suite) -> PerfRun: ...


def ab_run(
    llm: ABSession,
    param: ABParam,
    workload: Workload,
    levels: tuple[int, ...],
    policy: ValidityPolicy | None = None,
) -> ABRun:
    """The A/B rounds of one ``[[compare]]``, shared by the tests of its levels."""
    suite = llm.suites[param.suite_path]
    spec = suite.compares[param.index]
    levels = tuple(spec.levels or levels)
    key = (param.suite_path, param.index, workload, levels)
    if key not in llm.ab_runs:
        llm.ab_runs[key] = ABRun(spec, levels, workload, llm.perf_run(suite), policy=policy)
    return llm.ab_runs[key]


def write_ab(points: list[ABPoint], out: Path) -> None:
    """``ab.json`` in the output dir, and the Markdown table in ``$GITHUB_STEP_SUMMARY``."""
    save_ab(points, out / AB_FILE_NAME)
    summary_path = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary_path:
        with open(summary_path, "a", encoding="utf-8") as fh:
            fh.write(ab_markdown(points) + "\n")


def ab_summary_lines(points: list[ABPoint], output_dir: Path) -> list[str]:
    lines = ["", *ab_table(points).splitlines()]
    lines += [f"A/B {p.verdict}: {p.message}" for p in points]
    lines.append(f"A/B results: {output_dir / AB_FILE_NAME}")
    return lines
