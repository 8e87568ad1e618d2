"""The one shape every check kind has (point, gate, crossover, SLO, A/B), and what they share.

A kind is one module in this package: its parameter, its fixture (a plain ``@pytest.fixture``
in that module, registered by ``pytest_configure``), and a ``KIND`` object the session asks
what it parametrizes, which configs and baseline entries its tests cover, which of the
session's result fields it fills (shipped by xdist) and what it adds to the reports. The
session iterates over the kinds (``plugin/kinds/__init__.py``); it never asks which kind a test
is. How a kind judges lives below, in ``run/`` (pytest-xdist's ``scheduler/<mode>.py`` behind
one protocol is the model).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pytest

from pytest_llmperf.plugin.options import record_command
from pytest_llmperf.plugin.params import marker_kwargs
from pytest_llmperf.plugin.session import SESSION, LLMPerfSession

if TYPE_CHECKING:
    from pytest_llmperf.run.perfrun import PerfRun
    from pytest_llmperf.run.suite import Suite


@dataclass(frozen=True)
class Collect:
    """What a kind parametrizes one test function over (``pytest_generate_tests``)."""

    suite: Suite
    suite_path: Path  # resolved: the key of ``LLMPerfSession.suites``
    configs: list[str]  # the marker's configs, or every server of the suite
    levels: tuple[int, ...]
    marker: dict[str, Any]  # the test's merged ``@pytest.mark.llmperf`` keywords
    where: str  # the test's node id, for messages


@dataclass(frozen=True)
class Parametrization:
    """One kind's parameters for one test function, their ids, and why there are none."""

    params: list[Any]
    ids: list[str]
    empty: str  # the skip reason of the placeholder test when ``params`` is empty


@dataclass(frozen=True)
class Entry:
    """A baseline entry a selected test can compare: never 'unused' while it is selected;
    ``select``: it also counts as selected for ``--llmperf-update``'s deletions."""

    config: str
    level: int
    select: bool


# A report a kind writes after the session: (what, for a warning if it cannot be, the writer).
Report = tuple[str, Callable[[], None]]


class CheckKind(Protocol):
    """One kind of perf check, as the session sees it."""

    name: str  # "point", "gate", ...: its ``kind_results`` key
    fixture: str  # the fixture a test asks for (``llmperf_point``)
    order: int  # position in a server group's run order (points first, A/B last)
    payload: tuple[str, ...]  # ``LLMPerfSession`` result fields it fills (xdist ships them)

    def parametrize(self, c: Collect) -> Parametrization:
        """The tests of one test function; ``pytest.UsageError`` for a suite that cannot
        have any (e.g. ``llmperf_slo`` without ``[slo]``)."""
        ...

    def configs(self, suite: Suite, param: Any) -> tuple[str, ...]:
        """The configs a test measures; the first decides its xdist group and its order."""
        ...

    def counted(self, suite: Suite, param: Any) -> tuple[str, ...]:
        """Configs whose 'every test selected' this test counts toward (their entries no
        selected test compares are then unused)."""
        ...

    def baselines(self, suite: Suite, param: Any) -> list[Entry] | None:
        """The entries a test compares; None when it reads no baseline at all (A/B)."""
        ...

    def summary_lines(self, llm: LLMPerfSession) -> list[str]:
        """Its lines in the terminal summary, after the sweep tables."""
        ...

    def markdown(self, llm: LLMPerfSession) -> str | None:
        """Its part of ``$GITHUB_STEP_SUMMARY`` (None: nothing)."""
        ...

    def reports(self, llm: LLMPerfSession) -> list[Report]:
        """The files it writes at the end of the session."""
        ...


class KindDefaults:
    """What most kinds answer; a kind overrides what differs."""

    payload: tuple[str, ...] = ()

    def configs(self, suite: Suite, param: Any) -> tuple[str, ...]:
        return (param.config,)

    def counted(self, suite: Suite, param: Any) -> tuple[str, ...]:
        return self.configs(suite, param)

    def baselines(self, suite: Suite, param: Any) -> list[Entry] | None:
        return []

    def summary_lines(self, llm: LLMPerfSession) -> list[str]:
        return []

    def markdown(self, llm: LLMPerfSession) -> str | None:
        return None

    def reports(self, llm: LLMPerfSession) -> list[Report]:
        return []


# -- what the kinds' fixtures share ----------------------------------------------------------


def properties(request: pytest.FixtureRequest) -> Any:
    """The test's JUnit properties, for the checks' ``on_properties``."""
    return request.node.user_properties.extend


def settings_for(request: pytest.FixtureRequest) -> tuple[LLMPerfSession, Suite, dict[str, Any]]:
    """The session, the test's suite (its run created) and its marker keywords."""
    llm = request.config.stash[SESSION]
    suite = llm.suites[request.param.suite_path]
    llm.perf_run(suite)
    return llm, suite, marker_kwargs(request.node)


def sweep_check_kwargs(request: pytest.FixtureRequest, run: PerfRun) -> dict[str, Any]:
    """What every whole-sweep check (crossover, SLO) needs: its levels, workload and store."""
    llm, suite, marker = settings_for(request)
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
        "on_properties": properties(request),
        "on_result": llm.sweep_checks.append,
        "policy": llm.validity_policy(suite, marker, where),
        "on_busy": llm.busy.append,
    }
