"""Collection: each perf test parametrized by its kind, grouped per server (one launch each,
one xdist worker per group), and the baseline entries the selected tests can compare.

Functions over the session (``LLMPerfSession``), asked of every kind alike: none asks which
kind a test is.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_llmperf.plugin.kinds import fixtures, item_kind, kinds
from pytest_llmperf.plugin.kinds.base import Collect, Entry
from pytest_llmperf.plugin.params import marker_kwargs, parametrize
from pytest_llmperf.plugin.session import usage_error
from pytest_llmperf.run.settings import MARKER_KEYS, SettingError, check_marker_keys

if TYPE_CHECKING:
    from pytest_llmperf.base.results import Workload
    from pytest_llmperf.plugin.kinds.base import CheckKind
    from pytest_llmperf.plugin.session import LLMPerfSession


# A flag or env var that narrows the levels of a session: the project's tests define more
# points than it measures. (A workload flag measures another workload; scopes are per workload.)
_NARROWING = frozenset({"levels"})


def generate_tests(llm: LLMPerfSession, metafunc: pytest.Metafunc) -> None:
    names = set(metafunc.fixturenames)
    if not set(fixtures()) & names:
        return
    where = metafunc.definition.nodeid
    suite = llm.suite(Path(str(metafunc.definition.path)))
    assert suite.path is not None
    suite_path = suite.path.resolve()
    marker = marker_kwargs(metafunc.definition)
    for mark in metafunc.definition.iter_markers("llmperf"):
        if mark.args:
            raise usage_error(
                f"{where}: @pytest.mark.llmperf takes keywords only, got positional "
                f"{', '.join(repr(a) for a in mark.args)} "
                '(write e.g. @pytest.mark.llmperf(configs=["plain"], levels=[4]))'
            )
    try:
        check_marker_keys(marker, f"{where}: @pytest.mark.llmperf")
        for name in sorted(MARKER_KEYS & set(marker)):  # bad values fail here, once per test
            llm.effective(suite, marker, name, where)
        levels: tuple[int, ...] = llm.effective(suite, marker, "levels", where)
    except SettingError as exc:
        raise usage_error(str(exc)) from None
    declared = [s.name for s in suite.servers]
    configs = marker.get("configs") or declared
    for name in configs:
        if name not in declared:
            raise usage_error(
                f"{where}: @pytest.mark.llmperf(configs=...) names {name!r}, which "
                f"{suite.path} does not declare (servers: {', '.join(declared)})"
            )
    collect = Collect(suite, suite_path, list(configs), levels, marker, where)
    for kind in kinds():
        if kind.fixture not in names:
            continue
        got = kind.parametrize(collect)
        for param in got.params:
            for cfg in kind.counted(suite, param):
                key = (suite_path, cfg)
                llm.generated[key] = llm.generated.get(key, 0) + 1
        parametrize(metafunc, kind.fixture, got.params, got.ids, got.empty)


def group_of(llm: LLMPerfSession, kind: CheckKind, param: Any) -> str:
    """The xdist group: configs linked by a gate or crossover share one worker."""
    suite = llm.suites[param.suite_path]
    return suite.linked_groups()[kind.configs(suite, param)[0]]


def sort_key(llm: LLMPerfSession, kind: CheckKind, param: Any) -> tuple[Any, ...]:
    """One launch per server: a group's tests together, points first, by config and C."""
    suite = llm.suites[param.suite_path]
    order = [s.name for s in suite.servers]
    first = kind.configs(suite, param)[0]
    conc = getattr(param, "concurrency", 0)
    return (str(param.suite_path), group_of(llm, kind, param), kind.order, order.index(first), conc)


