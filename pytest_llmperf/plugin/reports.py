"""The session's reporting: the header, the baselines flushed once, the files (results, one
step summary, plots, each kind's own), the terminal summary and the exit status.

Files are written after the baselines: one that cannot be written is a warning naming it,
never the session's end. Each check kind adds its own lines and files (``plugin/kinds/``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_llmperf.plugin.kinds import kinds
from pytest_llmperf.plugin.options import client_text

if TYPE_CHECKING:
    from pytest_llmperf.base.results import SweepResult
    from pytest_llmperf.plugin.session import LLMPerfSession
    from pytest_llmperf.report.html import ReportData
    from pytest_llmperf.report.trends import Trends
    from pytest_llmperf.verdicts.baseline import BaselineEntry, EntryKey


# -- the start of the session ------------------------------------------------------------------


def header_lines(llm: LLMPerfSession, config: pytest.Config) -> list[str] | None:
    """Everything needed to reproduce the run: server mode, URL, hardware, levels, workload."""
    s = llm.settings
    args = [a for a in config.args if not a.startswith("-")] or [str(llm.rootdir)]
    first = Path(args[0]).resolve() if Path(args[0]).exists() else llm.rootdir
    path = llm.suite_path(first)
    if path is None:
        return None
    try:
        suite = llm.suite(path)
    except pytest.UsageError:
        return None  # reported properly at collection
    run = llm.perf_run(suite)
    lines = [f"llmperf: suite {path}"]
    for cfg in suite.servers:
        try:
            mode = run.mode_for(cfg.name)
        except Exception as exc:  # e.g. --llmperf-require-real without SGLang
            lines.append(f"llmperf: server {cfg.name}: {exc}")
            continue
        where = run.url_for(cfg.name) if mode == "attached" else "launched on a free port"
        extra = f", profile {run.sim_profile_for(cfg)}" if mode == "simulated" else ""
        lines.append(
            f"llmperf: server {cfg.name}: {mode.upper()} ({where}{extra}), model {cfg.model}, "
            f"hardware key {run.hardware_for(cfg.name)}"
        )
        workers = getattr(config.option, "numprocesses", None)
        workers = workers if isinstance(workers, int) and workers > 0 else None
        lines.append(f"llmperf:   {run.gpu_text(cfg.name, workers)}")
    lines.append(f"llmperf: {run.telemetry.header}")
    if any(run.mode_for(c.name) == "simulated" for c in suite.servers if not s["require_real"]):
        lines.append(
            "llmperf: NOTE: SGLang is not in use; the numbers come from the SIMULATED server "
            "(pass --llmperf-require-real on GPU runners)"
        )
    levels = llm.effective(suite, {}, "levels", "the command line, environment, ini or [sweep]")
    # the first server's workload: for an attached server that is not SGLang the backend
    # it takes (the header said "sglang-..." against llama-server's OpenAI API)
    first_config = suite.servers[0].name if suite.servers else None
    wl = llm.workload(suite, {}, "the command line, environment, ini or [sweep]", first_config)
    lines.append(
        f"llmperf: levels {','.join(map(str, levels))}; workload {wl.key()} seed={wl.seed}; "
        f"client {client_text(int(s['client_processes']))}; baselines {llm.store.directory}"
        + ("; UPDATING baselines" if s["update"] else "")
    )
    from pytest_llmperf.plugin.timing import plan_lines

    return lines + plan_lines(llm, suite, run, levels, wl)


# -- the end of the session --------------------------------------------------------------------


def finish(llm: LLMPerfSession, session: pytest.Session) -> None:
    """Flush baselines once (first: a report that cannot be written must not cost the
    recordings), fail the session on unused entries, write the reports, decide the exit status."""
    order = [s.name for suite in llm.suites.values() for s in suite.servers]
    llm.sweeps.sort(key=lambda s: order.index(s.config) if s.config in order else len(order))
    _flush_baselines(llm, session)
    llm.report_errors += write_reports(llm)
    from pytest_llmperf.plugin.history import append_history

    llm.history_lines = append_history(llm)
    if llm.settings["bisect"]:
        session.exitstatus = bisect_status(llm, session)


def bisect_status(llm: LLMPerfSession, session: pytest.Session) -> int:
    """``git bisect run``'s contract: 125 when this commit cannot be measured (a server did
    not start, a level was invalid) or, under ``undecided = "exit"``, a check stayed
    inconclusive; 1 on a regression or any failed test, else 0."""
    from pytest_llmperf.verdicts.verdict import Verdict

    if llm.unmeasured or llm.invalid:
        return 125
    verdicts = [p.verdict for ps in llm.points.values() for p in ps]
    verdicts += [g.verdict for g in llm.gates]
    failed = Verdict.FAIL in verdicts or any(r.verdict == Verdict.FAIL for r in llm.sweep_checks)
    if failed or session.testsfailed:
        return 1
    from pytest_llmperf.plugin.undecided import undecided_checks

    # "could not decide this commit" is what 125 tells git bisect (any other code is "bad")
    return 125 if llm.settings["undecided"] == "exit" and undecided_checks(llm) else 0


def _flush_baselines(llm: LLMPerfSession, session: pytest.Session) -> None:
    from pytest_llmperf.verdicts.baseline import BaselineFileError

    if not llm.has_store:
        return
    store = llm.store
    update = bool(llm.settings["update"])
    try:
        unused = store.unused()
        report = store.flush(delete_unused=update)
    except BaselineFileError as exc:
        # Already reported by the tests that read the file; never lose the session to it.
        llm.baseline_lines = [f"not written: {exc}"]
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        return
    lines: list[str] = list(store.replaced)
    lines += [report.summary()] if (report.files or update) else []
    lines += [f"not written: {e}" for e in report.errors]
    if report.errors and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if unused and not update:
        warn_only = bool(llm.settings["warn_unused"])
        lines.append(
            f"{len(unused)} baseline entr{'y' if len(unused) == 1 else 'ies'} unused: "
            + ", ".join(k.label() for k in unused[:10])
            + ("" if len(unused) <= 10 else ", ...")
            + ". Re-run with --llmperf-update to delete them"
            + ("." if warn_only else " (or --llmperf-warn-unused to only warn).")
        )
        if not warn_only and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    llm.baseline_lines = lines


def has_results(llm: LLMPerfSession) -> bool:
    """Whether the session has anything to summarize (an xdist controller only merged it)."""
    kind_fields = {f for k in kinds() for f in k.payload}
    own = any(getattr(llm, f) for f in kind_fields) or any(llm.kind_results.values())
    return bool(llm.sweeps or llm.unmeasured or own)


def summary_lines(llm: LLMPerfSession) -> list[str]:
    """The terminal summary: tables, whole-sweep checks, each kind's lines, invalid levels,
    baselines."""
    from pytest_llmperf.report.tables import render_run

    lines = render_run(llm.sweeps, llm.points, llm.gates).splitlines()
    lines += [r.line() for r in llm.sweep_checks]
    for kind in kinds():
        lines += kind.summary_lines(llm)
    lines += [f"INVALID: {line}" for line in llm.invalid]
    lines += [f"NOT MEASURED: {c}: {why}" for c, why in llm.unmeasured.items()]
    lines += [f"baselines: {line}" for line in llm.baseline_lines]
    lines += llm.history_lines
    lines += [f"WARNING: {line}" for line in llm.report_errors]
    from pytest_llmperf.plugin.timing import took_lines

    lines += took_lines(llm)
    lines.append(f"results: {llm.output_dir / 'results.json'}")
    if llm.sweeps and llm.settings["html_report"] != "off":
        lines.append(f"report: {llm.output_dir / 'report.html'}")
    if llm.settings["plots"]:
        lines.append(f"plots: {llm.output_dir / 'plots'}")
    return lines


# -- the files ---------------------------------------------------------------------------------


def write_reports(llm: LLMPerfSession) -> list[str]:
    """results.json, the step summary, plots, each kind's own files: one that cannot be
    written is a warning naming it (and a summary line); the others are still written."""
    out = llm.output_dir
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

    if llm.sweeps:
        attempt(f"results {out / 'results.json'}", lambda: _write_results(llm, out))
        if llm.settings["plots"]:
            attempt(f"plots {out / 'plots'}", lambda: _write_plots(llm, out / "plots"))
        if llm.settings["html_report"] != "off":
            attempt(f"report {out / 'report.html'}", lambda: _write_html(llm, out))
    for kind in kinds():
        for what, write in kind.reports(llm):
            attempt(what, write)
    parts = step_summary(llm)
    summary_path = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary_path and parts:

        def append() -> None:
            with open(summary_path, "a", encoding="utf-8") as fh:
                fh.write("".join(part + "\n" for part in parts))

        attempt(f"step summary GITHUB_STEP_SUMMARY={summary_path}", append)
    return errors


def step_summary(llm: LLMPerfSession) -> list[str]:
    """The Markdown parts of ``$GITHUB_STEP_SUMMARY``: the sweeps' tables, then each kind's."""
    from pytest_llmperf.report.tables import markdown_summary

    parts = [markdown_summary(llm.sweeps, llm.points, llm.gates)] if llm.sweeps else []
    for kind in kinds():
        part = kind.markdown(llm)
        if part is not None:
            parts.append(part)
    return parts


def _write_results(llm: LLMPerfSession, out: Path) -> None:
    """One results file per hardware key (``llmperf compare`` judges it like this run did)."""
    from pytest_llmperf.plugin.timing import took
    from pytest_llmperf.report.results_file import RunFile, save_run

    by_hw: dict[str, list[SweepResult]] = {}
    for sweep in llm.sweeps:
        by_hw.setdefault(llm.safe_hardware(sweep.config), []).append(sweep)
    out.mkdir(parents=True, exist_ok=True)
    for i, (hw, sweeps) in enumerate(sorted(by_hw.items())):
        name = "results.json" if i == 0 else f"results-{hw}.json"
        checks = [j for j in llm.checks if llm.safe_hardware(j.config) == hw]
        mine = {c: t for c, t in took(llm).items() if llm.safe_hardware(c) == hw}
        probes = [p for p in llm.probes if llm.safe_hardware(p.config) == hw]
        save_run(RunFile(hardware=hw, sweeps=sweeps, checks=checks, took=mine, probes=probes),
                 out / name)  # fmt: skip


def _write_plots(llm: LLMPerfSession, directory: Path) -> None:
    from pytest_llmperf.plugin.plots import write_plots

    write_plots(
        directory,
        llm.sweeps,
        llm.points,
        llm.sweep_checks,
        [c for suite in llm.suites.values() for c in suite.crossovers],
        llm.safe_hardware,
        stored_entry(llm),
    )


def stored_entry(llm: LLMPerfSession) -> Callable[[EntryKey], BaselineEntry | None]:
    """The baseline entry a plot's band or a report reads: none where the file is unreadable,
    as that file already failed its tests with its path and field; a report must not crash
    the session's end over it."""
    from pytest_llmperf.verdicts.baseline_file import BaselineFileError

    def get(key: EntryKey) -> BaselineEntry | None:
        if not llm.has_store:
            return None
        try:
            return llm.store.get(key, mark_used=False)
        except BaselineFileError:
            return None

    return get


