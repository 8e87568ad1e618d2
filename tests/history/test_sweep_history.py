"""``llmperf sweep --history``: the sweep appended as one run (LLMPERF_HISTORY too)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_llmperf.cli import main
from pytest_llmperf.history.store import HistoryStore
from tests.sim_servers import running_sim

SHORT = ["-c", "1,2", "--input-len", "8", "--output-len", "6"]


def test_sweep_appends_one_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "h.sqlite"
    monkeypatch.setenv("LLMPERF_HISTORY", str(db))
    with running_sim() as server:
        assert main(["sweep", "--url", server.url, *SHORT, "--config-name", "cli"]) == 0
        first = capsys.readouterr()
        assert main(["sweep", "--url", server.url, *SHORT, "--history", "off"]) == 0
        off = capsys.readouterr()
    assert f"history: run #1 appended to sqlite:///{db} (2 points)" in first.out, first
    assert "history:" not in off.out
    with HistoryStore.open(str(db)) as store:
        (row,) = store.runs()
        assert (row.source, row.points) == ("sweep", 2)
        assert row.hardware_key.startswith("sim-")
        points = store.points(row.id)
        assert [(p.config, p.workload_key, p.concurrency) for p in points] == [
            ("cli", "sglang-in8-out6", 1),
            ("cli", "sglang-in8-out6", 2),
        ]
        for point in points:
            series = store.series(point.key, "output_throughput")
            if point.valid:  # one sample per level, the value a trend reads
                assert point.verdict is None and not point.invalid_reasons
                assert [(s.value, s.samples) for s in series] == [
                    (point.metrics["output_throughput"], point.samples["output_throughput"])
                ]
                assert series[0].value > 0 and len(series[0].samples) == 1
            else:  # a level this loaded machine spoiled: its row and reasons, no numbers
                assert point.verdict == "invalid" and point.invalid_reasons
                assert series == [] and not point.metrics


def test_an_unwritable_history_fails_the_sweep_naming_the_setting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with running_sim() as server:
        code = main(["sweep", "--url", server.url, *SHORT, "--history", str(blocker / "h.db")])
    err = capsys.readouterr().err
    assert code == 1
    assert f"llmperf sweep: error: history (sqlite:///{blocker}/h.db): cannot create" in err
