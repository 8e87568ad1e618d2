"""``llmperf report`` (the HTML page) and ``llmperf pr-comment`` (a Markdown body) of a
results file, and the ``ReportData`` both build from one.

With ``--baselines DIR`` the run is judged again as ``llmperf compare`` judges it, so every
point carries the noise and minimum detectable effect of its verdict; without, the verdicts
are those the pytest run recorded in ``results.json`` (``checks``), and the page says that the
noise behind them is not recorded there.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from pytest_llmperf.base.atomic import atomic_write_text
from pytest_llmperf.report.html import ReportData, render_html
from pytest_llmperf.report.html_plots import baseline_bands
from pytest_llmperf.report.pr_comment import pr_comment
from pytest_llmperf.report.results_file import (
    RunFile,
    RunFileError,
    judge_recorded,
    judge_run,
    load_run,
)
from pytest_llmperf.report.run_compare import compare_runs
from pytest_llmperf.verdicts.baseline import BaselineStore
from pytest_llmperf.verdicts.compare import PointComparison

__all__ = ["add_pr_comment_parser", "add_report_parser", "report_data"]

NOT_RECORDED = (
    "verdicts as the pytest run recorded them in {path}; the noise each was judged with is not "
    "recorded there (give --baselines DIR to judge again and show it)"
)


def report_data(run: RunFile, path: str, baselines: str | None = None) -> ReportData:
    """What the page and the comment show of a results file (judged again with ``baselines``)."""
    if baselines is None:
        points: dict[str, list[PointComparison]] = {}
        lines = []
        for j in run.checks:
            if j.kind == "point" and j.concurrency is not None:
                p = PointComparison(j.config, j.concurrency, j.workload, j.verdict)
                points.setdefault(j.config, []).append(p)
            else:
                lines.append(f"{j.kind} {j.label}: {j.verdict.value}")
        note = NOT_RECORDED.format(path=path) if run.checks else f"{path} records no verdicts"
        return ReportData(
            run.sweeps, points, hardware=[run.hardware], lines=lines, source=path,
            verdicts_note=note,
        )  # fmt: skip
    directory = Path(baselines)
    if not directory.is_dir():
        raise RunFileError(f"--baselines {directory}: not a directory")
    v = judge_recorded(run, directory) if run.checks else judge_run(run, directory)
    store = BaselineStore(directory)
    bands = baseline_bands(
        run.sweeps, lambda _c: run.hardware, lambda k: store.get(k, mark_used=False)
    )
    return ReportData(
        run.sweeps,
        v.points,
        v.gates,
        hardware=[run.hardware],
        problems=[x.message for x in v.crossovers if x.message],
        lines=[x.line() for x in v.crossovers],
        bands=bands,
        source=path,
        verdicts_note=f"verdicts judged against the baselines in {directory}",
    )


def _guard(fn: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        from pytest_llmperf.verdicts.baseline_file import BaselineFileError

        try:
            return int(fn(args))
        except (RunFileError, BaselineFileError, ValueError, OSError) as exc:
            print(f"llmperf: error: {exc}", file=sys.stderr)
            return 2

    return run


def _run_report(args: argparse.Namespace) -> int:
    run = load_run(args.run)
    page = render_html(report_data(run, str(args.run), args.baselines))
    atomic_write_text(Path(args.output), page)
    print(f"report: {args.output} ({len(page.encode())} bytes)")
    return 0


def _run_pr_comment(args: argparse.Namespace) -> int:
    run = load_run(args.run)
    data = report_data(run, str(args.run), args.baselines)
    diff = None
    if args.against:
        main = load_run(args.against)
        diff = compare_runs(main, run, a_name=f"main ({args.against})", b_name="this run")
    body = pr_comment(data, diff)
    if args.output:
        atomic_write_text(Path(args.output), body)
    else:
        sys.stdout.write(body)
    return 0


def add_report_parser(subparsers: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "report",
        help="write the self-contained HTML report of a results file",
        description="One HTML file (inline CSS, plots embedded, no external URL): the verdict "
        "table, every failure sentence, what each green point rules out, and the plots.",
    )
    p.add_argument("run", metavar="RESULTS.json")
    p.add_argument("-o", "--output", default="report.html", metavar="REPORT.html")
    p.add_argument("--baselines", default=None, metavar="DIR", help="judge again against these")
    p.set_defaults(func=_guard(_run_report))
    return p


def add_pr_comment_parser(subparsers: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "pr-comment",
        help="print a Markdown pull-request comment of a results file",
        description="A Markdown body for a CI step to post: verdict counts, the points to look "
        "at, the failure sentences folded; --against main's results.json adds what changed.",
    )
    p.add_argument("run", metavar="RESULTS.json")
    p.add_argument("--against", default=None, metavar="MAIN.json", help="main's results file")
    p.add_argument("--baselines", default=None, metavar="DIR", help="judge again against these")
    p.add_argument("-o", "--output", default=None, metavar="COMMENT.md")
    p.set_defaults(func=_guard(_run_pr_comment))
    return p
