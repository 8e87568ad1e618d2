"""Baseline files: what a point measured last time it was blessed, and how they are kept safe.

One JSON file per (hardware key, server config): ``<dir>/<hardware>/<config>.json``. Inside,
entries are keyed by workload key and concurrency. Concurrency ``0`` (``SWEEP_LEVEL``) holds
sweep-level metrics such as ``crossover_concurrency``.

Writes follow syrupy's update workflow, with one improvement: pending updates are buffered in
a ``BaselineStore`` (a test that reads its own pending write sees it), flushed once per file,
and every flush is a read-modify-write under a ``filelock.FileLock`` on a sidecar ``.lock``
file followed by an atomic replace, so concurrent writers lose nothing and a reader never sees
a half-written file.
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, NamedTuple

from filelock import FileLock
from filelock import Timeout as LockTimeout
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    ValidationError,
    field_validator,
    model_validator,
)

from pytest_llmperf.base.errors import InputError
from pytest_llmperf.base.metric_defs import METRICS, Direction
from pytest_llmperf.base.results import LevelResult
from pytest_llmperf.base.version import __version__

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

# Concurrency key of sweep-level entries (crossover_concurrency, max_concurrency_within_slo).
SWEEP_LEVEL = 0
# Raw samples are kept for small n so a Mann-Whitney test is possible later; beyond this,
# mean/std/n carry the information and the file stays reviewable.
MAX_RAW_SAMPLES = 20
LOCK_TIMEOUT_S = 60.0

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:+@=-]*$")
_FIX_HINT = "re-record it with --llmperf-update (or `git checkout` the file)"


class BaselineFileError(InputError):
    """A baseline file is unreadable or invalid; the message names path, field, reason, fix."""


def check_name(value: str, what: str) -> str:
    """Reject names that would escape the baselines directory or be awkward as a file name."""
    if not _SAFE_NAME.fullmatch(value) or ".." in value:
        raise ValueError(
            f"{what} {value!r} cannot be used as a baseline file name: use letters, digits and "
            "_ . : + @ = - only, starting with a letter or digit (no path separators, no '..')"
        )
    return value


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MetricSummary(_Model):
    """One metric at one point: enough to judge noise (mean, std, n) plus raw samples if few."""

    mean: float
    std: float = Field(default=0.0, ge=0.0)  # run-to-run std of one run's value (same unit)
    n: int = Field(default=1, ge=1)
    samples: list[float] | None = Field(default=None, max_length=MAX_RAW_SAMPLES)
    direction: Direction
    unit: str = ""
    tolerance: float | None = Field(default=None, gt=0.0, lt=1.0)
    # Only for sweep-level relational metrics (crossover_concurrency): the reference config.
    reference: str | None = None

    @field_validator("mean", "std")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("must be a finite number")
        return v

    @model_validator(mode="after")
    def _samples_match_n(self) -> MetricSummary:
        if self.samples is not None and len(self.samples) != self.n:
            raise ValueError(f"has {len(self.samples)} samples but n={self.n}")
        return self

    @property
    def relative_std(self) -> float | None:
        """Run-to-run spread as a fraction of the mean; None when unknown (n=1)."""
        if self.n < 2 or self.mean == 0:
            return None
        return self.std / abs(self.mean)


class BaselineEntry(_Model):
    """Everything blessed for one (workload, concurrency) point of one config."""

    metrics: dict[str, MetricSummary]
    tolerance: float | None = Field(default=None, gt=0.0, lt=1.0)  # all metrics of the entry
    recorded_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    sglang_version: str | None = None
    git_commit: str | None = None
    server_max_running_requests: int | None = None
    notes: list[str] = Field(default_factory=list)

    @field_validator("metrics")
    @classmethod
    def _known_metrics(cls, v: dict[str, MetricSummary]) -> dict[str, MetricSummary]:
        for name, summary in v.items():
            d = METRICS.get(name)
            if d is None:
                raise ValueError(
                    f"unknown metric {name!r}; known metrics: {', '.join(sorted(METRICS))}"
                )
            if summary.direction != d.direction:
                raise ValueError(
                    f"metric {name!r} has direction {summary.direction!r}, "
                    f"but {name} is {d.direction}-is-better"
                )
        return v


class Provenance(_Model):
    """Where numbers came from, so a reader can tell when a baseline is not comparable."""

    sglang_version: str | None = None
    server_args: dict[str, Any] = Field(default_factory=dict)
    model_path: str | None = None
    gpu: str | None = None
    gpu_count: int | None = None
    driver: str | None = None
    cuda: str | None = None
    sim_profile: str | None = None
    date: datetime = Field(default_factory=lambda: datetime.now(UTC))
    plugin_version: str = __version__
    git_commit: str | None = None


class BaselineFile(_Model):
    """The on-disk format of ``<dir>/<hardware>/<config>.json``."""

    schema_version: Literal[1] = 1
    hardware: str
    config: str
    provenance: Provenance = Field(default_factory=Provenance)
    # workload key -> concurrency (0 = sweep level) -> entry
    workloads: dict[str, dict[NonNegativeInt, BaselineEntry]] = Field(default_factory=dict)

    @field_validator("hardware")
    @classmethod
    def _hw(cls, v: str) -> str:
        return check_name(v, "hardware key")

    @field_validator("config")
    @classmethod
    def _cfg(cls, v: str) -> str:
        return check_name(v, "config name")

    def entry(self, workload: str, concurrency: int) -> BaselineEntry | None:
        return self.workloads.get(workload, {}).get(concurrency)

    def iter_keys(self) -> Iterator[EntryKey]:
        for wl, levels in self.workloads.items():
            for c in levels:
                yield EntryKey(self.hardware, self.config, wl, c)


class EntryKey(NamedTuple):
    """Where an entry lives: file (hardware, config), then workload key and concurrency."""

    hardware: str
    config: str
    workload: str
    concurrency: int

    def label(self) -> str:
        where = "sweep" if self.concurrency == SWEEP_LEVEL else f"C={self.concurrency}"
        return f"{self.hardware}/{self.config} {self.workload} {where}"


def baseline_path(directory: str | os.PathLike[str], hardware: str, config: str) -> Path:
    """``<dir>/<hardware>/<config>.json``; a name with a path separator is an error."""
    check_name(hardware, "hardware key")
    check_name(config, "config name")
    return Path(directory) / hardware / f"{config}.json"


def _render_validation_error(path: Path, err: ValidationError) -> str:
    lines = [f"{path}: baseline file is invalid ({err.error_count()} error(s)); {_FIX_HINT}:"]
    for e in err.errors(include_url=False, include_input=False):
        loc = ".".join(str(p) for p in e["loc"]) or "<root>"
        lines.append(f"  - {loc}: {e['msg']} [{e['type']}]")
    return "\n".join(lines)


def load_baseline_file(path: str | os.PathLike[str]) -> BaselineFile:
    """Parse and validate one file; any problem is a ``BaselineFileError`` meant for people."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise BaselineFileError(f"{p}: cannot read baseline file: {exc.strerror}") from None
    try:
        return BaselineFile.model_validate_json(raw)
    except ValidationError as exc:
        raise BaselineFileError(_render_validation_error(p, exc)) from None