def _set_nodeid(item: pytest.Item, nodeid: str) -> None:
    """Tag a test id with its xdist group, as xdist's worker does for ``--dist loadgroup``.

    xdist 3.8 assigns ``item._nodeid``, which pytest 9.2 no longer reads (ids became structured
    ``_id`` objects), so its loadgroup silently degrades to plain load balancing there. The
    scheduler groups by the text after the last "@".
    """
    if hasattr(item, "_id"):
        from _pytest.nodeid import NodeId  # pytest >= 9.2

        item._id = NodeId.parse(nodeid)
    else:
        item._nodeid = nodeid  # type: ignore[attr-defined]


def order_items(llm: LLMPerfSession, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group llmperf tests per server (one launch each) and pin each group to one xdist worker;
    the other tests keep their places."""
    slots: list[int] = []
    perf: list[tuple[tuple[Any, ...], pytest.Item]] = []
    for i, item in enumerate(items):
        found = item_kind(item)
        if found is None:
            continue
        kind, param = found
        slots.append(i)
        perf.append((sort_key(llm, kind, param), item))
        group = group_of(llm, kind, param)
        item.add_marker(pytest.mark.xdist_group(name=group))
        if getattr(config.option, "loadgroup", False) and "@" not in item.nodeid:
            _set_nodeid(item, f"{item.nodeid}@{group}")
    ordered = [item for _, item in sorted(perf, key=lambda pair: pair[0])]
    for slot, item in zip(slots, ordered, strict=True):
        items[slot] = item


def select_baselines(llm: LLMPerfSession, items: list[pytest.Item], is_worker: bool) -> None:
    """Tell the store what was selected: only entries no selected test could compare are
    unused, and ``--llmperf-update`` deletes nothing a selected test could have compared,
    whether that test later passed, errored, was skipped or its server never started."""
    from pytest_llmperf.run.perfrun import PointError
    from pytest_llmperf.verdicts.baseline import EntryKey

    selected: dict[tuple[Path, str], int] = {}
    workloads: dict[str, set[str]] = {}  # config -> workload keys its selected tests use
    covered: list[tuple[Entry, Workload]] = []
    for item in items:
        found = item_kind(item)
        if found is None:
            continue
        kind, param = found
        suite = llm.suites[param.suite_path]
        entries = kind.baselines(suite, param)
        if entries is None:  # reads no baseline: says nothing of what is unused
            continue
        for cfg in kind.counted(suite, param):
            selected[(param.suite_path, cfg)] = selected.get((param.suite_path, cfg), 0) + 1
        configs = kind.configs(suite, param)
        wl = llm.workload(suite, marker_kwargs(item), item.nodeid, configs[0])
        for cfg in configs:
            workloads.setdefault(cfg, set()).add(wl.key())
        covered += [(entry, wl) for entry in entries]
    if not covered and not selected:
        return
    store = llm.store
    run = llm.perf_run(next(iter(llm.suites.values())))
    try:
        # A sweep narrowed for this session measures a part of what the project's tests
        # define: only its own points can be unused. Otherwise, with every test of a
        # config selected, an entry of one of their workloads that no test measured is a
        # level the suite no longer has.
        narrowed = any(llm.sources.resolve(name).source in ("cli", "env") for name in _NARROWING)
        for (suite_path, cfg), n in selected.items():
            if not narrowed and n == llm.generated.get((suite_path, cfg), -1):
                for wl_key in sorted(workloads.get(cfg, ())):
                    store.select(run.hardware_for(cfg), cfg, wl_key)
        for entry, wl in covered:
            key = EntryKey(run.hardware_for(entry.config), entry.config, wl.key(), entry.level)
            if entry.select:
                store.select(*key)
            store.mark_used(key)
    except PointError as exc:  # e.g. --llmperf-require-real without SGLang: launch nothing
        if is_worker:
            return  # an xdist worker cannot stop the session cleanly: each test reports it
        if llm.settings["bisect"]:  # git bisect run: this commit cannot be measured
            llm.unmeasured["every config"] = str(exc)  # the exit status stays 125
            pytest.exit(f"pytest-llmperf: {exc} (--llmperf-bisect: exit 125, skip)", 125)
        raise usage_error(str(exc)) from None
