"""``llmperf_slo``: the largest swept C whose level meets the suite's ``[slo]``, held to its
baseline."""

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
from pytest_llmperf.plugin.session import usage_error
from pytest_llmperf.run import sweep_checks
from pytest_llmperf.verdicts.baseline import SWEEP_LEVEL

if TYPE_CHECKING:
    from pytest_llmperf.run.perfrun import PerfRun
    from pytest_llmperf.run.suite import Suite


@dataclass(frozen=True)
class SloParam:
    config: str
    suite_path: Path


class SloKind(KindDefaults):
    name = "slo"
    fixture = "llmperf_slo"
    order = 3
    payload = ("sweep_checks",)

    def parametrize(self, c: Collect) -> Parametrization:
        if c.suite.slo is None:
            raise usage_error(
                f"{c.where} uses {self.fixture}, but {c.suite.path} has no [slo] "
                "section (e.g. [slo] p99_ttft_ms = 2000, p99_tpot_ms = 80)"
            )
        params = [SloParam(cfg, c.suite_path) for cfg in c.configs]
        return Parametrization(params, [p.config for p in params], "no config to check")

    def baselines(self, suite: Suite, param: Any) -> list[Entry] | None:
        return [Entry(param.config, SWEEP_LEVEL, select=False)]


KIND = SloKind()


class SloCheck(SweepAsserts, sweep_checks.SloCheck):
    """The largest swept C within the suite's SLO: ``.check()``, ``.measure()``."""


@pytest.fixture
def llmperf_slo(request: pytest.FixtureRequest, llmperf_run: PerfRun) -> SloCheck:
    """The largest swept C whose level meets the suite's [slo], held to its baseline."""
    param: SloParam = request.param
    _, suite, _ = settings_for(request)
    kwargs = sweep_check_kwargs(request, llmperf_run)
    return SloCheck(config_name=param.config, slo=suite.slo, **kwargs)
