"""The session's reports (results files, the step summary, plots, ab.json), written after
the baselines: one that cannot be written is a warning naming it, never the session's end.

They name only what they read of the session (``SessionResults``), so the session imports
them and they do not import the session."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pytest_llmperf.base.results import SweepResult
    from pytest_llmperf.report.ab_table import ABPoint
    from pytest_llmperf.report.results_file import Judgement
    from pytest_llmperf.run.checks import SweepCheckResult
    from pytest_llmperf.run.suite import Suite
    from pytest_llmperf.verdicts.baseline import BaselineStore
    from pytest_llmperf.verdicts.compare import PointComparison
    from pytest_llmperf.verdicts.gates import GateResult


class SessionResults(Protocol):
    """What the reports read of the session (``LLMPerfSession``)."""

    settings: dict[str, Any]
    suites: dict[Path, Suite]
    sweeps: list[SweepResult]
    points: dict[str, list[PointComparison]]
    gates: list[GateResult]
    sweep_checks: list[SweepCheckResult]
    checks: list[Judgement]
    ab_points: list[ABPoint]

    @property
    def output_dir(self) -> Path: ...

    @property
    def store(self) -> BaselineStore: ...

    @property
    def has_store(self) -> bool: ...

    def safe_hardware(self, config: str) -> str: ...


def write_reports(self: SessionResults) -> list[str]:
    """results.json, the step summary, plots, ab.json: one that cannot be written is a
    warning naming it (and a summary line); the others are still written."""
    from pytest_llmperf.report.tables import markdown_summary

    out = self.output_dir
    errors: list[str] = []

    def attempt(what: str, write: Any) -> None:
        try:
            write()
        except OSError as exc:
            where = exc.filename or what
            msg = f"{what} not written: {exc.strerror or exc} ({where})"
            errors.append(msg)
            import warnings

            from pytest_llmperf.plugin.warnings import LLMPerfWarning

            warnings.warn(LLMPerfWarning(f"pytest-llmperf: {msg}"), stacklevel=1)

    if self.sweeps:
        attempt(f"results {out / 'results.json'}", lambda: _write_results(self, out))
        summary_path = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary_path:

            def step_summary() -> None:
                with open(summary_path, "a", encoding="utf-8") as fh:
                    fh.write(markdown_summary(self.sweeps, self.points, self.gates) + "\n")

            attempt(f"step summary GITHUB_STEP_SUMMARY={summary_path}", step_summary)
        if self.settings["plots"]:
            attempt(f"plots {out / 'plots'}", lambda: _write_plots(self, out / "plots"))
    if self.ab_points:  # ab: ab.json and its Markdown table
        from pytest_llmperf.plugin.ab import write_ab

        attempt(f"A/B report in {out}", lambda: write_ab(self.ab_points, out))
    return errors


def _write_results(self: SessionResults, out: Path) -> None:
    """One results file per hardware key (``llmperf compare`` judges it like this run did)."""
    from pytest_llmperf.report.results_file import RunFile, save_run

    by_hw: dict[str, list[SweepResult]] = {}
    for sweep in self.sweeps:
        by_hw.setdefault(self.safe_hardware(sweep.config), []).append(sweep)
    out.mkdir(parents=True, exist_ok=True)
    for i, (hw, sweeps) in enumerate(sorted(by_hw.items())):
        name = "results.json" if i == 0 else f"results-{hw}.json"
        checks = [j for j in self.checks if self.safe_hardware(j.config) == hw]
        save_run(RunFile(hardware=hw, sweeps=sweeps, checks=checks), out / name)


def _write_plots(self: SessionResults, directory: Path) -> None:
    from pytest_llmperf.plugin.plots import write_plots

    write_plots(
        directory,
        self.sweeps,
        self.points,
        self.sweep_checks,
        [c for suite in self.suites.values() for c in suite.crossovers],
        self.safe_hardware,
        lambda key: self.store.get(key, mark_used=False) if self.has_store else None,
    )
