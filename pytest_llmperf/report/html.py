"""The self-contained HTML report of a run: one file a reviewer opens from a CI artifact.

Everything is inside the page: inline CSS, figures as base64 PNG (``html_plots``), no script
and no external URL. The verdict table has the terminal summary's columns and words
(``tables.level_rows``); every failure sentence is printed in full; each point says what its
green means, from the minimum detectable effect its verdict was reached with
(``stats.Decision.mde``), or says plainly that the file does not record it. Every text is
redacted (``tables.redact``) and then escaped.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pytest_llmperf.base.results import SweepResult
from pytest_llmperf.base.version import __version__
from pytest_llmperf.report.html_plots import Figure, TrendSeries, sweep_figures, trend_figure
from pytest_llmperf.report.plots import Bands, PlotsUnavailable
from pytest_llmperf.report.tables import LEVEL_HEADERS, gate_table, level_rows, redact
from pytest_llmperf.verdicts.compare import PointComparison
from pytest_llmperf.verdicts.gates import GateResult
from pytest_llmperf.verdicts.green import green_means, missable
from pytest_llmperf.verdicts.verdict import Verdict

__all__ = ["ReportData", "TrendSeries", "failure_sentences", "green_line", "render_html"]

PLOTS_HINT = "the plots need matplotlib: pip install 'pytest-llmperf[plots]'"


@dataclass
class ReportData:
    """What one report shows; the plugin builds it from its session, ``llmperf report`` from a
    results file (``verdicts_note`` then says where its verdicts came from)."""

    sweeps: Sequence[SweepResult]
    points: Mapping[str, Sequence[PointComparison]] = field(default_factory=dict)
    gates: Sequence[GateResult] = ()
    hardware: Sequence[str] = ()
    problems: Sequence[str] = ()  # sentences besides the points' and gates' (invalid, crossover)
    lines: Sequence[str] = ()  # whole-sweep results (crossover, SLO) as the summary prints them
    bands: Bands | None = None
    trends: Sequence[TrendSeries] = ()
    history_lines: Sequence[str] = ()  # this run against its history (``report/trends``)
    plots: bool = True  # False: tables only (a session asked for no figures)
    source: str = "pytest session"
    verdicts_note: str | None = None
    generated: str = field(
        default_factory=lambda: datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    )

    def invalid(self) -> dict[tuple[str, str], set[int]]:
        out: dict[tuple[str, str], set[int]] = {}
        for ps in self.points.values():
            for p in ps:
                if p.verdict == Verdict.INVALID:
                    out.setdefault((p.config, p.workload), set()).add(p.concurrency)
        return out


def _e(text: object) -> str:
    return html.escape(redact(str(text)), quote=True)


def failure_sentences(data: ReportData) -> list[str]:
    """Every sentence the terminal summary's problems list has, then the session's own."""
    out = [m for ps in data.points.values() for p in ps for m in p.messages]
    out += [p.message for g in data.gates for p in g.failed]
    out += [g.message() for g in data.gates if not g.points]
    out += list(data.problems)
    return [redact(m) for m in dict.fromkeys(out)]


def green_line(p: PointComparison) -> str:
    """The point's "what green means" sentence (``verdicts.green``, as the summary, JUnit and
    results.json say it); a point read back from a results file without its baselines has no
    noise to say it from, and says so."""
    if p.verdict in (Verdict.PASS, Verdict.INCONCLUSIVE, Verdict.FAIL) and not missable(p):
        return (
            f"{p.verdict.value} at C={p.concurrency}: the noise it was judged with is not "
            "recorded in this file, so the smallest regression it would catch is unknown "
            "(re-judge with --baselines DIR)"
        )
    return green_means(p)


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1b1f24;
background:#fff;max-width:1400px}
h1{font-size:22px;margin:0 0 8px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid
#d0d7de;padding-bottom:4px}h3{font-size:15px;margin:18px 0 6px}
table{border-collapse:collapse;font-size:12px;margin:6px 0 12px}pre{overflow-x:auto}
th,td{border:1px solid #d0d7de;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f3f5f7}td.num{text-align:right;font-variant-numeric:tabular-nums}
.v-pass{background:#d6f5dd;color:#0f5323;font-weight:600}
.v-fail{background:#ffd7d5;color:#8a1111;font-weight:600}
.v-inconclusive{background:#fff0c2;color:#6b4e00;font-weight:600}
.v-invalid{background:#ead9ff;color:#4b1d8a;font-weight:600}
.v-missing,.v-recorded{background:#e8eef5;color:#33475b;font-weight:600}
.banner{padding:8px 12px;border-radius:6px;margin:8px 0;font-weight:600}
.sim{background:#fff0c2;border:1px solid #e2b600}.real{background:#d6f5dd;border:1px solid
#3fa45b}.counts span{margin-right:14px}ul.fail li{margin:4px 0;color:#8a1111}
.note{color:#57606a;font-size:13px}img{max-width:100%;border:1px solid #d0d7de;margin:6px 0}
dl.meta{display:grid;grid-template-columns:max-content auto;gap:2px 14px;font-size:13px}
dl.meta dt{font-weight:600}dl.meta dd{margin:0}
"""


