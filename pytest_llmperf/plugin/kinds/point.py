"""``llmperf_point``: one (config, concurrency) point held to its stored baseline."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_llmperf.base.errors import InputError
from pytest_llmperf.plugin.checks import call, enact, policy
from pytest_llmperf.plugin.kinds.base import (
    Collect,
    Entry,
    KindDefaults,
    Parametrization,
    properties,
    settings_for,
)
from pytest_llmperf.plugin.options import record_command
from pytest_llmperf.plugin.session import usage_error
from pytest_llmperf.run import checks
from pytest_llmperf.run.history_checks import history_judge

if TYPE_CHECKING:
    from pytest_llmperf.run.perfrun import PerfRun
    from pytest_llmperf.run.suite import Suite
    from pytest_llmperf.verdicts.compare import PointComparison


@dataclass(frozen=True)
class PointParam:
    config: str
    concurrency: int
    suite_path: Path


class PointKind(KindDefaults):
    name = "point"
    fixture = "llmperf_point"
    order = 0
    payload = ("points",)

    def parametrize(self, c: Collect) -> Parametrization:
        params = [PointParam(cfg, lv, c.suite_path) for cfg in c.configs for lv in c.levels]
        ids = [f"{p.config}-C{p.concurrency}" for p in params]
        return Parametrization(params, ids, "no config x level to measure")

    def baselines(self, suite: Suite, param: Any) -> list[Entry] | None:
        return [Entry(param.config, param.concurrency, select=True)]


KIND = PointKind()


class PointCheck(checks.PointCheck):
    """One (config, concurrency) point: ``.check()``, ``.evaluate()``, ``.result``, ``.samples``."""

    def measure(self) -> None:
        __tracebackhide__ = True
        call(super().measure)

    def evaluate(self) -> PointComparison:
        """The comparison with the baseline, without asserting."""
        __tracebackhide__ = True
        return call(super().evaluate)

    compare = evaluate  # the older name, kept as an alias

    def check(self) -> None:
        """Fail when a gated metric regressed beyond tolerance and beyond noise."""
        __tracebackhide__ = True
        enact(call(self.judge), policy(self))

    assert_baseline = check  # the older name, kept as an alias


@pytest.fixture
def llmperf_point(request: pytest.FixtureRequest, llmperf_run: PerfRun) -> PointCheck:
    """One (config, concurrency) point, measured once per session however many tests use it."""
    param: PointParam = request.param
    llm, suite, marker = settings_for(request)
    where = request.node.nodeid

    def get(name: str) -> Any:
        return llm.effective(suite, marker, name, where)

    try:
        point = PointCheck(
            config=param.config,
            concurrency=param.concurrency,
            workload=llm.workload(suite, marker, where, param.config),
            run=llmperf_run,
            store=llm.store,
            repeat=get("repeat"),
            max_reruns=get("max_reruns"),
            baseline_repeat=get("baseline_repeat"),
            baseline_passes=get("baseline_passes"),
            metrics=get("metrics"),
            tolerances=get("tolerance"),
            update=bool(llm.settings["update"]),
            rerecord=bool(llm.settings["rerecord"]),
            adjust=get("adjust"),
            levels=get("levels"),
            accuracy_items=get("accuracy_items"),
            accuracy_drop=get("accuracy_drop"),
            sequential=get("sequential"),
            launch_budget=get("launch_budget"),
            time_budget=get("time_budget"),
            invalid_policy=llm.settings["invalid"],
            policy=llm.validity_policy(suite, marker, where),
            nodeid=where,
            record_command=record_command(request.config, where),
            on_properties=properties(request),
            on_compared=lambda pc: llm.points.setdefault(pc.config, []).append(pc),
            on_invalid=llm.invalid.append,
            on_judgement=llm.checks.append,
            on_busy=llm.busy.append,
            history=history_judge(
                get("judge_against"),
                llm.settings.get("history"),
                get("history_window"),
                llm.rootdir,
            ),
        )
    except InputError as exc:  # a SettingError, or judge_against = history without history
        raise usage_error(str(exc)) from None
    point.measure()
    return point
