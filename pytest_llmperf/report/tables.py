"""Tables people already know (the seed scripts' columns) plus the verdicts, as text/Markdown.

Everything rendered goes through ``redact`` first: results carry no secrets, but server args
and error messages are user input and may contain ``--api-key`` or an ``Authorization`` value.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from tabulate import tabulate

from pytest_llmperf.base.redaction import redact, redact_args
from pytest_llmperf.base.results import LevelResult, SweepResult, Workload
from pytest_llmperf.verdicts.compare import PointComparison, explain, fmt_num
from pytest_llmperf.verdicts.gates import GateResult
from pytest_llmperf.verdicts.validity import context_shortfall
from pytest_llmperf.verdicts.verdict import Verdict

__all__ = [
    "LEVEL_HEADERS",
    "gate_table",
    "junit_properties",
    "level_table",
    "markdown_summary",
    "redact",
    "redact_args",
    "render_run",
]

LEVEL_HEADERS = (
    "C",
    "Agg tok/s",
    "Per-req tok/s",
    "Tokens",
    "Wall(s)",
    "Ok",
    "TTFT p50/p99 (ms)",
    "ITL p50 (ms)",
    "accept",
    "baseline Δ%",
    "verdict",
    "notes",
)


def _by_c(
    points: Sequence[PointComparison] | Mapping[int, PointComparison] | None,
) -> dict[int, PointComparison]:
    if points is None:
        return {}
    if isinstance(points, Mapping):
        return dict(points)
    return {p.concurrency: p for p in points}


def _delta(point: PointComparison | None) -> str:
    if point is None:
        return ""
    m = point.metric("output_throughput")
    if m is None or m.baseline != m.baseline:  # NaN: metric missing from baseline
        return ""
    return f"{100 * m.change:+.1f}"


def _verdict(point: PointComparison | None) -> str:
    if point is None:
        return ""
    v = point.verdict.value
    if point.verdict == Verdict.PASS and point.stale:
        v += " (stale)"
    if point.rerun and point.attached:
        # never relaunched: more samples of one launch help only where the margin can narrow
        open_ = [m.decision for m in point.metrics if m.verdict == Verdict.INCONCLUSIVE]
        v += " (too noisy)" if any(not d.resolved for d in open_) else " (repeat)"
    elif point.rerun:
        v += " (re-run)"
    return v


def requested_output_tokens(level: LevelResult, workload: Workload) -> int:
    """What the completed requests asked for (their own targets where they vary)."""
    if level.expected_output_tokens is not None:
        return level.expected_output_tokens
    return level.completed * workload.output_len


def _short_output(level: LevelResult, workload: Workload) -> str | None:
    """A note when the server delivered fewer output tokens than requested: every number of
    the row then describes shorter requests than the workload says (EOS, a context limit)."""
    want = requested_output_tokens(level, workload)
    got = level.total_output_tokens
    if want <= 0 or got >= want:
        return None
    why = (
        context_shortfall(level, want)
        or "the server stopped early (EOS, a context or length limit)"
    )
    return (
        f"SHORT OUTPUT: {got} of {want} requested output tokens delivered "
        f"({100 * got / want:.1f} %); {why}"
    )


def _tokens_cell(level: LevelResult, workload: Workload) -> str:
    want = requested_output_tokens(level, workload)
    if 0 < want and level.total_output_tokens < want:
        return f"{level.total_output_tokens} of {want} (!)"
    return str(level.total_output_tokens)


def _notes(level: LevelResult, point: PointComparison | None, workload: Workload) -> str:
    notes = [n for n in explain(level) if not n.startswith("accept length")]
    short = _short_output(level, workload)
    if short is not None:
        notes.insert(0, short)
    if level.failed and level.errors:
        notes.append(f"{level.failed} failed, first: {level.errors[0]}")
    if point is not None:
        # The table names the cause; the full sentence (what to do) is in the problems list.
        reasons = [r.split(": ", 1)[0] for r in point.invalid_reasons]
        if any(r.startswith("the load generator") for r in reasons):
            notes = [n for n in notes if not n.startswith("client saturated")]
        notes.extend(reasons)
        notes.extend(
            f"{m.metric} {100 * m.change:+.1f} %"
            for m in point.metrics
            if m.metric != "output_throughput" and (m.verdict != Verdict.PASS or m.stale)
        )
    return redact("; ".join(notes))


def _ms(v: float | None) -> str:
    return fmt_num(v) if v is not None else "–"


def judged_cell(samples: Sequence[LevelResult], name: str) -> str:
    """The judged statistic of a point as a table cell: mean of all samples, its spread and n
    (``1571.1 ±2.3% n=3``); with one sample the spread is its within-run standard error."""
    vals = [v for lv in samples if (v := lv.judged_value(name)) is not None]
    if not vals:
        return "–"
    mean = statistics.fmean(vals)
    if len(vals) >= 2:
        spread: float | None = statistics.stdev(vals) / abs(mean) if mean else None
    else:
        spread = samples[0].within_se.get(name)
    cell = f"{mean:.1f}"
    if spread is not None:
        cell += f" ±{100 * spread:.1f}%"
    return cell + (f" n={len(vals)}" if len(vals) > 1 else "")


def level_rows(
    sweep: SweepResult,
    points: Sequence[PointComparison] | Mapping[int, PointComparison] | None = None,
) -> list[list[str]]:
    by_c = _by_c(points)
    rows = []
    for lv in sorted(sweep.levels, key=lambda lv: lv.max_concurrency):
        p = by_c.get(lv.max_concurrency)
        rows.append(
            [
                str(lv.max_concurrency),
                judged_cell(sweep.samples(lv.max_concurrency), "output_throughput"),
                judged_cell(sweep.samples(lv.max_concurrency), "per_request_throughput"),
                _tokens_cell(lv, sweep.workload),
                f"{lv.duration:.1f}",
                f"{lv.completed}" + (f" ({lv.failed} failed)" if lv.failed else ""),
                f"{_ms(lv.median_ttft_ms)}/{_ms(lv.p99_ttft_ms)}",
                _ms(lv.median_itl_ms),
                "" if lv.accept_length is None else f"{lv.accept_length:.2f}",
                _delta(p),
                _verdict(p),
                _notes(lv, p, sweep.workload),
            ]
        )
    return rows


def level_table(
    sweep: SweepResult,
    points: Sequence[PointComparison] | Mapping[int, PointComparison] | None = None,
    *,
    tablefmt: str = "simple",
) -> str:
    """The seed script's table for one config, with baseline Δ%, verdict and notes."""
    rows = level_rows(sweep, points)
    headers = list(LEVEL_HEADERS)
    if points is None:  # no comparison: keep the table as narrow as the seed's
        headers = headers[:9] + ["notes"]
        rows = [r[:9] + [r[11]] for r in rows]
    return tabulate(rows, headers=headers, tablefmt=tablefmt, disable_numparse=True)


