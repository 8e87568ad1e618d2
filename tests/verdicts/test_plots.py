"""Plots are written as PNGs with the Agg backend; a missing matplotlib is a clear error."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pytest_llmperf.report import plots

from . import MTP, PLAIN, make_sweep


def test_plot_all_writes_pngs(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    sweeps = [make_sweep("plain", PLAIN), make_sweep("mtp", MTP, cap=48)]
    bands = {"mtp": {c: (v, 0.05) for c, v in MTP.items()}}
    paths = plots.plot_all(sweeps, tmp_path, bands=bands, crossover=("mtp", "plain", 32))
    assert [p.name for p in paths] == ["throughput.png", "per_request.png", "latency.png"]
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000


def test_missing_matplotlib_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(plots.PlotsUnavailable, match=r"pip install 'pytest-llmperf\[plots\]'"):
        plots.plot_per_request([make_sweep("plain", PLAIN)], "unused.png")
