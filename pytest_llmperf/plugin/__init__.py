"""pytest glue: options, markers, hooks and fixtures, each a few lines over ``LLMPerfSession``.

This module is the ``pytest11`` entry point. It holds no measuring or judging logic: the
session object (``plugin/session.py``) owns the run state, ``run/`` measures and judges, and
``plugin/checks.py`` turns outcomes into pytest's. Heavy imports happen inside hooks, so having
the plugin installed costs other suites nothing.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_llmperf.plugin.options import record_command
from pytest_llmperf.plugin.params import (
    ABParam,
    CrossoverParam,
    GateParam,
    PointParam,
    SloParam,
    item_param,
    marker_kwargs,
)
from pytest_llmperf.plugin.session import SESSION, LLMPerfSession, usage_error
from pytest_llmperf.plugin.warnings import (
    LLMPerfInconclusiveWarning,
    LLMPerfStaleBaselineWarning,
    LLMPerfWarning,
)
from pytest_llmperf.run.output_dir import output_dir_problem
from pytest_llmperf.run.settings import SETTINGS, SETTINGS_BY_NAME, SettingError

if TYPE_CHECKING:
    from pytest_llmperf.plugin.checks import ABCheck, CrossoverCheck, GateCheck, Point, SloCheck
    from pytest_llmperf.run.perfrun import PerfRun

__all__ = [
    "LLMPerfInconclusiveWarning",
    "LLMPerfStaleBaselineWarning",
    "LLMPerfWarning",
    "llmperf_ab",
    "llmperf_crossover",
    "llmperf_gate",
    "llmperf_point",
    "llmperf_run",
    "llmperf_slo",
]


def _session(config: pytest.Config) -> LLMPerfSession:
    return config.stash[SESSION]


# ----------------------------------------------------------------------------- hooks


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("llmperf", "LLM-serving performance (pytest-llmperf)")
    for s in SETTINGS:
        if s.cli:
            action = "store_true" if s.flag else "store"
            # argparse %-formats help strings; a bare % ("5%") would crash every `pytest --help`
            help_text = s.help.replace("%", "%%")
            group.addoption(s.cli_flag, action=action, default=None, dest=s.dest, help=help_text)
        else:  # hidden: given anyway, it is an error that says where the setting goes now
            group.addoption(s.cli_flag, default=None, dest=s.dest, help=argparse.SUPPRESS)
        if s.ini:
            parser.addini(s.ini_key, help=s.help, type="string", default=None)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "llmperf(configs=None, gates=None, levels=None, input_len=None, output_len=None, "
        "requests=None, backend=None, repeat=None, metrics=None, tolerance=None, ...): "
        "narrow or override pytest-llmperf settings for this test",
    )
    llm = LLMPerfSession.from_config(config)
    problem = output_dir_problem(llm.output_dir, SETTINGS_BY_NAME["output_dir"].cli_flag)
    if problem is not None:
        raise usage_error(problem)
    config.stash[SESSION] = llm
    if config.pluginmanager.hasplugin("xdist"):
        from pytest_llmperf.plugin.xdist import XdistHooks

        config.pluginmanager.register(XdistHooks(), "llmperf-xdist")
        # Tests that share a server config must run on the worker that owns the server.
        numprocesses = getattr(config.option, "numprocesses", None)
        if numprocesses and getattr(config.option, "dist", "no") in ("no", "load"):
            config.option.dist = "loadgroup"
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and workerinput.get("llmperf_loadgroup"):
        config.option.loadgroup = True
    if workerinput is None:
        from pytest_llmperf.launch.launcher import install_cleanup_signal_handlers

        install_cleanup_signal_handlers()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    error = None
    try:
        _session(metafunc.config).generate_tests(metafunc)
    except pytest.UsageError as exc:
        error = str(exc)
    if error is not None:
        # A collection error that reads like a lint message, not a traceback into the plugin
        # (raised outside the except block, so no chained exception is printed either).
        pytest.fail(error, pytrace=False)


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


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Group llmperf tests per server (one launch each) and pin each group to one xdist worker."""
    llm = _session(config)
    slots: list[int] = []
    perf: list[pytest.Item] = []
    for i, item in enumerate(items):
        param = item_param(item)
        if param is None:
            continue
        slots.append(i)
        perf.append(item)
        group = llm.group_of(param)
        item.add_marker(pytest.mark.xdist_group(name=group))
        if getattr(config.option, "loadgroup", False) and "@" not in item.nodeid:
            _set_nodeid(item, f"{item.nodeid}@{group}")
    ordered = sorted(perf, key=lambda it: llm.sort_key(item_param(it)))  # type: ignore[arg-type]
    for slot, item in zip(slots, ordered, strict=True):
        items[slot] = item


