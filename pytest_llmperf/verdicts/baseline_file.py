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
    field_validator,
    model_validator,
)

from pytest_llmperf.base.atomic import atomic_write_text
from pytest_llmperf.base.datafile import load_model_file
from pytest_llmperf.base.errors import LLMPerfError
from pytest_llmperf.base.metric_defs import METRICS, Direction
from pytest_llmperf.base.version import __version__

__all__ = [
    "LOCK_TIMEOUT_S",
    "MAX_RAW_SAMPLES",
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

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:+@=-]*$")
_FIX_HINT = "re-record it with --llmperf-update (or `git checkout` the file)"


class BaselineFileError(LLMPerfError):
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


class LaunchResidual(_Model):
    """A level's residual after its launch's speed is removed (``launch_adjust``): mean and
    spread over the baseline's launches, each of which measured the whole sweep."""

    mean: float
    sd: float | None = Field(default=None, ge=0.0)
    n: int = Field(default=1, ge=1)


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
    # standard error of the mean (issue 9).
    launches: int | None = Field(default=None, ge=1)
    within_se: float | None = Field(default=None, ge=0.0)
    # Recorded with adjust = "launch" (issue 9): this level's launch residual.
    launch_residual: LaunchResidual | None = None

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


def load_baseline_file(path: str | os.PathLike[str]) -> BaselineFile:
    """Parse and validate one file; any problem is a ``BaselineFileError`` meant for people."""
    return load_model_file(path, BaselineFile, "baseline file", _FIX_HINT, BaselineFileError)


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
