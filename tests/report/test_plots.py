"""Plots are written as PNGs with the Agg backend; a missing matplotlib is a clear error."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pytest_llmperf.report import plots
from tests.verdicts import MTP, PLAIN, WORKLOAD, make_sweep


def test_plot_all_writes_pngs(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    sweeps = [make_sweep("plain", PLAIN), make_sweep("mtp", MTP, cap=48)]
    bands = {("mtp", WORKLOAD.key()): {c: (v, 0.05) for c, v in MTP.items()}}
    paths = plots.plot_all(sweeps, tmp_path, bands=bands, crossover=("mtp", "plain", 32))
    assert [p.name for p in paths] == ["throughput.png", "per_request.png", "latency.png"]
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000


def test_missing_matplotlib_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(plots.PlotsUnavailable, match=r"pip install 'pytest-llmperf\[plots\]'"):
        plots.plot_per_request([make_sweep("plain", PLAIN)], "unused.png")


def test_one_curve_per_config_and_workload_and_invalid_levels_off_the_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two workloads of the same configs are two sets of plots, not four lines called
    "plain"; an INVALID level is a red cross labelled so, not a point of the curve."""
    pytest.importorskip("matplotlib")
    other = WORKLOAD.model_copy(update={"input_len": 64})
    short = make_sweep("plain", PLAIN).model_copy(update={"workload": other})
    sweeps = [make_sweep("plain", PLAIN), make_sweep("mtp", MTP), short]
    drawn: dict[str, list[tuple[str, list[float]]]] = {}
    save = plots._save

    def spy(fig, path):  # type: ignore[no-untyped-def]
        lines = [(ln.get_label(), list(ln.get_xdata())) for ax in fig.axes for ln in ax.lines]
        drawn[Path(path).name] = [(lb, xs) for lb, xs in lines if not lb.startswith("_")]
        return save(fig, path)

    monkeypatch.setattr(plots, "_save", spy)
    invalid = {("mtp", WORKLOAD.key()): {64}}
    paths = plots.plot_all(sweeps, tmp_path, invalid=invalid)
    assert len(paths) == 6
    main = dict(drawn["throughput.png"])
    assert sorted(main) == ["mtp", "mtp INVALID (not a measurement)", "plain"]
    assert 64 not in main["mtp"] and main["mtp INVALID (not a measurement)"] == [64]
    assert [lb for lb, _ in drawn[f"throughput-{other.key()}.png"]] == ["plain"]
    labels = [lb for lb, _ in drawn["latency.png"]]
    assert labels.count("plain p50") == 2  # TTFT and ITL panels, one line each
