"""PNG plots of sweeps (optional: needs matplotlib, the ``plots`` extra).

Three views answer the seed's questions: aggregate tok/s vs C with the baseline band (did we
regress, and where does speculation stop paying?), per-request tok/s vs C (the latency side of
the trade-off), and TTFT/ITL percentiles vs C (where queueing starts). One set per workload: a
config's curves under two workloads are different curves. An INVALID level is drawn as a red x
off the line: it is not a measurement of the server.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_llmperf.base.errors import LLMPerfError
from pytest_llmperf.base.results import SweepResult

__all__ = [
    "PlotsUnavailable",
    "plot_all",
    "plot_latency",
    "plot_per_request",
    "plot_throughput",
]

# (config, workload key) -> C -> (baseline value, tolerance)
Bands = Mapping[tuple[str, str], Mapping[int, tuple[float, float]]]
# (config, workload key) -> the levels judged INVALID
Invalid = Mapping[tuple[str, str], set[int]]


class PlotsUnavailable(LLMPerfError, RuntimeError):
    """matplotlib is not installed."""


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise PlotsUnavailable(
            "plots need matplotlib: pip install 'pytest-llmperf[plots]'"
        ) from None
    matplotlib.use("Agg")  # no display on CI runners; must precede pyplot import
    import matplotlib.pyplot as plt

    return plt


def _series(
    sweep: SweepResult, attr: str, invalid: Invalid | None = None, *, valid: bool = True
) -> tuple[list[int], list[float]]:
    """The valid levels' values (``valid=False``: the INVALID levels' values)."""
    bad = (invalid or {}).get((sweep.config, sweep.workload.key()), set())
    xs, ys = [], []
    for lv in sorted(sweep.levels, key=lambda lv: lv.max_concurrency):
        v = getattr(lv, attr)
        if v is not None and (lv.max_concurrency in bad) != valid:
            xs.append(lv.max_concurrency)
            ys.append(float(v))
    return xs, ys


def _plot(ax: Any, sweep: SweepResult, attr: str, invalid: Invalid | None, **style: Any) -> None:
    """A config's valid levels as a line, its INVALID ones as red crosses beside it."""
    fmt = style.pop("fmt", "o-")
    xs, ys = _series(sweep, attr, invalid)
    ax.plot(xs, ys, fmt, **style)
    bx, by = _series(sweep, attr, invalid, valid=False)
    if bx:
        label = f"{style.get('label', sweep.config)} INVALID (not a measurement)"
        ax.plot(bx, by, "x", color="red", markersize=9, mew=2, label=label)


def _log2_axis(ax: Any, sweeps: Sequence[SweepResult]) -> None:
    cs = sorted({lv.max_concurrency for s in sweeps for lv in s.levels})
    ax.set_xscale("log", base=2)
    ax.set_xticks(cs)
    ax.set_xticklabels([str(c) for c in cs])
    ax.set_xlabel("concurrency C")
    ax.grid(True, which="major", alpha=0.3)


def _save(fig: Any, path: str | os.PathLike[str]) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(p, dpi=110)
    return p