def _sorted(obj: Any) -> Any:
    """Keys sorted, numeric keys (concurrencies) in numeric order, so C=4 comes before C=16."""
    if isinstance(obj, dict):
        keys = sorted(obj, key=lambda k: (0, int(k), "") if k.isdigit() else (1, 0, k))
        return {k: _sorted(obj[k]) for k in keys}
    if isinstance(obj, list):
        return [_sorted(v) for v in obj]
    return obj


def _dump(model: BaseModel) -> str:
    """Deterministic JSON (indent 2, sorted keys, trailing newline): reviewable git diffs."""
    data = _sorted(model.model_dump(mode="json"))
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temp file in the same directory, fsync, replace: readers see old or new."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; baselines are shared, committed files
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    try:  # make the rename itself durable; not possible on every platform
        dfd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def _lock_for(path: Path, timeout: float) -> FileLock:
    path.parent.mkdir(parents=True, exist_ok=True)
    # is_singleton: two stores in one process must not trip filelock's deadlock detector.
    return FileLock(str(path.resolve()) + ".lock", timeout=timeout, is_singleton=True)


def write_baseline_file(
    path: str | os.PathLike[str],
    hardware: str,
    config: str,
    updates: Mapping[tuple[str, int], BaselineEntry],
    *,
    deletions: Iterable[tuple[str, int]] = (),
    provenance: Provenance | None = None,
    lock_timeout: float = LOCK_TIMEOUT_S,
) -> BaselineFile:
    """Merge ``updates``/``deletions`` into whatever is on disk *now*, under the lock.

    A file on disk that no longer parses is replaced (this runs only on an explicit update,
    which is the documented fix for a broken file).
    """
    p = Path(path)
    lock = _lock_for(p, lock_timeout)
    try:
        with lock:
            current: BaselineFile | None = None
            if p.exists():
                try:
                    current = load_baseline_file(p)
                except BaselineFileError:
                    current = None
            if current is None:
                current = BaselineFile(hardware=hardware, config=config)
            if (current.hardware, current.config) != (hardware, config):
                raise BaselineFileError(
                    f"{p}: holds hardware={current.hardware!r} config={current.config!r}, "
                    f"expected {hardware!r}/{config!r}; move or delete the file"
                )
            for wl, c in deletions:
                levels = current.workloads.get(wl)
                if levels is not None:
                    levels.pop(c, None)
                    if not levels:
                        del current.workloads[wl]
            for (wl, c), entry in updates.items():
                current.workloads.setdefault(wl, {})[c] = entry
            if provenance is not None and updates:
                current.provenance = provenance
            if not current.workloads:
                if p.exists():
                    p.unlink()
                return current
            atomic_write_text(p, _dump(current))
            return current
    except LockTimeout:
        raise BaselineFileError(
            f"{p}: could not lock {lock.lock_file} within {lock_timeout:g} s; another "
            "process is writing baselines (or left a lock on a network filesystem)"
        ) from None


