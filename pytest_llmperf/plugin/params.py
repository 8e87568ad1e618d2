"""What each parametrized perf test stands for, and the test ids pytest shows for it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

POINT_FIXTURE = "llmperf_point"
GATE_FIXTURE = "llmperf_gate"
CROSSOVER_FIXTURE = "llmperf_crossover"
SLO_FIXTURE = "llmperf_slo"
AB_FIXTURE = "llmperf_ab"  # ab
PERF_FIXTURES = (POINT_FIXTURE, GATE_FIXTURE, CROSSOVER_FIXTURE, SLO_FIXTURE, AB_FIXTURE)


@dataclass(frozen=True)
class PointParam:
    config: str
    concurrency: int
    suite_path: Path


@dataclass(frozen=True)
class GateParam:
    gate_index: int
    concurrency: int
    suite_path: Path


@dataclass(frozen=True)
class CrossoverParam:
    index: int
    suite_path: Path


@dataclass(frozen=True)
class SloParam:
    config: str
    suite_path: Path


@dataclass(frozen=True)
class ABParam:  # ab: one [[compare]] entry at one level
    index: int
    concurrency: int
    suite_path: Path


Param = PointParam | GateParam | CrossoverParam | SloParam | ABParam
KIND_ORDER: dict[type, int] = {
    PointParam: 0,
    GateParam: 1,
    CrossoverParam: 2,
    SloParam: 3,
    ABParam: 4,  # ab: last, so the A/B relaunches do not interleave with a config's points
}


def gate_id(gate: Any) -> str:
    return str(gate.name) if gate.name else f"{gate.config}-vs-{gate.reference}"


def item_param(item: Any) -> Param | None:
    """The perf parameter of a collected test, or None for any other test."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    for name in PERF_FIXTURES:
        if name in callspec.params:
            param = callspec.params[name]
            # a skipped placeholder (nothing to parametrize over) stands for no perf test
            return param if isinstance(param, Param) else None
    return None


def marker_kwargs(node: Any) -> dict[str, Any]:
    """All ``llmperf`` markers merged, the closest one winning (as pytest-httpx does)."""
    merged: dict[str, Any] = {}
    for mark in node.iter_markers("llmperf"):
        merged = {**mark.kwargs, **merged}
    return merged


def parametrize(
    metafunc: pytest.Metafunc, fixture: str, params: list[Any], ids: list[str], empty: str
) -> None:
    """Parametrize a perf fixture; with nothing to parametrize over, one skipped test that
    says why (pytest's own empty-set item carries no parameter the plugin could read)."""
    if params:
        metafunc.parametrize(fixture, params, ids=ids, indirect=True)
        return
    skipped = pytest.param(None, marks=pytest.mark.skip(reason=f"{fixture}: {empty}"))
    metafunc.parametrize(fixture, [skipped], ids=["none"], indirect=True)