def plot_throughput(
    sweeps: Sequence[SweepResult],
    path: str | os.PathLike[str],
    *,
    bands: Bands | None = None,
    crossover: tuple[str, str, int | None] | None = None,
    invalid: Invalid | None = None,
) -> Path:
    """Aggregate tok/s vs C per config, baseline ± tolerance as a band, crossover C marked."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    try:
        for i, s in enumerate(sweeps):
            color = f"C{i}"
            _plot(ax, s, "output_throughput", invalid, color=color, label=s.config)
            band = (bands or {}).get((s.config, s.workload.key()))
            if band:
                bc = sorted(band)
                lo = [band[c][0] * (1 - band[c][1]) for c in bc]
                hi = [band[c][0] * (1 + band[c][1]) for c in bc]
                ax.fill_between(
                    bc, lo, hi, color=color, alpha=0.15, label=f"{s.config} baseline ± tol"
                )
                ax.plot(bc, [band[c][0] for c in bc], "--", color=color, lw=1, alpha=0.7)
            cap = s.server.max_running_requests
            swept = [lv.max_concurrency for lv in s.levels]
            if cap is not None and swept and cap <= max(swept):  # a cap beyond the sweep: noise
                ax.axvline(cap, color=color, ls=":", lw=1)
                ax.annotate(
                    f"{s.config} running cap {cap}",
                    xy=(cap, 0.03),
                    xycoords=("data", "axes fraction"),
                    color=color,
                    fontsize=8,
                    rotation=90,
                    va="bottom",
                    ha="right",
                )
        if crossover is not None and crossover[2] is not None:
            cfg, ref, c = crossover
            ax.axvline(c, color="k", ls="--", lw=1.2)
            ax.annotate(
                f"crossover C={c}\n({cfg} > {ref} up to here)",
                xy=(c, 0.97),
                xycoords=("data", "axes fraction"),
                xytext=(-6, 0),
                textcoords="offset points",
                va="top",
                ha="right",
                fontsize=9,
            )
        _log2_axis(ax, sweeps)
        ax.set_ylabel("aggregate output tok/s")
        ax.set_title(f"Aggregate output throughput vs concurrency{_workload(sweeps)}")
        ax.legend(loc="upper left", fontsize=8)
        return _save(fig, path)
    finally:
        plt.close(fig)


def plot_per_request(
    sweeps: Sequence[SweepResult], path: str | os.PathLike[str], invalid: Invalid | None = None
) -> Path:
    """Per-request tok/s vs C: what one user feels, the other side of the throughput curve."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    try:
        for i, s in enumerate(sweeps):
            _plot(ax, s, "per_request_throughput", invalid, color=f"C{i}", label=s.config)
        _log2_axis(ax, sweeps)
        ax.set_ylim(bottom=0)
        ax.set_ylabel("per-request output tok/s")
        ax.set_title(f"Per-request decode speed vs concurrency{_workload(sweeps)}")
        ax.legend(fontsize=8)
        return _save(fig, path)
    finally:
        plt.close(fig)


def plot_latency(
    sweeps: Sequence[SweepResult], path: str | os.PathLike[str], invalid: Invalid | None = None
) -> Path:
    """TTFT and ITL percentiles (p50 solid, p99 dashed) vs C, one panel each."""
    plt = _pyplot()
    from matplotlib import ticker

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.5))
    try:
        for ax, lat, title in ((a1, "ttft", "TTFT"), (a2, "itl", "ITL")):
            for i, s in enumerate(sweeps):
                for stat, style in (("median", "o-"), ("p99", "s--")):
                    label = f"{s.config} {'p50' if stat == 'median' else stat}"
                    attr = f"{stat}_{lat}_ms"
                    _plot(ax, s, attr, invalid, fmt=style, color=f"C{i}", label=label)
            _log2_axis(ax, sweeps)
            ax.set_yscale("log")
            # Plain numbers (20, 60, 1000) instead of 6×10^1 on a log axis.
            fmt = ticker.FuncFormatter(lambda v, _pos: f"{v:g}")
            ax.yaxis.set_major_formatter(fmt)
            lo, hi = ax.get_ylim()
            # Minor labels only help within about a decade; beyond that they collide.
            ax.yaxis.set_minor_formatter(fmt if hi / max(lo, 1e-9) < 30 else ticker.NullFormatter())
            ax.tick_params(axis="y", which="minor", labelsize=7)
            ax.set_ylabel(f"{title} (ms)")
            ax.set_title(f"{title} percentiles vs concurrency{_workload(sweeps)}")
            ax.legend(fontsize=8)
        return _save(fig, path)
    finally:
        plt.close(fig)


def _workload(sweeps: Sequence[SweepResult]) -> str:
    keys = sorted({s.workload.key() for s in sweeps})
    return f"\n{keys[0]}" if len(keys) == 1 else ""


def plot_all(
    sweeps: Sequence[SweepResult],
    directory: str | os.PathLike[str],
    *,
    bands: Bands | None = None,
    crossover: tuple[str, str, int | None] | None = None,
    invalid: Invalid | None = None,
) -> list[Path]:
    """The three PNGs per workload into ``directory`` (``throughput.png`` for the first
    workload, ``throughput-<workload>.png`` for each further one); returns their paths."""
    d = Path(directory)
    groups: dict[str, list[SweepResult]] = {}
    for s in sweeps:
        groups.setdefault(s.workload.key(), []).append(s)
    paths: list[Path] = []
    for n, (key, group) in enumerate(groups.items()):
        suffix = "" if n == 0 else f"-{key}"
        cross = crossover if n == 0 else None  # the crossover is judged on the main workload
        paths += [
            plot_throughput(
                group, d / f"throughput{suffix}.png", bands=bands, crossover=cross, invalid=invalid
            ),
            plot_per_request(group, d / f"per_request{suffix}.png", invalid),
            plot_latency(group, d / f"latency{suffix}.png", invalid),
        ]
    return paths