def summarize(
    metric: str,
    values: Sequence[float],
    *,
    tolerance: float | None = None,
    reference: str | None = None,
) -> MetricSummary:
    """Turn repeat measurements of one metric into a ``MetricSummary`` (raw samples if few)."""
    if not values:
        raise ValueError(f"no values to summarize for {metric}")
    d = METRICS[metric]
    vals = [float(v) for v in values]
    return MetricSummary(
        mean=statistics.fmean(vals),
        std=statistics.stdev(vals) if len(vals) > 1 else 0.0,
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
) -> BaselineEntry:
    """A baseline entry from one or more repeats of the same point (metrics not measured are
    left out)."""
    if not levels:
        raise ValueError("entry_from_levels() needs at least one LevelResult")
    summaries: dict[str, MetricSummary] = {}
    for name in metrics:
        vals = [v for v in (lv.metric_value(name) for lv in levels) if v is not None]
        if vals:
            summaries[name] = summarize(name, vals)
    last = levels[-1]
    return BaselineEntry(
        metrics=summaries,
        tolerance=tolerance,
        sglang_version=sglang_version,
        git_commit=git_commit,
        server_max_running_requests=last.server_max_running_requests,
        notes=list(last.notes),
    )


@dataclass
class FlushReport:
    """What a flush did, for the terminal summary (syrupy-style counts)."""

    created: list[EntryKey] = field(default_factory=list)
    updated: list[EntryKey] = field(default_factory=list)
    deleted: list[EntryKey] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)

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
        self, directory: str | os.PathLike[str], *, lock_timeout: float = LOCK_TIMEOUT_S
    ) -> None:
        self.directory = Path(directory)
        self.lock_timeout = lock_timeout
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
            self._files[k] = load_baseline_file(p) if p.exists() else None
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
            self._files[(hw, cfg)] = write_baseline_file(
                path,
                hw,
                cfg,
                {(k.workload, k.concurrency): e for k, e in updates.items()},
                deletions=[(k.workload, k.concurrency) for k in dels],
                provenance=self._provenance.get((hw, cfg)),
                lock_timeout=self.lock_timeout,
            )
            report.deleted.extend(dels)
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
