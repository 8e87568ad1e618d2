"""``llmperf_gate``: one cross-config gate (``[[gate]]``) at one concurrency."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_llmperf.plugin.checks import ComparisonAsserts
from pytest_llmperf.plugin.kinds.base import (
    Collect,
    KindDefaults,
    Parametrization,
    properties,
    settings_for,
)
from pytest_llmperf.run import checks

if TYPE_CHECKING:
    from pytest_llmperf.run.perfrun import PerfRun
    from pytest_llmperf.run.suite import Suite


@dataclass(frozen=True)
class GateParam:
    gate_index: int
    concurrency: int
    suite_path: Path


def gate_id(gate: Any) -> str:
    return str(gate.name) if gate.name else f"{gate.config}-vs-{gate.reference}"


class GateKind(KindDefaults):
    name = "gate"
    fixture = "llmperf_gate"
    order = 1
    payload = ("gates",)

    def parametrize(self, c: Collect) -> Parametrization:
        wanted = c.marker.get("gates")
        gates = c.suite.gates
        params = [
            GateParam(i, lv, c.suite_path)
            for i, gate in enumerate(gates)
            if not wanted or gate_id(gate) in wanted
            for lv in c.levels
            if gate.applies(lv)
        ]
        ids = [f"{gate_id(gates[p.gate_index])}-C{p.concurrency}" for p in params]
        empty = f"{c.suite.path} declares no [[gate]] that applies to levels {list(c.levels)}"
        return Parametrization(
            params, ids, empty + (f" and is named in gates={wanted}" if wanted else "")
        )

    def configs(self, suite: Suite, param: Any) -> tuple[str, ...]:
        g = suite.gates[param.gate_index]
        return (g.config, g.reference)

    def counted(self, suite: Suite, param: Any) -> tuple[str, ...]:
        return ()  # a gate compares no stored entry: it says nothing of what is unused


KIND = GateKind()


class GateCheck(ComparisonAsserts[checks.GateResult], checks.GateCheck):
    """One cross-config gate at one concurrency: ``.check()``, ``.evaluate()``."""


@pytest.fixture
def llmperf_gate(request: pytest.FixtureRequest, llmperf_run: PerfRun) -> GateCheck:
    """One cross-config gate at one concurrency, e.g. mtp ≥ 1.1 × plain at C=4."""
    param: GateParam = request.param
    llm, suite, marker = settings_for(request)
    gate = suite.gates[param.gate_index]
    return GateCheck(
        gate=gate,
        concurrency=param.concurrency,
        workload=llm.workload(suite, marker, request.node.nodeid, gate.config),
        run=llmperf_run,
        on_properties=properties(request),
        on_result=llm.gates.append,
        invalid_policy=llm.settings["invalid"],
        policy=llm.validity_policy(suite, marker, request.node.nodeid),
        adjust=llm.effective(suite, marker, "adjust", request.node.nodeid),
        levels=llm.effective(suite, marker, "levels", request.node.nodeid),
        store=llm.store,
        nodeid=request.node.nodeid,
        on_judgement=llm.checks.append,
        on_busy=llm.busy.append,
        max_reruns=llm.effective(suite, marker, "max_reruns", request.node.nodeid),
    )
