"""The HTML report's figures, as ``data:image/png;base64`` URIs (the page needs no other file).

Throughput vs C with its baseline band is ``plots.plot_throughput`` itself; the report adds the
two trade-off views a capacity planner reads (latency against the throughput that buys it, and
one user's tok/s against the whole server's) and the trend lines of a history. matplotlib is
imported only here and only when a figure is drawn (``plots._pyplot``).
"""

from __future__ import annotations

import base64
import io
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_llmperf.base.results import SweepResult
from pytest_llmperf.report.plots import Bands, Invalid, _pyplot, plot_throughput
from pytest_llmperf.verdicts.baseline_file import BaselineEntry, EntryKey
from pytest_llmperf.verdicts.compare import resolve_tolerance

__all__ = ["Figure", "TrendSeries", "baseline_bands", "sweep_figures", "trend_figure"]


@dataclass(frozen=True)
class TrendSeries:
    """One metric's history: ``values[i]`` measured at ``labels[i]`` (a commit, a date), and
    the indices where a change point was found (drawn as vertical lines)."""

    title: str
    labels: Sequence[str]
    values: Sequence[float]
    change_points: Sequence[int] = field(default_factory=tuple)
    unit: str = ""

    def __post_init__(self) -> None:
        if len(self.labels) != len(self.values):
            raise ValueError(
                f"TrendSeries {self.title!r}: {len(self.labels)} labels but "
                f"{len(self.values)} values"
            )


@dataclass(frozen=True)
class Figure:
    title: str
    uri: str  # data:image/png;base64,...


def _uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _fig_uri(fig: Any) -> str:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=90)
    return _uri(buf.getvalue())


def _valid(sweep: SweepResult, invalid: Invalid | None) -> list[Any]:
    bad = (invalid or {}).get((sweep.config, sweep.workload.key()), set())
    return [
        lv
        for lv in sorted(sweep.levels, key=lambda lv: lv.max_concurrency)
        if lv.max_concurrency not in bad
    ]


def _latency_vs_throughput(sweeps: Sequence[SweepResult], invalid: Invalid | None) -> str:
    """TTFT and ITL p50 (solid) / p99 (dashed) against aggregate tok/s, each point labelled C."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    try:
        for ax, lat, title in ((axes[0], "ttft", "TTFT"), (axes[1], "itl", "ITL")):
            for i, s in enumerate(sweeps):
                levels = _valid(s, invalid)
                for stat, style in (("median", "o-"), ("p99", "s--")):
                    pts = [
                        (lv.output_throughput, v, lv.max_concurrency)
                        for lv in levels
                        if (v := getattr(lv, f"{stat}_{lat}_ms")) is not None
                    ]
                    if not pts:
                        continue
                    name = "p50" if stat == "median" else "p99"
                    ax.plot(
                        [p[0] for p in pts],
                        [p[1] for p in pts],
                        style,
                        color=f"C{i}",
                        label=f"{s.config} {name}",
                    )
                    if stat == "median":
                        for x, y, c in pts:
                            ax.annotate(f"C={c}", (x, y), fontsize=7, xytext=(3, 3),
                                        textcoords="offset points")  # fmt: skip
            ax.set_yscale("log")
            ax.set_xlabel("aggregate output tok/s")
            ax.set_ylabel(f"{title} (ms)")
            ax.set_title(f"{title} vs throughput")
            ax.grid(True, alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
        return _fig_uri(fig)
    finally:
        plt.close(fig)


def _per_user_vs_total(sweeps: Sequence[SweepResult], invalid: Invalid | None) -> str:
    """One user's decode speed against the server's total: the throughput/latency frontier."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    try:
        for i, s in enumerate(sweeps):
            levels = _valid(s, invalid)
            xs = [lv.output_throughput for lv in levels]
            ys = [lv.per_request_throughput for lv in levels]
            ax.plot(xs, ys, "o-", color=f"C{i}", label=s.config)
            for lv in levels:
                ax.annotate(f"C={lv.max_concurrency}", (lv.output_throughput,
                            lv.per_request_throughput), fontsize=7, xytext=(3, 3),
                            textcoords="offset points")  # fmt: skip
        ax.set_xlabel("aggregate output tok/s (all users)")
        ax.set_ylabel("per-user output tok/s")
        ax.set_ylim(bottom=0)
        ax.set_title("Per-user vs total throughput")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        return _fig_uri(fig)
    finally:
        plt.close(fig)


def sweep_figures(
    sweeps: Sequence[SweepResult], bands: Bands | None = None, invalid: Invalid | None = None
) -> list[Figure]:
    """Per workload: throughput vs C with the baseline band, latency vs throughput, per-user vs
    total tok/s. Raises ``PlotsUnavailable`` without matplotlib."""
    groups: dict[str, list[SweepResult]] = {}
    for s in sweeps:
        groups.setdefault(s.workload.key(), []).append(s)
    out: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="llmperf-html-") as tmp:
        for n, (key, group) in enumerate(groups.items()):
            path = plot_throughput(group, Path(tmp) / f"t{n}.png", bands=bands, invalid=invalid)
            out.append(Figure(f"Throughput vs concurrency ({key})", _uri(path.read_bytes())))
            uri = _latency_vs_throughput(group, invalid)
            out.append(Figure(f"Latency vs throughput ({key})", uri))
            uri = _per_user_vs_total(group, invalid)
            out.append(Figure(f"Per-user vs total tok/s ({key})", uri))
    return out


def trend_figure(series: TrendSeries) -> Figure:
    """One history line, change points as red vertical lines."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.2))
    try:
        xs = list(range(len(series.values)))
        ax.plot(xs, list(series.values), "o-", color="C0")
        for i in series.change_points:
            if 0 <= i < len(xs):
                ax.axvline(i, color="red", ls="--", lw=1.2)
        ax.set_xticks(xs)
        ax.set_xticklabels([str(x) for x in series.labels], rotation=30, ha="right", fontsize=7)
        ax.set_ylabel(series.unit or series.title)
        ax.set_title(series.title)
        ax.grid(True, alpha=0.3)
        return Figure(series.title, _fig_uri(fig))
    finally:
        plt.close(fig)


def baseline_bands(
    sweeps: Sequence[SweepResult],
    hardware_for: Callable[[str], str],
    baseline: Callable[[EntryKey], BaselineEntry | None],
) -> dict[tuple[str, str], dict[int, tuple[float, float]]]:
    """Each measured point's stored output_throughput and its tolerance (the plots' band)."""
    bands: dict[tuple[str, str], dict[int, tuple[float, float]]] = {}
    for sweep in sweeps:
        for lv in sweep.levels:
            key = EntryKey(
                hardware_for(sweep.config), sweep.config, sweep.workload.key(), lv.max_concurrency
            )
            entry = baseline(key)
            summary = entry.metrics.get("output_throughput") if entry else None
            if entry is not None and summary is not None:
                tol = resolve_tolerance("output_throughput", entry=entry)
                band = bands.setdefault((sweep.config, sweep.workload.key()), {})
                band[lv.max_concurrency] = (summary.mean, tol)
    return bands
