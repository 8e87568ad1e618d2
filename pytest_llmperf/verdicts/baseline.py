"""Baselines during a run: the buffered store, and entries summarized from measurements.

Writes follow syrupy's update workflow, with one improvement: pending updates are buffered in
a ``BaselineStore`` (a test that reads its own pending write sees it) and flushed once per
file through ``baseline_file.write_baseline_file`` (locked, atomic). The file models are
re-exported here so ``from pytest_llmperf.verdicts.baseline import ...`` keeps working.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from pytest_llmperf.base.metric_defs import METRICS
from pytest_llmperf.base.results import LevelResult
from pytest_llmperf.verdicts.baseline_file import (
    LOCK_TIMEOUT_S,
    MAX_RAW_SAMPLES,
    SWEEP_LEVEL,
    BaselineEntry,
    BaselineFile,
    BaselineFileError,
    EntryKey,
    MetricSummary,
    Provenance,
    baseline_path,
    check_name,
    load_baseline_file,
    write_baseline_file,
)
from pytest_llmperf.verdicts.stats import LaunchNoise, launch_means, mean_within_se

__all__ = [
    "MAX_RAW_SAMPLES",
    "SWEEP_LEVEL",
    "BaselineEntry",
    "BaselineFile",
    "BaselineFileError",
    "BaselineStore",
    "EntryKey",
    "FlushReport",
    "MetricSummary",
    "Provenance",
    "baseline_path",
    "check_name",
    "entry_from_levels",
    "load_baseline_file",
    "summarize",
    "write_baseline_file",
]


def summarize(
    metric: str,
    values: Sequence[float],
    *,
    tolerance: float | None = None,
    reference: str | None = None,
    launches: Sequence[str | None] | None = None,
    within_se: Sequence[float | None] = (),
) -> MetricSummary:
    """Turn repeat measurements of one metric into a ``MetricSummary`` (raw samples if few).

    With ``launches`` (each sample's server launch), ``std`` is the spread of launch means and
    ``launches`` their count: samples of one launch share its speed and count once.
    """
    if not values:
        raise ValueError(f"no values to summarize for {metric}")
    d = METRICS[metric]
    vals = [float(v) for v in values]
    means = launch_means(vals, launches)
    return MetricSummary(
        mean=statistics.fmean(vals),
        std=statistics.stdev(means) if len(means) > 1 else 0.0,
        launches=len(means) if launches is not None else None,
        within_se=mean_within_se(within_se),
        n=len(vals),
        samples=vals if 1 < len(vals) <= MAX_RAW_SAMPLES else None,
        direction=d.direction,
        unit=d.unit,
        tolerance=tolerance,
        reference=reference,
    )


def entry_from_levels(
    levels: Sequence[LevelResult],
    metrics: Iterable[str],
    *,
    tolerance: float | None = None,
    sglang_version: str | None = None,
    git_commit: str | None = None,
    invalid_left_out: int = 0,
) -> BaselineEntry:
    """A baseline entry from one or more repeats of the same point (metrics not measured are
    left out); ``invalid_left_out`` counts the invalid samples the caller left out."""
    if not levels:
        raise ValueError("entry_from_levels() needs at least one LevelResult")
    summaries: dict[str, MetricSummary] = {}
    for name in metrics:
        got = [(v, lv) for lv in levels if (v := lv.judged_value(name)) is not None]
        if got:
            summaries[name] = summarize(
                name,
                [v for v, _ in got],
                launches=[lv.launch for _, lv in got],
                within_se=[lv.within_se.get(name) for _, lv in got],
            )
    last = levels[-1]
    return BaselineEntry(
        metrics=summaries,
        tolerance=tolerance,
        sglang_version=sglang_version,
        git_commit=git_commit,
        server_max_running_requests=last.server_max_running_requests,
        notes=list(last.notes),
        invalid_left_out=invalid_left_out,
    )


@dataclass
class FlushReport:
    """What a flush did, for the terminal summary (syrupy-style counts)."""

    created: list[EntryKey] = field(default_factory=list)
    updated: list[EntryKey] = field(default_factory=list)
    deleted: list[EntryKey] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # files that could not be written

    def summary(self) -> str:
        parts = []
        for n, what in (
            (len(self.created), "created"),
            (len(self.updated), "updated"),
            (len(self.deleted), "deleted"),
        ):
            if n:
                parts.append(f"{n} baseline entr{'y' if n == 1 else 'ies'} {what}")
        return ", ".join(parts) + f" in {len(self.files)} file(s)" if parts else "no changes"


class _Scope(NamedTuple):
    hardware: str
    config: str
    workload: str | None
    concurrency: int | None

    def covers(self, key: EntryKey) -> bool:
        return (
            self.hardware == key.hardware
            and self.config == key.config
            and (self.workload is None or self.workload == key.workload)
            and (self.concurrency is None or self.concurrency == key.concurrency)
        )


class BaselineStore:
    """Run state for baselines: lazy loads, pending writes, used/selected tracking, one flush.

    Unused detection mirrors syrupy: an entry is *unused* only when it lies inside a selected
    scope (``select``) and nothing used it. Select a whole (config, workload) when its whole
    sweep ran, or single points when ``-k`` picked some levels; entries of tests that were not
    selected are never counted unused. Skipped points should be ``mark_used`` (kept).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        lock_timeout: float = LOCK_TIMEOUT_S,
        replace_broken: bool = False,
    ) -> None:
        self.directory = Path(directory)
        self.lock_timeout = lock_timeout
        # --llmperf-update: a file that does not parse reads as absent and is replaced (said
        # once in ``replaced``), as its error message tells the user.
        self.replace_broken = replace_broken
        self.replaced: list[str] = []
        # Only entries recorded before this store opened may be deleted as unused: a
        # concurrent session sharing the directory may have written the others meanwhile.
        self.opened_at = datetime.now(UTC)
        self._files: dict[tuple[str, str], BaselineFile | None] = {}
        self._pending: dict[EntryKey, BaselineEntry] = {}
        self._provenance: dict[tuple[str, str], Provenance] = {}
        self._used: set[EntryKey] = set()
        self._scopes: set[_Scope] = set()

    # -- reading ---------------------------------------------------------------------------
    def path_for(self, hardware: str, config: str) -> Path:
        return baseline_path(self.directory, hardware, config)

    def file(self, hardware: str, config: str) -> BaselineFile | None:
        """The parsed file (cached), None when absent; raises ``BaselineFileError``."""
        k = (hardware, config)
        if k not in self._files:
            p = self.path_for(hardware, config)
            try:
                got = load_baseline_file(p, hardware=hardware, config=config)
            except BaselineFileError as exc:
                if not p.exists():
                    got = None
                elif self.replace_broken and exc.replaceable:
                    self.replaced.append(f"replacing a broken file with this session's: {exc}")
                    got = None
                else:
                    raise
            self._files[k] = got
        return self._files[k]

    def get(self, key: EntryKey, *, mark_used: bool = True) -> BaselineEntry | None:
        """The entry for ``key``: a pending write wins over the file (syrupy's recall)."""
        key = EntryKey(*key)
        if mark_used:
            self._used.add(key)
        if key in self._pending:
            return self._pending[key]
        f = self.file(key.hardware, key.config)
        return None if f is None else f.entry(key.workload, key.concurrency)

    def launch_noise(self, key: EntryKey, metric: str) -> LaunchNoise | None:
        """The relative launch-to-launch spread recorded for ``metric`` at ``key`` and its
        launches (None under two): the noise prior of a comparison whose own sides have few
        launches (gates, the crossover). Does not mark the entry used."""
        entry = self.get(key, mark_used=False)
        summary = entry.metrics.get(metric) if entry is not None else None
        launches = (summary.launches or summary.n) if summary is not None else 0
        if summary is None or launches < 2 or summary.relative_std is None:
            return None
        return LaunchNoise(summary.relative_std, launches)

    def mark_used(self, key: EntryKey) -> None:
        self._used.add(EntryKey(*key))

    def select(
        self,
        hardware: str,
        config: str,
        workload: str | None = None,
        concurrency: int | None = None,
    ) -> None:
        """Declare that this scope ran, so unused entries inside it can be found."""
        self._scopes.add(_Scope(hardware, config, workload, concurrency))

    # -- writing ---------------------------------------------------------------------------
    def queue_update(
        self, key: EntryKey, entry: BaselineEntry, provenance: Provenance | None = None
    ) -> None:
        """Buffer a write; nothing touches disk before ``flush``."""
        key = EntryKey(*key)
        check_name(key.hardware, "hardware key")
        check_name(key.config, "config name")
        self._pending[key] = entry
        self._used.add(key)
        if provenance is not None:
            self._provenance[(key.hardware, key.config)] = provenance

    @property
    def pending(self) -> dict[EntryKey, BaselineEntry]:
        return dict(self._pending)

    def unused(self) -> list[EntryKey]:
        """Entries on disk inside a selected scope that nothing used, sorted."""
        files = {(s.hardware, s.config) for s in self._scopes}
        out: list[EntryKey] = []
        for hw, cfg in sorted(files):
            f = self.file(hw, cfg)
            if f is None:
                continue
            for key in f.iter_keys():
                if key not in self._used and any(s.covers(key) for s in self._scopes):
                    out.append(key)
        return sorted(out)

    def flush(self, *, delete_unused: bool = False) -> FlushReport:
        """One locked read-modify-write per touched file; clears the pending buffer."""
        report = FlushReport()
        deletions: dict[tuple[str, str], list[EntryKey]] = {}
        if delete_unused:
            for key in self.unused():
                deletions.setdefault((key.hardware, key.config), []).append(key)
        by_file: dict[tuple[str, str], dict[EntryKey, BaselineEntry]] = {}
        for key, entry in self._pending.items():
            by_file.setdefault((key.hardware, key.config), {})[key] = entry
        for hw, cfg in sorted(set(by_file) | set(deletions)):
            updates = by_file.get((hw, cfg), {})
            try:
                before = self.file(hw, cfg)
            except BaselineFileError:
                before = None
            for key in updates:
                existed = before is not None and before.entry(key.workload, key.concurrency)
                (report.updated if existed else report.created).append(key)
            dels = deletions.get((hw, cfg), [])
            path = self.path_for(hw, cfg)
            try:
                written = write_baseline_file(
                    path,
                    hw,
                    cfg,
                    {(k.workload, k.concurrency): e for k, e in updates.items()},
                    deletions=[(k.workload, k.concurrency) for k in dels],
                    provenance=self._provenance.get((hw, cfg)),
                    lock_timeout=self.lock_timeout,
                    deletable_before=self.opened_at,
                )
            except BaselineFileError as exc:  # the other files are still written
                report.errors.append(str(exc))
                for key in updates:
                    for done in (report.created, report.updated):
                        if key in done:
                            done.remove(key)
                continue
            self._files[(hw, cfg)] = written
            gone = [k for k in dels if written.entry(k.workload, k.concurrency) is None]
            report.deleted.extend(gone)
            report.files.append(path)
        self._pending.clear()
        return report

    # -- crossing xdist workers --------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able state (pending writes, used, selected) for the xdist controller."""
        return {
            "directory": str(self.directory),
            "pending": [
                {"key": list(k), "entry": e.model_dump(mode="json")}
                for k, e in self._pending.items()
            ],
            "provenance": [
                {"file": list(k), "provenance": p.model_dump(mode="json")}
                for k, p in self._provenance.items()
            ],
            "used": [list(k) for k in sorted(self._used)],
            "scopes": [list(s) for s in sorted(self._scopes, key=repr)],
            "opened_at": self.opened_at.isoformat(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BaselineStore:
        store = cls(data["directory"])
        store.merge_dict(data)
        return store

    def merge_dict(self, data: Mapping[str, Any]) -> None:
        """Fold a worker's ``to_dict()`` into this store (the controller calls this per node)."""
        for item in data.get("pending", []):
            self._pending[EntryKey(*item["key"])] = BaselineEntry.model_validate(item["entry"])
        for item in data.get("provenance", []):
            hw, cfg = item["file"]
            self._provenance[(hw, cfg)] = Provenance.model_validate(item["provenance"])
        self._used.update(EntryKey(*k) for k in data.get("used", []))
        self._scopes.update(_Scope(*s) for s in data.get("scopes", []))
        if "opened_at" in data:  # the earliest worker's start bounds what may be deleted
            self.opened_at = min(self.opened_at, datetime.fromisoformat(data["opened_at"]))
