"""Baseline files: round trip, errors people can act on, atomic + locked writes, unused."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pytest_llmperf.verdicts.baseline import BaselineStore, entry_from_levels
from pytest_llmperf.verdicts.baseline_file import (
    BaselineEntry,
    BaselineFileError,
    EntryKey,
    Provenance,
    baseline_path,
    load_baseline_file,
    write_baseline_file,
)

from . import WORKLOAD, baseline_entry, make_level, write_plain

HW = "1xNVIDIA-H100-80GB"
WL = WORKLOAD.key()


def _entry(tput: float, n: int = 1) -> BaselineEntry:
    return baseline_entry(tput, n)  # type: ignore[no-any-return]


def _write_plain(directory: Path) -> Path:
    return write_plain(directory, HW, 1, Provenance(gpu="H100"))


def test_round_trip_is_deterministic(tmp_path: Path) -> None:
    path = _write_plain(tmp_path)
    text = path.read_text()
    assert text.endswith("}\n")
    data = json.loads(text)
    assert list(data) == sorted(data)
    assert list(data["workloads"][WL]) == ["1", "4", "16", "32", "64", "128"]
    f = load_baseline_file(path)
    assert f.entry(WL, 64) is not None
    assert f.entry(WL, 64).metrics["output_throughput"].mean == 2327  # type: ignore[union-attr]
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    # Rewriting the same content yields the same bytes.
    write_baseline_file(path, HW, "plain", {})
    assert path.read_text() == text


def test_entry_from_levels_keeps_samples_and_spread() -> None:
    levels = [make_level(64, v) for v in (2300, 2327, 2354)]
    e = entry_from_levels(levels, ["output_throughput", "median_ttft_ms", "accept_length"])
    s = e.metrics["output_throughput"]
    assert (s.n, s.samples, round(s.mean)) == (3, [2300, 2327, 2354], 2327)
    assert s.std == pytest.approx(27.0)
    assert "accept_length" not in e.metrics  # not measured -> not recorded


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda t: t[: len(t) // 2], "<root>: Invalid JSON"),
        (lambda t: t.replace('"schema_version": 2', '"schema_version": 7'), "schema_version"),
        (lambda t: t.replace('"output_throughput"', '"output_thruput"', 1), "unknown metric"),
        (lambda t: t.replace('"std": 0.0', '"std": -1.0', 1), ".std: Input should be greater"),
        (lambda t: t.replace('"hardware"', '"hardwre"'), "hardwre: Extra inputs"),
    ],
    ids=["truncated", "wrong-schema", "unknown-metric", "negative-std", "typo-field"],
)
def test_malformed_file_error_names_path_field_and_fix(tmp_path: Path, mutate, needle) -> None:  # type: ignore[no-untyped-def]
    path = _write_plain(tmp_path)
    path.write_text(mutate(path.read_text()))
    with pytest.raises(BaselineFileError) as info:
        BaselineStore(tmp_path).get(EntryKey(HW, "plain", WL, 64))
    msg = str(info.value)
    assert msg.startswith(f"{path}: baseline file is invalid")
    assert needle in msg
    assert "--llmperf-update" in msg
    assert "errors.pydantic.dev" not in msg and "Traceback" not in msg


def test_negative_tolerance_names_the_field(tmp_path: Path) -> None:
    path = _write_plain(tmp_path)
    data = json.loads(path.read_text())
    data["workloads"][WL]["64"]["tolerance"] = -0.05
    path.write_text(json.dumps(data))
    with pytest.raises(BaselineFileError, match=rf"workloads\.{WL}\.64\.tolerance: Input should"):
        load_baseline_file(path)


@pytest.mark.parametrize("name", ["../evil", "a/b", "a\\b", "", ".hidden", "x..y"])
def test_unsafe_names_are_rejected(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match="cannot be used as a baseline file name"):
        baseline_path(tmp_path, HW, name)
    with pytest.raises(ValueError, match="cannot be used as a baseline file name"):
        baseline_path(tmp_path, name, "plain")


def test_sim_hardware_key_is_a_valid_directory(tmp_path: Path) -> None:
    assert baseline_path(tmp_path, "sim:h100-qwen", "mtp").parts[-2:] == (
        "sim:h100-qwen",
        "mtp.json",
    )


def test_pending_write_is_seen_and_flushed_once(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    key = EntryKey(HW, "mtp", WL, 64)
    assert store.get(key) is None
    store.queue_update(key, _entry(1571.1))
    assert not baseline_path(tmp_path, HW, "mtp").exists()
    assert store.get(key).metrics["output_throughput"].mean == 1571.1  # type: ignore[union-attr]
    report = store.flush()
    assert report.created == [key] and report.updated == []
    store.queue_update(key, _entry(1600))
    assert store.flush().updated == [key]
    assert BaselineStore(tmp_path).get(key).metrics["output_throughput"].mean == 1600  # type: ignore[union-attr]


def test_unused_only_within_selected_points(tmp_path: Path) -> None:
    _write_plain(tmp_path)
    store = BaselineStore(tmp_path)
    # -k picked C=4 and C=64 only, and only C=64 ran: C=4 is unused, the rest out of scope.
    store.select(HW, "plain", WL, 4)
    store.select(HW, "plain", WL, 64)
    store.get(EntryKey(HW, "plain", WL, 64))
    assert store.unused() == [EntryKey(HW, "plain", WL, 4)]
    # The whole sweep ran except C=128 which was dropped from the suite.
    store2 = BaselineStore(tmp_path)
    store2.select(HW, "plain", WL)
    for c in (1, 4, 16, 32, 64):
        store2.get(EntryKey(HW, "plain", WL, c))
    assert store2.unused() == [EntryKey(HW, "plain", WL, 128)]
    report = store2.flush(delete_unused=True)
    assert report.deleted == [EntryKey(HW, "plain", WL, 128)]
    assert load_baseline_file(baseline_path(tmp_path, HW, "plain")).entry(WL, 128) is None
    assert BaselineStore(tmp_path).unused() == []  # nothing selected -> nothing unused


def test_store_state_crosses_workers_as_plain_dicts(tmp_path: Path) -> None:
    worker = BaselineStore(tmp_path)
    key = EntryKey(HW, "mtp", WL, 4)
    worker.select(HW, "mtp", WL)
    worker.queue_update(key, _entry(400.5), Provenance(sglang_version="0.5.3"))
    wire = json.loads(json.dumps(worker.to_dict()))
    controller = BaselineStore.from_dict(wire)
    assert controller.pending == {key: worker.pending[key]}
    controller.flush()
    assert (
        load_baseline_file(baseline_path(tmp_path, HW, "mtp")).provenance.sglang_version == "0.5.3"
    )


_WRITER = textwrap.dedent(
    """
    import sys
    from pytest_llmperf.verdicts.baseline import summarize
    from pytest_llmperf.verdicts.baseline_file import BaselineEntry, write_baseline_file
    path, wl, first = sys.argv[1], sys.argv[2], int(sys.argv[3])
    count = int(sys.argv[4])
    for i in range(count if count > 0 else 10**9):
        c = first + (i % max(count, 1)) if count > 0 else 1 + i % 400
        s = summarize("output_throughput", [float(i + 1)] * 3)
        entry = BaselineEntry(metrics={"output_throughput": s})
        write_baseline_file(path, "hw", "cfg", {(wl, c): entry})
        if count <= 0:
            print(i, flush=True)
    """
)


def test_atomic_write_survives_sigkill_mid_write(tmp_path: Path) -> None:
    path = tmp_path / "hw" / "cfg.json"
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(path), "wl", "0", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    parsed = 0
    try:
        for line in proc.stdout:
            load_baseline_file(path)  # every observed state parses
            parsed += 1
            if int(line) >= 60:
                break
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert parsed > 50
    f = load_baseline_file(path)
    assert len(f.workloads["wl"]) >= 60
    # The dead writer's lock does not block the next writer.
    write_baseline_file(path, "hw", "cfg", {}, lock_timeout=5)


def test_eight_processes_updating_one_file_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "hw" / "cfg.json"
    procs = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(path), f"wl{p}", "1", "6"])
        for p in range(8)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0] * 8
    f = load_baseline_file(path)
    assert sorted(f.workloads) == [f"wl{p}" for p in range(8)]
    assert all(sorted(levels) == [1, 2, 3, 4, 5, 6] for levels in f.workloads.values())
    assert not [p for p in os.listdir(path.parent) if p.endswith(".tmp")]