def _verdict_class(word: str) -> str:
    first = word.split(" ", 1)[0]
    return f"v-{first}" if first in {v.value for v in Verdict} else ""


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], verdict_col: int = -1) -> str:
    out = ["<table><thead><tr>", *(f"<th>{_e(h)}</th>" for h in headers), "</tr></thead><tbody>"]
    for row in rows:
        out.append("<tr>")
        for i, cell in enumerate(row):
            cls = _verdict_class(cell) if i == verdict_col else ""
            out.append(f'<td class="{cls}">{_e(cell)}</td>' if cls else f"<td>{_e(cell)}</td>")
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _header(data: ReportData) -> str:
    modes = {s.server.mode for s in data.sweeps}
    if "simulated" in modes:
        banner = (
            '<div class="banner sim">SIMULATED: the numbers come from the built-in simulated '
            "server, not SGLang</div>"
        )
    else:
        banner = '<div class="banner real">REAL: measured on the server(s) listed below</div>'
    levels = sorted({lv.max_concurrency for s in data.sweeps for lv in s.levels})
    workloads = sorted({s.workload.key() for s in data.sweeps})
    meta = [
        ("source", data.source),
        ("hardware key", ", ".join(data.hardware) or "unknown"),
        ("levels (C)", ", ".join(map(str, levels))),
        ("workload", "; ".join(workloads)),
        ("plugin", f"pytest-llmperf {__version__}"),
        ("generated", data.generated),
    ]
    servers = []
    for s in data.sweeps:
        f = s.server
        bits = [f.mode.upper(), f.url or "", f"version {f.version}" if f.version else ""]
        bits += [f"model {f.model_path}" if f.model_path else ""]
        bits += [f"profile {f.sim_profile}" if f.sim_profile else ""]
        servers.append((f"server {s.config}", ", ".join(b for b in bits if b)))
    rows = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in [*servers, *meta])
    return f"{banner}<dl class='meta'>{rows}</dl>"


def _counts(data: ReportData) -> str:
    counts: dict[str, int] = {}
    for v in [p.verdict for ps in data.points.values() for p in ps] + [
        g.verdict for g in data.gates
    ]:
        counts[v.value] = counts.get(v.value, 0) + 1
    if not counts:
        return "<p class='counts'>no verdicts</p>"
    spans = "".join(
        f"<span class='{_verdict_class(k)}'>&nbsp;{n} {_e(k)}&nbsp;</span>"
        for k, n in sorted(counts.items())
    )
    return f"<p class='counts'>{spans}</p>"