def pytest_collection_finish(session: pytest.Session) -> None:
    """Tell the baseline store what was selected, so only those entries can be 'unused'."""
    is_worker = hasattr(session.config, "workerinput")
    _session(session.config).select_baselines(session.items, is_worker)


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    llm = config.stash.get(SESSION, None)
    return None if llm is None else llm.header_lines(config)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    llm = config.stash.get(SESSION, None)
    if llm is None:
        return
    llm.close()
    if hasattr(config, "workerinput"):
        from pytest_llmperf.plugin.xdist import worker_payload

        config.workeroutput["llmperf"] = worker_payload(llm)  # type: ignore[attr-defined]
        return
    if llm.worker_payloads:
        from pytest_llmperf.plugin.xdist import merge_payloads

        merge_payloads(llm)
    llm.finish(session)
    from pytest_llmperf.plugin.busy import busy_exit_status

    busy_exit_status(llm, session)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return
    llm = config.stash.get(SESSION, None)
    if llm is None or not (
        llm.sweeps or llm.gates or llm.sweep_checks or llm.unmeasured or llm.ab_points  # ab
    ):
        return
    terminalreporter.write_sep("=", "llmperf")
    from pytest_llmperf.plugin.busy import busy_line

    for line in llm.summary_lines() + busy_line(llm):
        terminalreporter.write_line(line)


# ----------------------------------------------------------------------------- fixtures


def _properties(request: pytest.FixtureRequest) -> Any:
    return request.node.user_properties.extend


def _settings_for(request: pytest.FixtureRequest) -> tuple[LLMPerfSession, Any, dict[str, Any]]:
    llm = _session(request.config)
    suite = llm.suites[request.param.suite_path]
    llm.perf_run(suite)
    return llm, suite, marker_kwargs(request.node)


@pytest.fixture(scope="session")
def llmperf_run(request: pytest.FixtureRequest) -> PerfRun:
    """The session's servers and measurements (launches nothing until a point needs it)."""
    llm = _session(request.config)
    suite = next(iter(llm.suites.values()), None)
    if suite is None:
        suite = llm.suite(Path(str(request.node.path)))
    run = llm.perf_run(suite)
    request.addfinalizer(run.close)
    return run


@pytest.fixture
def llmperf_point(request: pytest.FixtureRequest, llmperf_run: PerfRun) -> Point:
    """One (config, concurrency) point, measured once per session however many tests use it."""
    from pytest_llmperf.plugin.checks import Point

    param: PointParam = request.param
    llm, suite, marker = _settings_for(request)
    where = request.node.nodeid

    def get(name: str) -> Any:
        return llm.effective(suite, marker, name, where)

    try:
        point = Point(
            config=param.config,
            concurrency=param.concurrency,
            workload=llm.workload(suite, marker, where, param.config),
            run=llmperf_run,
            store=llm.store,
            repeat=get("repeat"),
            max_reruns=get("max_reruns"),
            baseline_repeat=get("baseline_repeat"),  # noise
            metrics=get("metrics"),
            tolerances=get("tolerance"),
            update=bool(llm.settings["update"]),
            rerecord=bool(llm.settings["rerecord"]),
            adjust=get("adjust"),
            levels=get("levels"),
            invalid_policy=llm.settings["invalid"],
            policy=llm.validity_policy(suite, marker, where),
            nodeid=where,
            record_command=record_command(request.config, where),
            on_properties=_properties(request),
            on_compared=lambda pc: llm.points.setdefault(pc.config, []).append(pc),
            on_invalid=llm.invalid.append,
            on_judgement=llm.checks.append,
            on_busy=llm.busy.append,
        )
    except SettingError as exc:
        raise usage_error(str(exc)) from None
    point.measure()
    return point


