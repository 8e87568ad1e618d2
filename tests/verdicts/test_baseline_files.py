"""Baseline files that must be refused, kept or written in place: symlinks, duplicated keys,
non-finite samples, a file in the wrong directory, an unwritable directory, schema versions."""

from __future__ import annotations

import difflib
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from pytest_llmperf.verdicts.baseline import BaselineStore
from pytest_llmperf.verdicts.baseline_file import (
    BaselineEntry,
    BaselineFileError,
    EntryKey,
    baseline_path,
    load_baseline_file,
    write_baseline_file,
)

from . import PLAIN, WORKLOAD, baseline_entry, write_plain

HW = "1xNVIDIA-H100-80GB"
WL = WORKLOAD.key()


def _entry(tput: float, n: int = 3) -> BaselineEntry:
    return baseline_entry(tput, n)  # type: ignore[no-any-return]


def _write_plain(directory: Path) -> Path:
    return write_plain(directory, HW, 3)


def _get(directory: Path, c: int = 64, **kw: bool) -> BaselineEntry | None:
    return BaselineStore(directory, **kw).get(EntryKey(HW, "plain", WL, c))


def test_update_of_one_entry_leaves_the_other_entries_bytes_identical(tmp_path: Path) -> None:
    path = _write_plain(tmp_path)
    before = json.loads(path.read_text())["workloads"][WL]
    lines_before = path.read_text().splitlines()
    write_baseline_file(path, HW, "plain", {(WL, 64): _entry(1000.0)})
    after = json.loads(path.read_text())["workloads"][WL]
    assert after["64"] != before["64"]
    for c in before:
        if c != "64":
            assert json.dumps(after[c], indent=2) == json.dumps(before[c], indent=2)
    # `git diff` shows only C=64's lines: every changed line lies inside its block.
    lines_after = path.read_text().splitlines()
    start = next(i for i, ln in enumerate(lines_before) if ln.strip() == '"64": {')
    indent = lines_before[start][: len(lines_before[start]) - len(lines_before[start].lstrip())]
    end = next(
        i for i in range(start, len(lines_before)) if lines_before[i].startswith(indent + "}")
    )
    ops = difflib.SequenceMatcher(a=lines_before, b=lines_after, autojunk=False).get_opcodes()
    changed = [(i1, i2) for tag, i1, i2, _, _ in ops if tag != "equal"]
    assert changed and all(start <= i1 and i2 <= end + 1 for i1, i2 in changed), changed


def test_version_1_file_loads_and_is_rewritten_as_version_2(tmp_path: Path) -> None:
    path = _write_plain(tmp_path)
    data = json.loads(path.read_text())
    assert data["schema_version"] == 2
    data["schema_version"] = 1
    for levels in data["workloads"].values():
        for e in levels.values():
            del e["invalid_left_out"]
    path.write_text(json.dumps(data))
    assert load_baseline_file(path).entry(WL, 64).invalid_left_out == 0  # type: ignore[union-attr]
    write_baseline_file(path, HW, "plain", {(WL, 1): _entry(5.0)})
    assert json.loads(path.read_text())["schema_version"] == 2


def test_symlinked_file_stays_a_symlink_and_its_target_is_written(tmp_path: Path) -> None:
    shared = _write_plain(tmp_path / "shared")
    link = baseline_path(tmp_path / "mine", HW, "plain")
    link.parent.mkdir(parents=True)
    link.symlink_to(shared)
    store = BaselineStore(tmp_path / "mine")
    store.queue_update(EntryKey(HW, "plain", WL, 64), _entry(999.0))
    store.flush()
    assert link.is_symlink() and link.resolve() == shared.resolve()
    assert load_baseline_file(shared).entry(WL, 64).metrics["output_throughput"].samples[0] == 999.0  # type: ignore[union-attr,index]
    assert (Path(str(shared) + ".lock")).exists()  # locked where the bytes are