def gate_table(results: Sequence[GateResult], *, tablefmt: str = "simple") -> str:
    """One row per gate and concurrency: values, threshold, verdict."""
    rows = []
    for r in results:
        if not r.points:
            rows.append([r.gate.describe(), "", "", "", "", r.verdict.value, r.message()])
        for p in r.points:
            rows.append(
                [
                    r.gate.describe(),
                    str(p.concurrency),
                    fmt_num(p.value),
                    fmt_num(p.reference_value),
                    fmt_num(p.threshold),
                    p.verdict.value,
                    redact(p.message) if p.verdict != Verdict.PASS else "",
                ]
            )
    headers = ["gate", "C", "value", "reference", "threshold", "verdict", "why"]
    return tabulate(rows, headers=headers, tablefmt=tablefmt, disable_numparse=True)


def render_run(
    sweeps: Sequence[SweepResult],
    points: Mapping[str, Sequence[PointComparison]] | None = None,
    gates: Sequence[GateResult] = (),
    *,
    markdown: bool = False,
) -> str:
    """Every config's table, then gates, then the failure sentences (text or Markdown)."""
    fmt = "github" if markdown else "simple"
    points = points or {}
    out: list[str] = []
    for sweep in sweeps:
        title = f"{sweep.config} ({sweep.workload.key()})"
        out.append(f"### {title}" if markdown else f"{title}:")
        # A config swept with several workloads has one table each: its own points only.
        own = [p for p in points.get(sweep.config, ()) if p.workload == sweep.workload.key()]
        out.append(level_table(sweep, own or None, tablefmt=fmt))
        out.append("")
    if gates:
        out.append("### gates" if markdown else "gates:")
        out.append(gate_table(gates, tablefmt=fmt))
        out.append("")
    messages = [m for ps in points.values() for p in ps for m in p.messages]
    messages += [p.message for g in gates for p in g.failed]
    messages += [g.message() for g in gates if not g.points]
    if messages:
        out.append("### problems" if markdown else "problems:")
        out.extend(f"- {redact(m)}" for m in messages)
    return "\n".join(out).rstrip() + "\n"


def markdown_summary(
    sweeps: Sequence[SweepResult],
    points: Mapping[str, Sequence[PointComparison]] | None = None,
    gates: Sequence[GateResult] = (),
    *,
    title: str = "LLM performance",
) -> str:
    """Markdown for ``$GITHUB_STEP_SUMMARY`` or a PR comment."""
    verdicts = [p.verdict for ps in (points or {}).values() for p in ps]
    verdicts += [g.verdict for g in gates]
    counts: dict[str, int] = {}
    for v in verdicts:
        counts[v.value] = counts.get(v.value, 0) + 1
    line = ", ".join(f"{n} {v}" for v, n in sorted(counts.items())) or "no verdicts"
    return f"## {title}\n\n{line}\n\n" + render_run(sweeps, points, gates, markdown=True)


def junit_properties(
    point: PointComparison | None = None, gate: GateResult | None = None
) -> list[tuple[str, str]]:
    """(name, value) pairs for ``record_property``: metric, baseline, delta, verdict."""
    props: list[tuple[str, str]] = []
    if point is not None:
        props.append(("llmperf.verdict", point.verdict.value))
        props.append(("llmperf.concurrency", str(point.concurrency)))
        for m in point.metrics:
            props.append((f"llmperf.{m.metric}", f"{m.current:g}"))
            props.append((f"llmperf.{m.metric}.baseline", f"{m.baseline:g}"))
            props.append((f"llmperf.{m.metric}.delta_pct", f"{100 * m.change:+.2f}"))
            props.append((f"llmperf.{m.metric}.verdict", m.verdict.value))
        for i, reason in enumerate(point.invalid_reasons):
            props.append((f"llmperf.invalid.{i}", redact(reason)))
    if gate is not None:
        props.append((f"llmperf.gate.{gate.gate.describe()}", gate.verdict.value))
        for p in gate.points:
            props.append(
                (f"llmperf.gate.C{p.concurrency}", f"{p.verdict.value}: {fmt_num(p.value)}")
            )
    return props
