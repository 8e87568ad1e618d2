"""``llmperf compare A.json B.json``: what changed from one run's results to another's.

Run A stands where a stored baseline would: each point's valid samples in A are summarized
into a baseline entry (``entry_from_levels``, the code that records baselines) and B's samples
are judged against it with ``compare_point``, the plugin's own point check, so the verdict and
its noise margin come from the project's rule (``verdicts/stats.py``): with one sample a side
the noise is the rule's assumed one and the sentence says how many samples would settle it.
Points measured in only one run are listed, never judged.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tabulate import tabulate

from pytest_llmperf.base.results import SweepResult
from pytest_llmperf.report.results_file import RunFile, RunFileError, load_run
from pytest_llmperf.report.tables import redact
from pytest_llmperf.verdicts.baseline import entry_from_levels
from pytest_llmperf.verdicts.compare import (
    DEFAULT_METRICS,
    PointComparison,
    compare_point,
    exit_status,
    fmt_num,
    validate_tolerance,
)
from pytest_llmperf.verdicts.validity import ValidityPolicy, check_level
from pytest_llmperf.verdicts.verdict import Verdict

__all__ = ["PointKey", "RunDiff", "compare_runs", "diff_rows", "render_diff", "run_compare_two"]

PointKey = tuple[str, str, int]  # (config, workload key, C)


@dataclass
class RunDiff:
    """Every point of B judged against A, and the points only one run measured."""

    a: str
    b: str
    points: list[PointComparison] = field(default_factory=list)
    only_a: list[PointKey] = field(default_factory=list)
    only_b: list[PointKey] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def exit_status(self, *, fail_inconclusive: bool = False) -> int:
        return exit_status([p.verdict for p in self.points], fail_inconclusive=fail_inconclusive)

    def point(self, config: str, workload: str, c: int) -> PointComparison | None:
        return next(
            (
                p
                for p in self.points
                if (p.config, p.workload, p.concurrency) == (config, workload, c)
            ),
            None,
        )


def _points(run: RunFile) -> dict[PointKey, tuple[SweepResult, int]]:
    return {
        (s.config, s.workload.key(), lv.max_concurrency): (s, lv.max_concurrency)
        for s in run.sweeps
        for lv in s.levels
    }


def _recorded_tolerances(run: RunFile, key: PointKey) -> dict[str, float] | None:
    """The tolerances the test that judged this point in run B resolved, if it recorded them."""
    config, workload, c = key
    for j in run.checks:
        if j.kind == "point" and (j.config, j.workload, j.concurrency) == (config, workload, c):
            return dict(j.tolerances) or None
    return None


def compare_runs(
    a: RunFile,
    b: RunFile,
    *,
    a_name: str = "A",
    b_name: str = "B",
    tolerances: Mapping[str, float] | float | None = None,
    metrics: Sequence[str] | None = None,
    policy: ValidityPolicy | None = None,
) -> RunDiff:
    """B judged against A, point by point (``tolerances``: else B's recorded, else default)."""
    diff = RunDiff(a_name, b_name)
    if a.hardware != b.hardware:
        diff.notes.append(
            f"hardware keys differ ({a_name}: {a.hardware}, {b_name}: {b.hardware}): every "
            "change below includes the change of machine"
        )
    pa, pb = _points(a), _points(b)
    diff.only_a = sorted(set(pa) - set(pb))
    diff.only_b = sorted(set(pb) - set(pa))
    for key in sorted(set(pa) & set(pb)):
        sweep_a, c = pa[key]
        sweep_b, _ = pb[key]
        base = [lv for lv in sweep_a.samples(c) if not check_level(lv, sweep_a.workload, policy)]
        if not base:
            why = f"{a_name} has no valid sample of {key[0]} {key[1]} C={c} to compare with"
            diff.points.append(
                PointComparison(
                    key[0], c, key[1], Verdict.INVALID, invalid_reasons=[why], messages=[why]
                )
            )
            continue
        names = list(metrics) if metrics is not None else list(DEFAULT_METRICS)
        entry = entry_from_levels(base, names)
        tol = tolerances if tolerances is not None else _recorded_tolerances(b, key)
        diff.points.append(
            compare_point(
                key[0],
                sweep_b.samples(c),
                entry,
                workload=sweep_b.workload,
                metrics=metrics,
                tolerances=tol,
                policy=policy,
                attached=sweep_b.server.mode == "attached",
            )
        )
    return diff


def diff_rows(diff: RunDiff, *, notable_only: bool = False) -> list[list[str]]:
    """One row per judged metric of each common point: A, B, change, verdict, noise."""
    rows = []
    for p in diff.points:
        if not p.metrics:
            if not notable_only or p.verdict != Verdict.PASS:
                rows.append([p.config, p.workload, str(p.concurrency), "", "", "", "", ""])
                rows[-1].append(p.verdict.value)
            continue
        for m in p.metrics:
            if notable_only and m.verdict == Verdict.PASS and not m.stale:
                continue
            d = m.decision
            rows.append(
                [
                    p.config,
                    p.workload,
                    str(p.concurrency),
                    m.metric,
                    fmt_num(m.baseline),
                    fmt_num(m.current),
                    f"{100 * m.change:+.1f} %",
                    f"±{100 * d.margin:.1f} %" + (" (assumed)" if d.noise_assumed else ""),
                    m.verdict.value + (" (stale)" if m.stale else ""),
                ]
            )
    return rows


def render_diff(diff: RunDiff, *, markdown: bool = False) -> str:
    """The table of changes, then the sentences of every non-pass point, then one-sided points."""
    fmt = "github" if markdown else "simple"
    headers = ["config", "workload", "C", "metric", diff.a, diff.b, "change", "noise margin"]
    headers.append("verdict")
    out = [f"- {n}" if markdown else f"note: {n}" for n in diff.notes]
    rows = diff_rows(diff)
    if rows:
        out.append(tabulate(rows, headers=headers, tablefmt=fmt, disable_numparse=True))
    else:
        out.append(f"no point was measured in both {diff.a} and {diff.b}")
    messages = [m for p in diff.points for m in p.messages]
    if messages:
        out.append("")
        out.append("### problems" if markdown else "problems:")
        out.extend(f"- {redact(m)}" for m in messages)
    for name, keys in ((diff.a, diff.only_a), (diff.b, diff.only_b)):
        if keys:
            out.append("")
            out.append(f"only in {name} (not compared):")
            out.extend(f"- {cfg} {wl} C={c}" for cfg, wl, c in keys)
    return "\n".join(out).rstrip() + "\n"


def run_compare_two(args: argparse.Namespace) -> int:
    """``llmperf compare A.json B.json``: the table, exit 1 on a failed or invalid point."""
    if args.baselines is not None:
        raise RunFileError(
            f"llmperf compare: give either --baselines DIR (judge {args.run} against stored "
            f"baselines) or a second results file ({args.other}), not both"
        )
    if args.gates is not None:
        raise RunFileError("llmperf compare A B: --gates applies only with --baselines")
    tolerances: float | None = None
    if args.tolerance is not None:
        tolerances = validate_tolerance(args.tolerance, "--tolerance")
    if args.metric_tolerance:
        raise RunFileError("llmperf compare A B: use --tolerance (one fraction for every metric)")
    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()] if args.metrics else None
    a, b = load_run(args.run), load_run(args.other)
    diff = compare_runs(
        a,
        b,
        a_name=Path(args.run).name if Path(args.run).name != Path(args.other).name else "A",
        b_name=Path(args.other).name if Path(args.run).name != Path(args.other).name else "B",
        tolerances=tolerances,
        metrics=metrics,
        policy=ValidityPolicy(max_failed=args.max_failed or 0),
    )
    print(f"llmperf compare: {args.other} judged against {args.run}")
    sys.stdout.write(render_diff(diff))
    if args.markdown:
        with open(args.markdown, "a", encoding="utf-8") as f:
            f.write(f"## llmperf: {diff.b} against {diff.a}\n\n" + render_diff(diff, markdown=True))
    return diff.exit_status(fail_inconclusive=args.fail_inconclusive)
