"""Results files: merge of shards, conflicts, compare exit status as in-pytest, CLI parsers."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from pytest_llmperf.report.results_file import (
    RunFile,
    RunFileError,
    add_compare_parser,
    add_merge_parser,
    compare,
    load_run,
    merge,
    save_run,
)
from pytest_llmperf.verdicts.baseline import BaselineStore, EntryKey, entry_from_levels
from pytest_llmperf.verdicts.gates import Gate

from . import MTP, PLAIN, make_sweep

HW = "sim:h100"


def _shards(tmp_path: Path) -> list[Path]:
    plain, mtp = make_sweep("plain", PLAIN), make_sweep("mtp", MTP, cap=48)
    low = mtp.model_copy(update={"levels": mtp.levels[:3]})
    high = mtp.model_copy(update={"levels": mtp.levels[3:]})
    paths = []
    for i, sweeps in enumerate([[plain, low], [high]]):
        p = tmp_path / f"shard{i}.json"
        save_run(RunFile(hardware=HW, shard=str(i), sweeps=sweeps), p)
        paths.append(p)
    return paths


def _bless(directory: Path, run: RunFile) -> None:
    store = BaselineStore(directory)
    for s in run.sweeps:
        for lv in s.levels:
            key = EntryKey(HW, s.config, s.workload.key(), lv.max_concurrency)
            store.queue_update(key, entry_from_levels([lv], ["output_throughput"]))
    store.flush()


def test_merge_shards(tmp_path: Path) -> None:
    paths = _shards(tmp_path)
    run = merge(paths)
    assert [s.config for s in run.sweeps] == ["plain", "mtp"]
    assert [lv.max_concurrency for lv in run.sweep("mtp").levels] == [1, 4, 16, 32, 64, 128]  # type: ignore[union-attr]
    assert merge([*paths, paths[0]]) == run  # an identical duplicate is fine


def test_merge_conflict_names_point_and_files(tmp_path: Path) -> None:
    paths = _shards(tmp_path)
    other = make_sweep("plain", {64: 2000})
    save_run(RunFile(hardware=HW, sweeps=[other]), tmp_path / "x.json")
    with pytest.raises(
        RunFileError,
        match=r"conflicting results for plain .* C=64: .*shard0.json has 2327.0 tok/s, "
        r".*x.json has 2000.0",
    ):
        merge([*paths, tmp_path / "x.json"])
    save_run(RunFile(hardware="other", sweeps=[]), tmp_path / "y.json")
    with pytest.raises(RunFileError, match="differs"):
        merge([paths[0], tmp_path / "y.json"])


def test_invalid_results_file(tmp_path: Path) -> None:
    p = tmp_path / "bad.json"
    p.write_text('{"schema_version": 2, "hardware": "x"}')
    with pytest.raises(
        RunFileError, match=r"bad.json: results file is invalid.*\n  - schema_version"
    ):
        load_run(p)


def test_compare_exit_status(tmp_path: Path) -> None:
    run = merge(_shards(tmp_path))
    baselines = tmp_path / "baselines"
    _bless(baselines, run)
    text, status = compare(run, baselines)
    assert status == 0 and "fail" not in text
    gate = Gate(config="mtp", reference="plain", factor=0.98)
    text, status = compare(run, baselines, None, [gate])
    assert status == 1 and "mtp at C=64: 1571 tok/s, 32.5 % below plain" in text
    # A 10 % regression at C=64 of plain: fails beyond tolerance + margin.
    slow = run.model_copy(deep=True)
    lv = slow.sweep("plain").levels[4]  # type: ignore[union-attr]
    lv.output_throughput *= 0.85
    text, status = compare(slow, baselines, 0.05)
    assert status == 1 and "plain at C=64: output_throughput 1978 tok/s is 15.0 % below" in text
    _, status = compare(run, tmp_path / "empty")
    assert status == 1  # missing baselines fail like missing snapshots


def test_cli_parsers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="llmperf")
    sub = parser.add_subparsers()
    add_merge_parser(sub)
    add_compare_parser(sub)
    out = tmp_path / "merged.json"
    args = parser.parse_args(["merge", *map(str, _shards(tmp_path)), "-o", str(out)])
    assert args.func(args) == 0
    _bless(tmp_path / "b", load_run(out))
    gates = tmp_path / "gates.toml"
    gates.write_text('[[gates]]\nconfig = "mtp"\nreference = "plain"\nfactor = 0.98\n')
    md = tmp_path / "summary.md"
    args = parser.parse_args(
        [
            "compare",
            str(out),
            "--baselines",
            str(tmp_path / "b"),
            "--gates",
            str(gates),
            "--markdown",
            str(md),
        ]
    )
    assert args.func(args) == 1
    assert "### gates" in md.read_text()
    args = parser.parse_args(
        ["compare", str(out), "--baselines", str(tmp_path / "b"), "--tolerance", "5"]
    )
    assert args.func(args) == 2
    assert "did you mean 0.05" in capsys.readouterr().err