def _trends(llm: LLMPerfSession) -> tuple[Trends, str | None]:
    """The session's points against the history database, when ``history`` names one. The
    trend uses the declared window (``history_window`` is a test's: a test that sets its own
    judges its point with it, and says so in its own sentence)."""
    from pytest_llmperf.base.errors import LLMPerfError
    from pytest_llmperf.base.redaction import redact
    from pytest_llmperf.report.trends import Trends, history_trends
    from pytest_llmperf.run.settings import SETTINGS_BY_NAME
    from pytest_llmperf.verdicts.verdict import Verdict

    setting = llm.settings.get("history")
    if setting is None or not llm.sweeps:
        return Trends(), None
    invalid: dict[tuple[str, str], set[int]] = {}
    for ps in llm.points.values():
        for p in ps:
            if p.verdict == Verdict.INVALID:
                invalid.setdefault((p.config, p.workload), set()).add(p.concurrency)
    try:
        return history_trends(
            setting, llm.rootdir, llm.sweeps, llm.safe_hardware, invalid,
            window=SETTINGS_BY_NAME["history_window"].default,
        ), None  # fmt: skip
    except LLMPerfError as exc:
        return Trends(), f"trends not read from the history: {redact(str(exc))}"


def report_data(llm: LLMPerfSession) -> ReportData:
    """The session as the HTML report and the PR comment show it."""
    from pytest_llmperf.report.html import ReportData
    from pytest_llmperf.report.html_plots import baseline_bands

    baseline = stored_entry(llm)
    trends, trend_error = _trends(llm)
    problems = [f"INVALID: {line}" for line in llm.invalid]
    problems += [f"WARNING: {trend_error}"] if trend_error else []
    problems += [f"NOT MEASURED: {c}: {why}" for c, why in llm.unmeasured.items()]
    problems += [f"WARNING: {line}" for line in llm.report_errors]
    lines = [r.line() for r in llm.sweep_checks]
    for kind in kinds():
        lines += kind.summary_lines(llm)
    return ReportData(
        llm.sweeps,
        llm.points,
        llm.gates,
        hardware=sorted({llm.safe_hardware(s.config) for s in llm.sweeps}),
        problems=problems,
        lines=lines,
        bands=baseline_bands(llm.sweeps, llm.safe_hardware, baseline),
        plots=llm.settings["html_report"] == "plots",
        trends=trends.series,
        history_lines=trends.lines,
    )


def _write_html(llm: LLMPerfSession, out: Path) -> None:
    """``report.html`` and ``pr-comment.md``, from the session's own verdicts."""
    from pytest_llmperf.base.atomic import atomic_write_text
    from pytest_llmperf.report.html import render_html
    from pytest_llmperf.report.pr_comment import pr_comment

    data = report_data(llm)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "report.html", render_html(data))
    atomic_write_text(out / "pr-comment.md", pr_comment(data))
