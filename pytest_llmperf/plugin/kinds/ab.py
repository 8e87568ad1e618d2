"""``llmperf_ab``: one ``[[ab]]`` at one level, candidate vs reference over paired,
interleaved rounds (``run/ab.py``); its results go to ``ab.json`` and its own table.

The rounds of one A/B are measured once and shared by the tests of its levels (a cache in
``config.stash``); the points it judged are this kind's ``kind_results``.
"""

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
    Report,
    properties,
    settings_for,
)
from pytest_llmperf.plugin.session import LLMPerfSession, usage_error
from pytest_llmperf.report.ab_table import (
    AB_FILE_NAME,
    ABPoint,
    ab_markdown,
    ab_table,
    green_lines,
    save_ab,
)
from pytest_llmperf.run import ab
from pytest_llmperf.run.ab import ABRun, round_order
from pytest_llmperf.run.passes import AUTO, recorded_ratio

if TYPE_CHECKING:
    from pytest_llmperf.base.results import Workload
    from pytest_llmperf.run.perfrun import PerfRun
    from pytest_llmperf.run.suite import Suite
    from pytest_llmperf.verdicts.validity import ValidityPolicy


@dataclass(frozen=True)
class ABParam:
    """One ``[[ab]]`` entry at one level."""

    index: int
    concurrency: int
    suite_path: Path


class ABKind(KindDefaults):
    name = "ab"
    fixture = "llmperf_ab"
    order = 4  # last, so the A/B relaunches do not interleave with a config's points

    def parametrize(self, c: Collect) -> Parametrization:
        specs = c.suite.ab
        if not specs:
            raise usage_error(
                f"{c.where} uses {self.fixture}, but {c.suite.path} has no [[ab]] entry "
                '(e.g. [[ab]] candidate = "new"  reference = "old"  rounds = 4)'
            )
        params = [
            ABParam(i, lv, c.suite_path)
            for i, cmp in enumerate(specs)
            for lv in (cmp.levels or c.levels)
        ]
        ids = [f"{specs[p.index].label}-C{p.concurrency}" for p in params]
        return Parametrization(params, ids, "no [[ab]] level to measure")

    def configs(self, suite: Suite, param: Any) -> tuple[str, ...]:
        a = suite.ab[param.index]
        return (a.reference, a.candidate)

    def counted(self, suite: Suite, param: Any) -> tuple[str, ...]:
        return ()

    def baselines(self, suite: Suite, param: Any) -> None:
        return None  # an A/B judges two configs measured now, never a stored baseline

    def summary_lines(self, llm: LLMPerfSession) -> list[str]:
        points = points_of(llm)
        if not points:
            return []
        lines = ["", *ab_table(points).splitlines()]
        lines += [f"A/B {p.verdict}: {p.message}" for p in points]
        green = green_lines(points)
        lines += ["what green means (A/B):", *green] if green else []
        judged = {p.ab: p.accuracy for p in points if p.accuracy is not None}
        lines += [f"A/B {ab} accuracy {a.verdict}: {a.message}" for ab, a in judged.items()]
        lines.append(f"A/B results: {llm.output_dir / AB_FILE_NAME}")
        return lines

    def markdown(self, llm: LLMPerfSession) -> str | None:
        points = points_of(llm)
        return ab_markdown(points) if points else None

    def reports(self, llm: LLMPerfSession) -> list[Report]:
        points, out = points_of(llm), llm.output_dir
        if not points:
            return []
        return [(f"A/B report in {out}", lambda: save_ab(points, out / AB_FILE_NAME))]


KIND = ABKind()
_RUNS = pytest.StashKey[dict[tuple[Path, int, "Workload", tuple[int, ...]], ABRun]]()


def points_of(llm: LLMPerfSession) -> list[ABPoint]:
    return llm.kind_results.setdefault(KIND.name, [])


def ab_run(
    request: pytest.FixtureRequest,
    llm: LLMPerfSession,
    param: ABParam,
    workload: Workload,
    levels: tuple[int, ...],
    policy: ValidityPolicy | None = None,
    marker: dict[str, Any] | None = None,
) -> ABRun:
    """The A/B rounds of one ``[[ab]]``, shared by the tests of its levels (the first test's
    settings decide how they run: ``sequential``, ``launch_budget``, ``time_budget``)."""
    runs = request.config.stash.setdefault(_RUNS, {})
    suite = llm.suites[param.suite_path]
    spec = suite.ab[param.index]
    levels = tuple(spec.levels or levels)
    key = (param.suite_path, param.index, workload, levels)
    if key not in runs:
        where = request.node.nodeid
        marker = marker or {}
        ratio = None
        if spec.passes == AUTO:  # at the ratio the first side's entries recorded
            first = round_order(spec, 0)[0]
            ratio = recorded_ratio(llm.store, llm.perf_run(suite).hardware_for(first), first,
                                   workload.key(), levels)  # fmt: skip
        runs[key] = ABRun(
            spec, levels, workload, llm.perf_run(suite), policy=policy,
            accuracy_items=llm.effective(suite, {}, "accuracy_items", where),
            accuracy_drop=llm.effective(suite, {}, "accuracy_drop", where),
            sequential=llm.effective(suite, marker, "sequential", where),
            launch_budget=llm.effective(suite, marker, "launch_budget", where),
            time_budget=llm.effective(suite, marker, "time_budget", where),
            ratio=ratio,
        )  # fmt: skip
    return runs[key]


class ABCheck(ComparisonAsserts[ABPoint], ab.ABCheck):
    """One ``[[ab]]`` at one level: ``.check()``, ``.evaluate()``."""


@pytest.fixture
def llmperf_ab(request: pytest.FixtureRequest, llmperf_run: PerfRun) -> ABCheck:
    """One ``[[ab]]`` at one level: candidate vs reference over paired, interleaved rounds."""
    param: ABParam = request.param
    llm, suite, marker = settings_for(request)
    where = request.node.nodeid
    spec = suite.ab[param.index]
    levels = llm.effective(suite, marker, "levels", where)
    workload = llm.workload(suite, marker, where, spec.reference)
    return ABCheck(
        ab=ab_run(
            request, llm, param, workload, levels, llm.validity_policy(suite, marker, where), marker
        ),  # fmt: skip
        concurrency=param.concurrency,
        invalid_policy=llm.settings["invalid"],
        on_result=points_of(llm).append,
        on_invalid=llm.invalid.append,
        on_properties=properties(request),
    )