def _verdict_tables(data: ReportData) -> str:
    out = ["<h2>Verdicts</h2>"]
    if data.verdicts_note:
        out.append(f"<p class='note'>{_e(data.verdicts_note)}</p>")
    out.append(_counts(data))
    for sweep in data.sweeps:
        own = [p for p in data.points.get(sweep.config, ()) if p.workload == sweep.workload.key()]
        out.append(f"<h3>{_e(sweep.config)} ({_e(sweep.workload.key())})</h3>")
        out.append(_table(LEVEL_HEADERS, level_rows(sweep, own or None), verdict_col=10))
    if data.gates:
        out.append("<h3>gates</h3>")
        out.append(f"<pre>{_e(gate_table(data.gates))}</pre>")
    if data.lines:
        out.append("<h3>whole-sweep checks</h3><ul>")
        out.extend(f"<li>{_e(line)}</li>" for line in data.lines)
        out.append("</ul>")
    return "".join(out)


def _failures(data: ReportData) -> str:
    sentences = failure_sentences(data)
    if not sentences:
        return "<h2>Problems</h2><p>none: every judged point passed</p>"
    items = "".join(f"<li>{_e(s)}</li>" for s in sentences)
    return f"<h2>Problems ({len(sentences)})</h2><ul class='fail'>{items}</ul>"


def _green(data: ReportData) -> str:
    out = ["<h2>What green means</h2>"]
    any_point = False
    for sweep in data.sweeps:
        own = [p for p in data.points.get(sweep.config, ()) if p.workload == sweep.workload.key()]
        if not own:
            continue
        any_point = True
        out.append(f"<h3>{_e(sweep.config)} ({_e(sweep.workload.key())})</h3><ul>")
        out.extend(f"<li>{_e(green_line(p))}</li>" for p in own)
        out.append("</ul>")
    if not any_point:
        out.append("<p>no point was judged, so no verdict says anything here</p>")
    return "".join(out)


def _figures(data: ReportData) -> str:
    out = ["<h2>Plots</h2>"]
    if not data.plots:
        return out[0] + "<p class='note'>plots left out (html_report = \"tables\")</p>"
    try:
        figures: list[Figure] = sweep_figures(data.sweeps, data.bands, data.invalid())
    except PlotsUnavailable:
        return out[0] + f"<p class='note'>{_e(PLOTS_HINT)}</p>"
    if not data.bands:
        out.append("<p class='note'>no baseline band: no baseline was read for these points</p>")
    for f in figures:
        out.append(f"<h3>{_e(f.title)}</h3><img alt='{_e(f.title)}' src='{f.uri}'>")
    return "".join(out)


def _trends(data: ReportData) -> str:
    out = ["<h2>Trends</h2>"]
    if data.history_lines:
        out.append("<ul>" + "".join(f"<li>{_e(line)}</li>" for line in data.history_lines))
        out.append("</ul>")
    if not data.trends:
        return "".join(out) + "<p class='note'>no history given: no trend to show</p>"
    for series in data.trends:
        try:
            if not data.plots:
                raise PlotsUnavailable('plots left out (html_report = "tables")')
            fig = trend_figure(series)
        except PlotsUnavailable as exc:
            hint = PLOTS_HINT if data.plots else str(exc)
            out.append(f"<p class='note'>{_e(series.title)}: {_e(hint)}</p>")
            pairs = zip(series.labels, series.values, strict=True)
            rows = [[str(label), f"{v:g}"] for label, v in pairs]
            out.append(_table(["at", series.unit or "value"], rows))
            continue
        out.append(f"<h3>{_e(fig.title)}</h3><img alt='{_e(fig.title)}' src='{fig.uri}'>")
        if series.change_points:
            at = ", ".join(str(series.labels[i]) for i in series.change_points)
            out.append(f"<p class='note'>change points at: {_e(at)}</p>")
    return "".join(out)


def render_html(data: ReportData, *, title: str = "LLM performance report") -> str:
    """The whole page as one string (write it with ``atomic_write_text``)."""
    body = [
        f"<h1>{_e(title)}</h1>",
        _header(data),
        _verdict_tables(data),
        _failures(data),
        _green(data),
        _figures(data),
        _trends(data),
    ]
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>"
        + "\n".join(body)
        + "</body></html>\n"
    )
