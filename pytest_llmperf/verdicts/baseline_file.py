"""Baseline files on disk: their pydantic models and locked, atomic read-modify-write.

One JSON file per (hardware key, server config): ``<dir>/<hardware>/<config>.json``. Inside,
entries are keyed by workload key and concurrency. Concurrency ``0`` (``SWEEP_LEVEL``) holds
sweep-level metrics such as ``crossover_concurrency``.

Every write is a read-modify-write under a ``filelock.FileLock`` on a sidecar ``.lock`` file
followed by an atomic replace (``base.atomic``), so concurrent writers lose nothing and a
reader never sees a half-written file. The run-time buffering lives in ``baseline.py``.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping
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
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from pytest_llmperf.base.atomic import atomic_write_text
from pytest_llmperf.base.datafile import load_model_file
from pytest_llmperf.base.errors import LLMPerfError
from pytest_llmperf.base.gpu_stats import GpuTelemetry
from pytest_llmperf.base.metric_defs import METRICS, Direction
from pytest_llmperf.base.probes import ProbeSet
from pytest_llmperf.base.version import __version__
from pytest_llmperf.verdicts.accuracy import AccuracyRecord

__all__ = [
    "LOCK_TIMEOUT_S",
    "MAX_RAW_SAMPLES",
    "SCHEMA_VERSION",
    "SWEEP_LEVEL",
    "BaselineEntry",
    "BaselineFile",
    "BaselineFileError",
    "EntryKey",
    "LaunchResidual",
    "MetricSummary",
    "Provenance",
    "baseline_path",
    "check_name",
    "load_baseline_file",
    "write_baseline_file",
]

# Concurrency key of sweep-level entries (crossover_concurrency, max_concurrency_within_slo).
SWEEP_LEVEL = 0
# Raw samples are kept for small n so a Mann-Whitney test is possible later; beyond this,
# mean/std/n carry the information and the file stays reviewable.
MAX_RAW_SAMPLES = 20
LOCK_TIMEOUT_S = 60.0
SCHEMA_VERSION: Literal[2] = 2
# Rates every served point has above 0 (a 0 or negative mean is a broken file).
_SERVED_RATES = frozenset({"output_throughput"})

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:+@=-]*$")
# --llmperf-update replaces a file that does not parse (and says so): write_baseline_file.
_FIX_HINT = (
    "fix it, `git checkout` it, or re-record it with --llmperf-update (which replaces the "
    "whole file with that session's entries)"
)


class BaselineFileError(LLMPerfError):
    """A baseline file is unreadable or invalid; the message names path, field, reason, fix.

    ``replaceable``: ``--llmperf-update`` may replace the file (it does not parse); a file
    that parses but belongs elsewhere, or a directory that cannot be written, is not."""

    def __init__(self, message: str, *, replaceable: bool = True) -> None:
        super().__init__(message)
        self.replaceable = replaceable


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


class LaunchResidual(_Model):
    """A level's residual after its launch's speed is removed (``launch_adjust``): mean and
    spread over the baseline's launches, each of which measured the whole sweep."""

    mean: float
    sd: float | None = Field(default=None, ge=0.0)  # of the launch means
    n: int = Field(default=1, ge=1)  # launches
    # With more than one pass of the sweep a launch: the passes' spread about their launch's
    # mean, its degrees of freedom, and the passes each launch measured (the fewest).
    within_sd: float | None = Field(default=None, ge=0.0)
    within_dof: int = Field(default=0, ge=0)
    passes: int = Field(default=1, ge=1)

    @model_serializer(mode="wrap")
    def _one_pass_as_before(self, handler: SerializerFunctionWrapHandler) -> Any:
        """A one-pass entry is written as it always was (no pass fields)."""
        data = handler(self)
        if isinstance(data, dict) and self.within_sd is None:
            for name in ("within_sd", "within_dof", "passes"):
                data.pop(name, None)
        return data


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
    # Distinct server launches the samples came from (None: unknown, each sample counted as
    # one); ``std`` is then the spread of launch means. ``within_se``: within-run relative
    # standard error of the mean.
    launches: int | None = Field(default=None, ge=1)
    within_se: float | None = Field(default=None, ge=0.0)
    # Recorded with adjust = "launch": this level's launch residual.
    launch_residual: LaunchResidual | None = None

    @field_validator("mean", "std")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("must be a finite number")
        return v

    @field_validator("samples")
    @classmethod
    def _finite_samples(cls, v: list[float] | None) -> list[float] | None:
        for i, x in enumerate(v or []):
            if not math.isfinite(x):
                raise ValueError(f"samples[{i}] is {x}; every sample must be a finite number")
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
    # Samples measured for this entry but left out as invalid (validity.check_level, the
    # policy judging applies): the entry rests on ``n`` valid ones.
    invalid_left_out: NonNegativeInt = 0
    # What the GPUs did while the first valid sample was measured (NVML; absent: no telemetry).
    gpu: GpuTelemetry | None = None
    # The accuracy probe's answers when recorded (``accuracy_items``): the items it was
    # judged on and which were right, so a later run is paired item by item. Left out of the
    # file when absent, so entries recorded without the probe read as they always did.
    accuracy: AccuracyRecord | None = None
    # The consistency probes' greedy answers, one set per recording launch that answered them
    # (``verdicts/consistency.py``): a later run's answers are judged against them, with the
    # A/A between these launches. Left out of the file when absent, like ``accuracy``.
    probes: list[ProbeSet] | None = None

    @property
    def passes(self) -> int:
        """Passes of the sweep each recording launch measured (``baseline_passes``)."""
        got = [m.launch_residual.passes for m in self.metrics.values() if m.launch_residual]
        return max(got, default=1)

    @model_serializer(mode="wrap")
    def _without_absent_probes(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            for name in ("accuracy", "probes"):
                if name in data and data[name] is None:
                    del data[name]
        return data

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
            if name in _SERVED_RATES and summary.mean <= 0:
                raise ValueError(
                    f"metric {name!r} has mean {summary.mean:g} {d.unit}; a recorded rate "
                    "must be above 0 (nothing was served at this point)"
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

    # 2 added ``invalid_left_out``; version-1 files load unchanged (it defaults to 0).
    schema_version: Literal[1, 2] = SCHEMA_VERSION
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


def _duplicate_keys(path: Path) -> str | None:
    """The first key written twice in one JSON object (a bad merge: the last would win)."""
    found: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: set[str] = set()
        for k, _ in items:
            if k in seen and not found:
                found.append(k)
            seen.add(k)
        return dict(items)

    try:
        json.loads(path.read_bytes(), object_pairs_hook=pairs)
    except (OSError, ValueError):
        return None  # load_model_file names what is wrong with it
    return found[0] if found else None


def load_baseline_file(
    path: str | os.PathLike[str], *, hardware: str | None = None, config: str | None = None
) -> BaselineFile:
    """Parse and validate one file; any problem is a ``BaselineFileError`` meant for people.
    With ``hardware``/``config``, the file must say the same as its place in the directory."""
    p = Path(path)
    dup = _duplicate_keys(p)
    if dup is not None:
        raise BaselineFileError(
            f"{p}: baseline file is invalid: key {dup!r} appears twice in one object (a bad "
            f"merge?); keep one of them; {_FIX_HINT}"
        )
    f = load_model_file(p, BaselineFile, "baseline file", _FIX_HINT, BaselineFileError)
    for field_name, want in (("hardware", hardware), ("config", config)):
        got = getattr(f, field_name)
        if want is not None and got != want:
            raise BaselineFileError(
                f"{p}: baseline file is invalid: field {field_name!r} is {got!r} but the file "
                f"lies where {field_name} {want!r} is kept; move the file to its own directory "
                "or delete it (--llmperf-update will not overwrite another key's file)",
                replaceable=False,
            )
    return f


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


def _lock_for(path: Path, timeout: float) -> FileLock:
    path.parent.mkdir(parents=True, exist_ok=True)
    # is_singleton: two stores in one process must not trip filelock's deadlock detector.
    return FileLock(str(path) + ".lock", timeout=timeout, is_singleton=True)


def _unwritable(path: Path, exc: OSError) -> BaselineFileError:
    why = exc.strerror or str(exc)
    where = exc.filename or path
    return BaselineFileError(
        f"{path}: cannot write the baseline file: {why} ({where}); the file on disk is "
        "unchanged. Point --llmperf-baseline-dir at a writable directory (or free space) and "
        "re-run with --llmperf-update",
        replaceable=False,
    )


def write_baseline_file(
    path: str | os.PathLike[str],
    hardware: str,
    config: str,
    updates: Mapping[tuple[str, int], BaselineEntry],
    *,
    deletions: Iterable[tuple[str, int]] = (),
    provenance: Provenance | None = None,
    lock_timeout: float = LOCK_TIMEOUT_S,
    deletable_before: datetime | None = None,
) -> BaselineFile:
    """Merge ``updates``/``deletions`` into whatever is on disk *now*, under the lock.

    A file on disk that no longer parses is replaced (this runs only on an explicit update,
    which is the documented fix for a broken file). A symlinked file stays a symlink: its
    target is written (atomically) and locked. ``deletions`` remove only entries recorded
    before ``deletable_before`` (when given): an entry another session wrote meanwhile stays.
    Every ``OSError`` (a file in place of the directory, no permission, a full disk) is a
    ``BaselineFileError`` naming the path; the old file stays as it was.
    """
    p = Path(path)
    try:
        p = p.resolve() if p.is_symlink() else p
        lock = _lock_for(p, lock_timeout)
    except OSError as exc:
        raise _unwritable(Path(path), exc) from None
    try:
        with lock:
            current: BaselineFile | None = None
            if p.exists():
                try:
                    current = load_baseline_file(p)
                except BaselineFileError as exc:
                    if not exc.replaceable:
                        raise
                    current = None
            if current is None:
                current = BaselineFile(hardware=hardware, config=config)
            if (current.hardware, current.config) != (hardware, config):
                raise BaselineFileError(
                    f"{p}: holds hardware={current.hardware!r} config={current.config!r}, "
                    f"expected {hardware!r}/{config!r}; move or delete the file",
                    replaceable=False,
                )
            for wl, c in deletions:
                levels = current.workloads.get(wl)
                old = levels.get(c) if levels is not None else None
                if levels is None or old is None:
                    continue
                if deletable_before is not None and old.recorded_at >= deletable_before:
                    continue  # recorded while this session ran: another writer's
                del levels[c]
                if not levels:
                    del current.workloads[wl]
            for (wl, c), entry in updates.items():
                current.workloads.setdefault(wl, {})[c] = entry
            if provenance is not None and updates:
                current.provenance = provenance
            current.schema_version = SCHEMA_VERSION
            if not current.workloads:
                if p.exists():
                    p.unlink()
                return current
            atomic_write_text(p, _dump(current))
            return current
    except LockTimeout:  # before OSError: filelock's Timeout is a TimeoutError
        raise BaselineFileError(
            f"{p}: could not lock {lock.lock_file} within {lock_timeout:g} s; another "
            "process is writing baselines (or left a lock on a network filesystem)",
            replaceable=False,
        ) from None
    except OSError as exc:
        raise _unwritable(p, exc) from None
