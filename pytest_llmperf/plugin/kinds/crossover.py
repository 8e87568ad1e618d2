"""``llmperf_crossover``: the largest C where a config still beats its reference
(``[[crossover]]``), held to its baseline."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_llmperf.plugin.checks import SweepAsserts
from pytest_llmperf.plugin.kinds.base import (
    Collect,
    Entry,
    KindDefaults,
    Parametrization,
    settings_for,
    sweep_check_kwargs,
)
from pytest_llmperf.run import sweep_checks
from pytest_llmperf.verdicts.baseline import SWEEP_LEVEL

if TYPE_CHECKING:
    from pytest_llmperf.run.perfrun import PerfRun
    from pytest_llmperf.run.suite import Suite


@dataclass(frozen=True)
class CrossoverParam:
    index: int
    suite_path: Path


class CrossoverKind(KindDefaults):
    name = "crossover"
    fixture = "llmperf_crossover"
    order = 2
    payload = ("sweep_checks",)

    def parametrize(self, c: Collect) -> Parametrization:
        params = [CrossoverParam(i, c.suite_path) for i in range(len(c.suite.crossovers))]
        ids = [c.suite.crossovers[p.index].label for p in params]
        return Parametrization(params, ids, f"{c.suite.path} has no [[crossover]] entry")

    def configs(self, suite: Suite, param: Any) -> tuple[str, ...]:
        cross = suite.crossovers[param.index]
        return (cross.config, cross.reference)

    def baselines(self, suite: Suite, param: Any) -> list[Entry] | None:
        return [Entry(self.configs(suite, param)[0], SWEEP_LEVEL, select=False)]


KIND = CrossoverKind()


class CrossoverCheck(SweepAsserts, sweep_checks.CrossoverCheck):
    """The largest C where a config still beats its reference: ``.check()``, ``.measure()``."""


@pytest.fixture
def llmperf_crossover(request: pytest.FixtureRequest, llmperf_run: PerfRun) -> CrossoverCheck:
    """The largest C where a config still beats its reference, held to its baseline."""
    param: CrossoverParam = request.param
    kwargs = sweep_check_kwargs(request, llmperf_run)
    llm, suite, marker = settings_for(request)
    max_reruns = llm.effective(suite, marker, "max_reruns", request.node.nodeid)
    return CrossoverCheck(
        spec=suite.crossovers[param.index],
        max_reruns=max_reruns,
        on_judgement=llm.checks.append,
        **kwargs,
    )