@pytest.fixture
def llmperf_gate(request: pytest.FixtureRequest, llmperf_run: PerfRun) -> GateCheck:
    """One cross-config gate at one concurrency, e.g. mtp ≥ 1.1 × plain at C=4."""
    from pytest_llmperf.plugin.checks import GateCheck

    param: GateParam = request.param
    llm, suite, marker = _settings_for(request)
    gate = suite.gates[param.gate_index]
    return GateCheck(
        gate=gate,
        concurrency=param.concurrency,
        workload=llm.workload(suite, marker, request.node.nodeid, gate.config),
        run=llmperf_run,
        on_properties=_properties(request),
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


def _sweep_check_kwargs(request: pytest.FixtureRequest, run: PerfRun) -> dict[str, Any]:
    """What every whole-sweep check (crossover, SLO) needs: its levels, workload and store."""
    llm, suite, marker = _settings_for(request)
    where = request.node.nodeid
    return {
        "levels": llm.effective(suite, marker, "levels", where),
        "workload": llm.workload(suite, marker, where),
        "run": run,
        "store": llm.store,
        "update": bool(llm.settings["update"]),
        "rerecord": bool(llm.settings["rerecord"]),
        "nodeid": where,
        "record_command": record_command(request.config, where),
        "on_properties": _properties(request),
        "on_result": llm.sweep_checks.append,
        "policy": llm.validity_policy(suite, marker, where),
        "on_busy": llm.busy.append,
    }


@pytest.fixture
def llmperf_slo(request: pytest.FixtureRequest, llmperf_run: PerfRun) -> SloCheck:
    """The largest swept C whose level meets the suite's [slo], held to its baseline."""
    from pytest_llmperf.plugin.checks import SloCheck

    param: SloParam = request.param
    suite = _session(request.config).suites[param.suite_path]
    kwargs = _sweep_check_kwargs(request, llmperf_run)
    return SloCheck(config_name=param.config, slo=suite.slo, **kwargs)


@pytest.fixture
def llmperf_crossover(request: pytest.FixtureRequest, llmperf_run: PerfRun) -> CrossoverCheck:
    """The largest C where a config still beats its reference, held to its baseline."""
    from pytest_llmperf.plugin.checks import CrossoverCheck

    param: CrossoverParam = request.param
    suite = _session(request.config).suites[param.suite_path]
    kwargs = _sweep_check_kwargs(request, llmperf_run)
    llm, _, marker = _settings_for(request)
    max_reruns = llm.effective(suite, marker, "max_reruns", request.node.nodeid)
    return CrossoverCheck(
        spec=suite.crossovers[param.index],
        max_reruns=max_reruns,
        on_judgement=llm.checks.append,
        **kwargs,
    )


@pytest.fixture
def llmperf_ab(request: pytest.FixtureRequest, llmperf_run: PerfRun) -> ABCheck:  # ab
    """One ``[[compare]]`` at one level: candidate vs reference over paired, interleaved rounds."""
    from pytest_llmperf.plugin.ab import ab_run
    from pytest_llmperf.plugin.checks import ABCheck

    param: ABParam = request.param
    llm, suite, marker = _settings_for(request)
    where = request.node.nodeid
    spec = suite.compares[param.index]
    levels = llm.effective(suite, marker, "levels", where)
    workload = llm.workload(suite, marker, where, spec.reference)
    return ABCheck(
        ab=ab_run(llm, param, workload, levels, llm.validity_policy(suite, marker, where)),
        concurrency=param.concurrency,
        invalid_policy=llm.settings["invalid"],
        on_result=llm.ab_points.append,
        on_invalid=llm.invalid.append,
        on_properties=_properties(request),
    )
