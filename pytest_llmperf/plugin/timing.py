"""The session's time to a verdict: the header's prediction, the summary's actuals.

The prediction is made once, before the first launch (``run/plan_time.plan`` over the baselines'
recorded start-up times and throughputs and the settings that bound launches); the actuals are
what each ``PerfRun`` spent (shipped from xdist workers), printed against the prediction and
kept in results.json (``took``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from pydantic import BaseModel, ConfigDict

from pytest_llmperf.plugin.kinds import item_kind
from pytest_llmperf.run.ab import round_order
from pytest_llmperf.run.ab_rounds import round_budget
from pytest_llmperf.run.plan_time import ab_plan, launch_budget, plan, planned_launches
from pytest_llmperf.verdicts.launch_adjust import MIN_LEVELS

if TYPE_CHECKING:
    from pytest_llmperf.base.results import Workload
    from pytest_llmperf.plugin.session import LLMPerfSession
    from pytest_llmperf.report.judgement import Took
    from pytest_llmperf.run.perfrun import PerfRun
    from pytest_llmperf.run.suite import Suite

_WHERE = "the command line, environment, ini or [sweep]"


def plan_lines(
    llm: LLMPerfSession,
    suite: Suite,
    run: PerfRun,
    levels: Any,
    workload: Workload,
    selected: Selected | None = None,
) -> list[str]:
    """``llmperf: plan: 2 servers × 1-9 launches, about 1.2-6.5 min (...)``.

    Said in the header, before collection, for every server and ``[[ab]]`` of the suite;
    ``selected``: only the configs whose sweeps and the ``[[ab]]`` labels the collected tests
    measure (``replan``)."""
    llm.plan_from = (suite, run, levels, workload)

    def get(name: str) -> Any:
        return llm.effective(suite, {}, name, _WHERE)

    update = bool(llm.settings["update"])
    samples = max(get("repeat"), get("baseline_repeat")) if update else get("repeat")

    # The sequential rule (not when recording): a first launch measures every level, and each
    # further look is one launch measuring the points still undecided, up to launch_budget.
    sequential = bool(get("sequential")) and not update
    looks = planned_launches(get("launch_budget"), get("time_budget"), None)
    reruns = looks - 1 if sequential else get("max_reruns")

    def budget(n_levels: int) -> tuple[int, int]:
        if sequential:
            return 1, looks
        lo, hi = launch_budget(
            n_levels,
            repeat=get("repeat"),
            max_reruns=get("max_reruns"),
            update=update,
            baseline_repeat=get("baseline_repeat"),
            adjust=get("adjust"),
        )
        # a recording that adjusts adds launches while its noise is too wide, up to the budget
        grows = update and get("sequential") and get("adjust") != "none" and n_levels >= MIN_LEVELS
        return lo, max(hi, looks) if grows else hi

    key = str(suite.path.resolve()) if suite.path is not None else ""
    configs = []
    for cfg in suite.servers:
        if selected is not None and (key, cfg.name) not in selected.swept:
            continue
        try:
            configs.append(
                (cfg.name, run.hardware_for(cfg.name), run.mode_for(cfg.name) != "attached")
            )
        except Exception:  # the header already said why this server cannot be used
            continue
    # a recording launch that adjusts measures its sweep in baseline_passes passes
    adjusting = get("adjust") in ("launch", "auto")
    record_passes = get("baseline_passes") if update and adjusting else None
    abs_ = []
    for spec in suite.ab:
        if selected is not None and (key, spec.label) not in selected.ab:
            continue
        # as run/ab.py runs them: up to the budget (sequential), else exactly that many
        most = round_budget(spec.rounds, get("sequential"), get("launch_budget"))
        fewest = 2 if get("sequential") else most
        try:
            sides = [(c, run.hardware_for(c)) for c in round_order(spec, 0)]
        except Exception:  # the header already said why this server cannot be used
            continue
        ab_levels = list(spec.levels or levels)
        abs_.append(ab_plan(spec.label, sides, llm.store, workload, ab_levels, (fewest, most),
                            spec.passes, get("time_budget")))  # fmt: skip
    llm.plan = plan(
        configs, llm.store, workload, levels, budget, reruns, samples, record_passes, abs_
    )
    return [f"llmperf: {llm.plan.line()}"]


class Selected(BaseModel):
    """What the collected tests measure: per suite file (resolved), the configs whose sweeps a
    point, gate, crossover or SLO test reads, and the ``[[ab]]`` labels. Also the file an
    xdist worker writes for the controller (``plugin/xdist.py``), which collects nothing."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tests: int
    swept: frozenset[tuple[str, str]]
    ab: frozenset[tuple[str, str]]


def measured_by(llm: LLMPerfSession, items: list[pytest.Item]) -> Selected:
    """What ``items`` measure, as ``Selected``."""
    swept: set[tuple[str, str]] = set()
    ab: set[tuple[str, str]] = set()
    for item in items:
        found = item_kind(item)
        if found is None:
            continue
        kind, param = found
        suite = llm.suites[param.suite_path]
        key = str(param.suite_path)
        if kind.name == "ab":
            ab.add((key, suite.ab[param.index].label))
        else:
            swept.update((key, name) for name in kind.configs(suite, param))
    return Selected(tests=len(items), swept=frozenset(swept), ab=frozenset(ab))


def replan(llm: LLMPerfSession, chosen: Selected) -> list[str]:
    """The header's prediction made again for the collected tests, when they measure less
    than the whole suite (a server only an ``[[ab]]`` uses launches no sweep; ``-k``); no
    line when nothing changed or nothing was collected."""
    if llm.plan_from is None or llm.plan is None or not chosen.tests:
        return []
    suite, run, levels, workload = llm.plan_from
    if suite.path is None:
        return []
    before = llm.plan
    lines = plan_lines(llm, suite, run, levels, workload, chosen)
    if llm.plan == before:
        return []
    n = chosen.tests
    return [line.replace("llmperf: plan:", f"llmperf: plan for the {n} collected test"
                         f"{'s' if n != 1 else ''}:", 1) for line in lines]  # fmt: skip


def took(llm: LLMPerfSession) -> dict[str, Took]:
    """Per config: its launches and the seconds spent launching and measuring it."""
    from pytest_llmperf.report.judgement import Took

    return {
        c: Took(launches=len(s.launch_ids), seconds=round(s.seconds, 1))
        for c, s in sorted(llm.spent.items())
    }


def took_lines(llm: LLMPerfSession) -> list[str]:
    """``took: 3 launches, 6.2 min (predicted 4-9 min); plain 2 launches 4.1 min, ...``."""
    got = took(llm)
    if not got:
        return []
    launches = sum(t.launches for t in got.values())
    minutes = sum(t.seconds for t in got.values()) / 60
    line = f"took: {launches} launch{'es' if launches != 1 else ''}, {minutes:.1f} min"
    if llm.plan is not None:
        lo, hi = (s / 60 for s in llm.plan.seconds)
        line += f" (predicted {lo:.1f}-{hi:.1f} min)"
    if len(got) > 1:
        line += "; " + ", ".join(
            f"{c} {t.launches} launch{'es' if t.launches != 1 else ''} {t.seconds / 60:.1f} min"
            for c, t in got.items()
        )
    return [line]