def test_duplicated_key_is_refused_with_file_and_key(tmp_path: Path) -> None:
    path = _write_plain(tmp_path)
    text = path.read_text()
    dup = text.replace('"config": "plain",', '"config": "plain",\n  "config": "plain",', 1)
    assert dup != text
    path.write_text(dup)
    with pytest.raises(BaselineFileError) as info:
        _get(tmp_path)
    assert str(path) in str(info.value) and "'config' appears twice" in str(info.value)


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (
            lambda d: d["metrics"]["output_throughput"]["samples"].__setitem__(1, float("nan")),
            "samples",
        ),
        (lambda d: d["metrics"]["output_throughput"].__setitem__("mean", 0.0), "mean 0"),
        (lambda d: d["metrics"]["output_throughput"].__setitem__("mean", -5.0), "mean -5"),
    ],
    ids=["nan-sample", "zero-mean", "negative-mean"],
)
def test_impossible_numbers_are_refused_with_file_and_field(tmp_path: Path, mutate, needle) -> None:  # type: ignore[no-untyped-def]
    path = _write_plain(tmp_path)
    data = json.loads(path.read_text())
    mutate(data["workloads"][WL]["64"])
    path.write_text(json.dumps(data))  # json writes NaN as NaN
    with pytest.raises(BaselineFileError) as info:
        _get(tmp_path)
    msg = str(info.value)
    assert msg.startswith(str(path)) and needle in msg and "output_throughput" in msg


def test_hardware_field_that_disagrees_with_its_directory_is_refused(tmp_path: Path) -> None:
    path = _write_plain(tmp_path)
    data = json.loads(path.read_text())
    data["hardware"] = "8xA100"
    path.write_text(json.dumps(data))
    with pytest.raises(BaselineFileError) as info:
        _get(tmp_path, replace_broken=True)  # an update does not overwrite it either
    assert "'hardware' is '8xA100'" in str(info.value) and str(path) in str(info.value)
    assert "re-record" not in str(info.value)


def test_broken_file_message_and_update_agree(tmp_path: Path) -> None:
    path = _write_plain(tmp_path)
    path.write_text("{ not json")
    with pytest.raises(BaselineFileError) as info:
        _get(tmp_path)
    assert "--llmperf-update" in str(info.value)  # ... and the update then does it:
    store = BaselineStore(tmp_path, replace_broken=True)
    assert store.get(EntryKey(HW, "plain", WL, 64)) is None
    assert store.replaced and str(path) in store.replaced[0]
    store.queue_update(EntryKey(HW, "plain", WL, 64), _entry(42.0))
    assert not store.flush().errors
    assert load_baseline_file(path).entry(WL, 64) is not None


def test_baseline_dir_that_is_a_file_is_an_error_naming_it(tmp_path: Path) -> None:
    d = tmp_path / "baselines"
    d.write_text("not a dir")
    store = BaselineStore(d)
    assert store.get(EntryKey(HW, "plain", WL, 64)) is None
    store.queue_update(EntryKey(HW, "plain", WL, 64), _entry(1.0))
    report = store.flush()
    assert not report.created and report.errors
    assert str(d) in report.errors[0] and "cannot write the baseline file" in report.errors[0]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_dir_keeps_the_old_file_and_names_it(tmp_path: Path) -> None:
    path = _write_plain(tmp_path)
    before = path.read_bytes()
    path.parent.chmod(0o555)
    try:
        store = BaselineStore(tmp_path)
        store.queue_update(EntryKey(HW, "plain", WL, 64), _entry(1.0))
        report = store.flush()
    finally:
        path.parent.chmod(0o755)
    assert report.errors and "Permission denied" in report.errors[0]
    assert path.read_bytes() == before


def test_full_disk_keeps_the_old_file_and_names_it(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import pytest_llmperf.verdicts.baseline_file as bf

    path = _write_plain(tmp_path)
    before = path.read_bytes()

    def full(p: Path, text: str) -> None:
        raise OSError(28, "No space left on device", str(p))

    monkeypatch.setattr(bf, "atomic_write_text", full)
    store = BaselineStore(tmp_path)
    store.queue_update(EntryKey(HW, "plain", WL, 64), _entry(1.0))
    report = store.flush()
    assert report.errors and "No space left on device" in report.errors[0]
    assert str(path) in report.errors[0] and path.read_bytes() == before


def test_unused_deletion_keeps_an_entry_another_session_wrote_meanwhile(tmp_path: Path) -> None:
    path = _write_plain(tmp_path)
    store = BaselineStore(tmp_path)
    store.select(HW, "plain", WL)
    for c in PLAIN:
        if c != 1:
            store.mark_used(EntryKey(HW, "plain", WL, c))
    # another session records C=1 after this one opened its store
    later = _entry(7.0).model_copy(update={"recorded_at": datetime.now(UTC) + timedelta(1)})
    write_baseline_file(path, HW, "plain", {(WL, 1): later})
    assert store.unused() == [EntryKey(HW, "plain", WL, 1)]
    report = store.flush(delete_unused=True)
    assert report.deleted == []
    assert load_baseline_file(path).entry(WL, 1) is not None
