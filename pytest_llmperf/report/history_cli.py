"""``llmperf history``: the runs in the history database, and one point's trend over them.

``list`` prints the recent runs. ``show`` prints one point's metric run by run, each run with
the drift rule's decision and its sentence (``verdicts/drift.py``), marks change points, and
with ``--plot`` draws the series (PNG: the values, the window's mean and threshold band, bad
runs and change points marked). ``--bisect`` prints the range ``git bisect`` should search for
the latest regression: the last good run's commit to the change point's, and the commits between
them when the current directory is that git repository. ``show`` exits 1 when the newest run is a
declared regression, so a CI step can run it after the suite.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_llmperf.base.errors import InputError, LLMPerfError
from pytest_llmperf.base.metric_defs import METRICS
from pytest_llmperf.base.values import argparse_type, parse_history, parse_positive_int, reveal
from pytest_llmperf.history.records import PointKey, SeriesPoint
from pytest_llmperf.history.store import HistoryStore
from pytest_llmperf.report.plots import _pyplot
from pytest_llmperf.verdicts.compare import fmt_num
from pytest_llmperf.verdicts.drift import (
    BisectRange,
    DriftDecision,
    DriftRule,
    RunPoint,
    bisect_range,
    change_points,
    detect,
)
from pytest_llmperf.verdicts.verdict import Verdict

__all__ = ["add_history_parser", "plot_series"]

_GIT_TIMEOUT_S = 10.0
_KEY_SCAN_RUNS = 200  # recent runs read to find which workloads and hardware a config ran on


def add_history_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``llmperf history [--history URL] {list,show}``."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "history",
        help="list the runs of the history database; show a point's trend and change points",
        description="Read the history database (docs/history.md) and judge a point's series "
        "with the drift rule (docs/drift.md).",
    )
    p.add_argument(
        "--history",
        default=None,
        metavar="URL",
        help="default (.llmperf/history.sqlite here), a SQLite file or a database URL "
        "(default: LLMPERF_HISTORY, else default)",
    )
    sub = p.add_subparsers(dest="history_command", metavar="ACTION", required=True)
    lst = sub.add_parser("list", help="the recent runs, newest first")
    lst.add_argument("--limit", type=argparse_type(parse_positive_int), default=20)
    lst.set_defaults(func=_guarded(_list))
    show = sub.add_parser("show", help="a point's metric run by run, judged by the drift rule")
    show.add_argument("--config", required=True)
    show.add_argument("--concurrency", "-c", required=True, type=argparse_type(parse_positive_int))
    show.add_argument("--metric", default="output_throughput", choices=sorted(METRICS))
    show.add_argument("--workload", default=None, help="workload key (when the config ran several)")
    show.add_argument("--hardware", default=None, help="hardware key (when it ran on several)")
    show.add_argument(
        "--window",
        type=argparse_type(parse_positive_int),
        default=DriftRule().window,
        help="earlier good runs each run is judged against (default %(default)s)",
    )
    show.add_argument("--since", type=int, default=None, metavar="RUN_ID", help="judge only "
                      "runs from this run id on (after a deliberate change)")  # fmt: skip
    show.add_argument("--plot", type=Path, default=None, metavar="OUT.png")
    show.add_argument("--bisect", action="store_true", help="print the range to git bisect")
    show.set_defaults(func=_guarded(_show))
    return p


def _guarded(run: Any) -> Any:
    def handler(args: argparse.Namespace) -> int:
        try:
            return int(run(args))
        except LLMPerfError as exc:
            print(f"llmperf history: error: {exc}", file=sys.stderr)
            return 2 if isinstance(exc, InputError) else 1

    return handler


def _open(args: argparse.Namespace) -> HistoryStore:
    given = args.history if args.history is not None else os.environ.get("LLMPERF_HISTORY", "")
    value = reveal(parse_history(given)) if given else "default"
    if value is None:
        raise InputError("llmperf history: --history off names no database to read")
    return HistoryStore.open(None if value == "default" else value, base=Path.cwd())


def _list(args: argparse.Namespace) -> int:
    with _open(args) as store:
        rows = store.runs(limit=args.limit)
        print(f"history: {store.url}")
    if not rows:
        print("no runs stored")
        return 0
    for r in rows:
        commit = (r.git_commit or "-")[:12]
        when = r.started_at.strftime("%Y-%m-%d %H:%M:%S")
        configs = ",".join(sorted(r.provenance.get("servers", {}))) or "-"
        print(
            f"run #{r.id:<5} {when}  {r.source:6}  {commit:12}  {r.hardware_key}  "
            f"{r.points} point{'s' * (r.points != 1)}  {configs}"
        )
    return 0


def _key(store: HistoryStore, args: argparse.Namespace) -> PointKey:
    """The point ``--config``/``-c`` name, its workload and hardware from the stored runs when
    the flags leave them out and only one was measured."""
    found = set()
    for run in store.runs(limit=_KEY_SCAN_RUNS):
        server = run.provenance.get("servers", {}).get(args.config)
        if server:
            found.add((server.get("workload"), server.get("hardware_key")))
    found = {
        (w, h)
        for w, h in found
        if args.workload in (None, w) and args.hardware in (None, h) and w and h
    }
    if args.workload and args.hardware:
        return PointKey(args.config, args.workload, args.concurrency, args.hardware)
    if not found:
        raise InputError(
            f"--config {args.config}: no stored run measured it"
            + (" with that --workload/--hardware" if args.workload or args.hardware else "")
        )
    if len(found) > 1:
        choices = "; ".join(f"--workload {w} --hardware {h}" for w, h in sorted(found))
        raise InputError(f"--config {args.config} ran on several workloads or hardware: {choices}")
    ((workload, hardware),) = found
    return PointKey(args.config, workload, args.concurrency, hardware)


def _points(series: Sequence[SeriesPoint]) -> list[RunPoint]:
    return [RunPoint(f"run #{p.run_id}", p.value, p.git_commit, p.samples) for p in series]


def _show(args: argparse.Namespace) -> int:
    with _open(args) as store:
        key = _key(store, args)
        series = store.series(key, args.metric)
    if args.since is not None:
        series = [p for p in series if p.run_id >= args.since]
    if not series:
        raise InputError(f"no stored value of {args.metric} at {key}")
    rule = DriftRule(window=args.window, min_runs=min(DriftRule().min_runs, args.window))
    d = METRICS[args.metric]
    points = _points(series)
    subject = f"{key.config} {args.metric} at C={key.concurrency}"
    decisions = detect(points, d.direction, rule, subject=subject, unit=d.unit)
    cps = set(change_points(decisions))
    print(f"{subject} ({key.workload_key}, {key.hardware_key}), {len(points)} runs:")
    for s, dec in zip(series, decisions, strict=True):
        mark = "  <- change point" if dec.index in cps else ""
        commit = (s.git_commit or "-")[:12]
        head = f"  run #{s.run_id:<5} {commit:12} {fmt_num(s.value):>8} {dec.verdict.value}"
        print(f"{head}{mark}\n      {dec.sentence}")
    if args.plot is not None:
        plot_series(points, decisions, args.plot, f"{subject} [{d.unit}]")
        print(f"plot: {args.plot}")
    if args.bisect:
        _print_bisect(bisect_range(points, decisions))
    return 1 if decisions[-1].verdict is Verdict.FAIL else 0


def _print_bisect(br: BisectRange | None) -> None:
    if br is None:
        print("bisect: no regression declared, nothing to bisect")
        return
    good = br.good.label if br.good is not None else "none (the regression starts the series)"
    print(f"bisect: last good {good}, first bad {br.bad.label}")
    command = br.command()
    if command is None:
        print("bisect: the runs carry no commit to bisect between")
        return
    print(f"bisect: {command}")
    assert br.good is not None and br.good.commit and br.bad.commit  # command() checked them
    commits = _git_between(br.good.commit, br.bad.commit)
    if commits is None:
        print("bisect: (the current directory is not the repository of these commits)")
        return
    print(f"bisect: {len(commits)} candidate commit{'s' * (len(commits) != 1)}:")
    for line in commits:
        print(f"  {line}")


def _git_between(good: str, bad: str) -> list[str] | None:
    """``git log --oneline good..bad`` in the current directory, oldest first; None when git
    is missing or does not know the commits."""
    cmd = ["git", "log", "--oneline", "--reverse", f"{good}..{bad}"]
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=_GIT_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.splitlines() if done.returncode == 0 else None


def plot_series(
    points: Sequence[RunPoint], decisions: Sequence[DriftDecision], path: Path, title: str
) -> None:
    """The series as a PNG: values by run, each judged run's window mean and threshold band,
    bad runs in red, change points as dashed lines, runs without enough history hollow."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 4.5))
    try:
        x = list(range(len(points)))
        ax.plot(x, [p.value for p in points], color="0.6", lw=1, zorder=1)
        judged = [d for d in decisions if d.mean is not None and d.threshold is not None]
        if judged:
            jx = [d.index for d in judged]
            mean = [d.mean or 0.0 for d in judged]
            band = [abs(d.mean or 0.0) * (d.threshold or 0.0) for d in judged]
            ax.plot(jx, mean, color="tab:blue", lw=1, label="window mean")
            ax.fill_between(jx, [m - b for m, b in zip(mean, band, strict=True)],
                            [m + b for m, b in zip(mean, band, strict=True)],
                            color="tab:blue", alpha=0.15, label="threshold")  # fmt: skip
        colours = {Verdict.PASS: "tab:green", Verdict.FAIL: "tab:red"}
        for d in decisions:
            hollow = d.mean is None
            colour = "tab:orange" if d.bad and d.verdict is not Verdict.FAIL else None
            colour = colour or colours.get(d.verdict, "0.4")
            ax.scatter([d.index], [d.point.value], s=28, zorder=3, edgecolors=colour,
                       facecolors="none" if hollow else colour)  # fmt: skip
        for cp in change_points(decisions):
            ax.axvline(cp, color="tab:red", ls="--", lw=1)
            ax.annotate(f"change point {points[cp].label}", (cp, ax.get_ylim()[1]),
                        fontsize=8, color="tab:red", va="top", ha="left")  # fmt: skip
        step = max(1, len(points) // 15)
        ax.set_xticks(x[::step], [p.label.removeprefix("run ") for p in points][::step])
        ax.set_xlabel("run")
        ax.set_title(title)
        ax.legend(loc="lower left", fontsize=8)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)
