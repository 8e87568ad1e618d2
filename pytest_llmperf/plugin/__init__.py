"""pytest glue: options, markers, hooks and the ``llmperf_run`` fixture, each a few lines.

This module is the ``pytest11`` entry point. It holds no measuring or judging logic: the
session state (``plugin/session.py``) is collected by ``plugin/collection.py`` and reported by
``plugin/reports.py``; each check kind (point, gate, ...) is one module of ``plugin/kinds/``
with its fixture; ``run/`` measures and judges, and ``plugin/checks.py`` turns outcomes into
pytest's. Heavy imports happen inside hooks, so having the plugin installed costs other suites
nothing.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_llmperf.plugin.session import SESSION, LLMPerfSession, usage_error
from pytest_llmperf.plugin.warnings import (
    LLMPerfInconclusiveWarning,
    LLMPerfStaleBaselineWarning,
    LLMPerfWarning,
)
from pytest_llmperf.run.output_dir import output_dir_problem
from pytest_llmperf.run.settings import SETTINGS, SETTINGS_BY_NAME

if TYPE_CHECKING:
    from pytest_llmperf.run.perfrun import PerfRun

__all__ = [
    "LLMPerfInconclusiveWarning",
    "LLMPerfStaleBaselineWarning",
    "LLMPerfWarning",
    "llmperf_run",
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
    from pytest_llmperf.plugin.kinds import kind_modules

    for module in kind_modules():  # each kind's fixture lives in its own module
        if not config.pluginmanager.is_registered(module):
            config.pluginmanager.register(module, f"llmperf-{module.KIND.name}")
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
        from pytest_llmperf.plugin.collection import generate_tests

        generate_tests(_session(metafunc.config), metafunc)
    except pytest.UsageError as exc:
        error = str(exc)
    if error is not None:
        # A collection error that reads like a lint message, not a traceback into the plugin
        # (raised outside the except block, so no chained exception is printed either).
        pytest.fail(error, pytrace=False)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Group llmperf tests per server (one launch each) and pin each group to one xdist worker."""
    from pytest_llmperf.plugin.collection import order_items

    order_items(_session(config), config, items)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """Tell the baseline store what was selected, so only those entries can be 'unused'.

    First: an xdist worker reports its collection to the controller in this hook, and what
    ``ship_selected`` writes must be there when the controller hears of it."""
    is_worker = hasattr(session.config, "workerinput")
    from pytest_llmperf.plugin.collection import select_baselines

    select_baselines(_session(session.config), session.items, is_worker)
    from pytest_llmperf.plugin.timing import measured_by, replan

    llm = _session(session.config)
    chosen = measured_by(llm, session.items)
    if is_worker:  # the controller makes the plan again from this (plugin/xdist.py)
        from pytest_llmperf.plugin.xdist import ship_selected

        ship_selected(session.config, chosen)
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = replan(llm, chosen)
    if reporter is not None:
        for line in lines:
            reporter.write_line(line)


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    from pytest_llmperf.plugin.reports import header_lines

    llm = config.stash.get(SESSION, None)
    return None if llm is None else header_lines(llm, config)


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
    from pytest_llmperf.plugin.reports import finish

    finish(llm, session)
    from pytest_llmperf.plugin.busy import busy_exit_status

    busy_exit_status(llm, session)
    from pytest_llmperf.plugin.undecided import undecided_exit_status

    undecided_exit_status(llm, session)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return
    from pytest_llmperf.plugin.reports import has_results, summary_lines

    llm = config.stash.get(SESSION, None)
    if llm is None or not has_results(llm):
        return
    terminalreporter.write_sep("=", "llmperf")
    from pytest_llmperf.plugin.busy import busy_line
    from pytest_llmperf.plugin.undecided import undecided_line

    for line in summary_lines(llm) + busy_line(llm) + undecided_line(llm):
        terminalreporter.write_line(line)


# ----------------------------------------------------------------------------- fixtures


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
