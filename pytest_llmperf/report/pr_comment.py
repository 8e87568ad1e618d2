"""A Markdown body a CI step posts on a pull request: short on top, details folded away.

A headline of verdict counts (the one vocabulary of ``verdicts/verdict.py``), a table of the
points a reviewer must look at (a verdict other than pass, or a metric beyond its tolerance
either way), the failure sentences in full inside ``<details>``, and, given main's results,
what changed against main (``run_compare``). No link: the body must read the same anywhere.
"""

from __future__ import annotations

from collections.abc import Sequence

from tabulate import tabulate

from pytest_llmperf.report.html import ReportData, failure_sentences
from pytest_llmperf.report.run_compare import RunDiff, diff_rows
from pytest_llmperf.report.tables import redact
from pytest_llmperf.verdicts.compare import PointComparison
from pytest_llmperf.verdicts.verdict import Verdict

__all__ = ["counts_line", "pr_comment"]

_ORDER = [v.value for v in Verdict]


def counts_line(verdicts: Sequence[Verdict]) -> str:
    counts: dict[str, int] = {}
    for v in verdicts:
        counts[v.value] = counts.get(v.value, 0) + 1
    if not counts:
        return "no verdicts"
    return ", ".join(f"{counts[k]} {k}" for k in sorted(counts, key=_ORDER.index))


def _notable(p: PointComparison) -> bool:
    return p.verdict != Verdict.PASS or any(m.stale for m in p.metrics)


def _cell(text: str) -> str:
    """A Markdown cell or line: no pipe, newline or HTML tag may break the row or the page."""
    text = redact(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace("|", "\\|").replace("\n", " ")


def _point_rows(data: ReportData) -> list[list[str]]:
    rows = []
    for ps in data.points.values():
        for p in ps:
            if not _notable(p):
                continue
            changes = [
                f"{m.metric} {100 * m.change:+.1f} %"
                for m in p.metrics
                if m.verdict != Verdict.PASS or m.stale
            ]
            why = "; ".join(changes) or "; ".join(r.split(": ", 1)[0] for r in p.invalid_reasons)
            rows.append(
                [p.config, p.workload, str(p.concurrency), p.verdict.value, _cell(why or "")]
            )
    return rows


def pr_comment(
    data: ReportData, against: RunDiff | None = None, *, title: str = "LLM performance"
) -> str:
    """The comment body; ``against``: this run judged against main's results."""
    verdicts = [p.verdict for ps in data.points.values() for p in ps]
    verdicts += [g.verdict for g in data.gates]
    bad = any(v in (Verdict.FAIL, Verdict.INVALID, Verdict.MISSING) for v in verdicts)
    icon = "FAILED" if bad else "passed"
    sim = any(s.server.mode == "simulated" for s in data.sweeps)
    out = [f"## {title}: {icon}", ""]
    out.append(f"**{counts_line(verdicts)}**" + (" (SIMULATED server)" if sim else ""))
    if data.verdicts_note:
        out += ["", f"_{_cell(data.verdicts_note)}_"]
    rows = _point_rows(data)
    out.append("")
    if rows:
        headers = ["config", "workload", "C", "verdict", "what"]
        out.append(tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True))
    else:
        out.append("Every judged point passed; no metric moved beyond its tolerance.")
    if data.history_lines:
        out += ["", "### Against the history", ""]
        out += [f"- {_cell(line)}" for line in data.history_lines]
    if against is not None:
        out += ["", f"### Against {_cell(against.a)}", ""]
        out += [f"- {_cell(n)}" for n in against.notes]
        out.append(counts_line([p.verdict for p in against.points]) + " (this run vs main)")
        changed = diff_rows(against, notable_only=True)
        if changed:
            headers = ["config", "workload", "C", "metric", "main", "this run", "change"]
            headers += ["noise margin", "verdict"]
            cells = [[_cell(c) for c in row] for row in changed]
            out += ["", tabulate(cells, headers=headers, tablefmt="github", disable_numparse=True)]
        else:
            out += ["", "No metric moved beyond its tolerance against main."]
        for name, keys in (("main only", against.only_a), ("this run only", against.only_b)):
            if keys:
                out.append(f"\n{name}: " + ", ".join(f"{c} {w} C={n}" for c, w, n in keys))
    sentences = failure_sentences(data)
    if against is not None:
        sentences += [redact(m) for p in against.points for m in p.messages]
    if sentences:
        out += ["", f"<details><summary>{len(sentences)} problem sentence(s)</summary>", ""]
        out += [f"- {_cell(s)}" for s in sentences]
        out += ["", "</details>"]
    return "\n".join(out).rstrip() + "\n"
