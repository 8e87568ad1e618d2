"""What the history store keeps and gives back, as frozen plain values.

A run is one session (a pytest run or an ``llmperf sweep``): its provenance, every point it
measured with all samples of every metric, and the verdicts of its gates and A/B points. The
store never sees live objects; ``from_results`` builds a ``RunRecord`` from the sweeps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pytest_llmperf.verdicts.drift import RunPoint

Source = Literal["pytest", "sweep"]
# What a check row is: a gate between configs, an A/B point, a whole-sweep check (crossover,
# SLO). A point's own verdict lives on its point row.
CheckKind = Literal["gate", "ab", "sweep"]


@dataclass(frozen=True)
class PointKey:
    """One measured point across runs: the same config, workload, C and hardware."""

    config: str
    workload_key: str
    concurrency: int
    hardware_key: str


@dataclass(frozen=True)
class PointRecord:
    """One (config, workload, C) point of a run: every sample of every metric, and the value
    the point stands for (the judged one where it was judged, else the median of its samples).
    """

    config: str
    workload_key: str
    concurrency: int
    hardware_key: str
    verdict: str | None  # a ``Verdict`` value; None where nothing judged the point
    valid: bool
    metrics: Mapping[str, float] = field(default_factory=dict)
    samples: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    invalid_reasons: tuple[str, ...] = ()

    @property
    def key(self) -> PointKey:
        return PointKey(self.config, self.workload_key, self.concurrency, self.hardware_key)


@dataclass(frozen=True)
class CheckRecord:
    """A gate's, an A/B point's or a whole-sweep check's verdict and its sentence."""

    kind: CheckKind
    name: str
    verdict: str  # a ``Verdict`` value
    sentence: str = ""


@dataclass(frozen=True)
class RunRecord:
    """One session's results as the store appends them (once: ``uuid`` makes a retry a
    no-op). ``provenance`` holds the rest (server args by config, already redacted)."""

    uuid: str
    started_at: datetime
    finished_at: datetime
    source: Source
    hardware_key: str
    git_commit: str | None = None
    plugin_version: str = ""
    sglang_version: str | None = None
    points: tuple[PointRecord, ...] = ()
    checks: tuple[CheckRecord, ...] = ()
    provenance: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunRow:
    """A stored run as ``HistoryStore.runs`` lists it (newest first)."""

    id: int
    uuid: str
    started_at: datetime
    finished_at: datetime
    source: str
    hardware_key: str
    git_commit: str | None
    plugin_version: str
    sglang_version: str | None
    points: int
    checks: int
    provenance: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SeriesPoint:
    """One run's value of one metric at one ``PointKey`` (``HistoryStore.series``)."""

    run_id: int
    started_at: datetime
    git_commit: str | None
    value: float
    samples: tuple[float, ...]
    verdict: str | None


def run_points(series: Sequence[SeriesPoint]) -> list[RunPoint]:
    """A stored series as the drift rule reads it: each run named by its id and commit."""
    return [
        RunPoint(f"run #{p.run_id}", p.value, commit=p.git_commit, samples=p.samples)
        for p in series
    ]
