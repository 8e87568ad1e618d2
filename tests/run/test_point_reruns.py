"""An inconclusive point is re-measured in a fresh launch, and only where that can help.

``PointCheck`` talks to its ``PerfRun`` through a handful of methods; the stand-in below
serves scripted throughputs and gives each sample the launch a real run would: a fresh one
when asked and possible, else the live launch's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

from pytest_llmperf.base.results import LevelResult, Workload
from pytest_llmperf.run.checks import PointCheck
from pytest_llmperf.run.options import RunOptions
from pytest_llmperf.run.perfrun import PerfRun
from pytest_llmperf.verdicts.baseline import BaselineStore, summarize
from pytest_llmperf.verdicts.baseline_file import BaselineEntry, EntryKey
from pytest_llmperf.verdicts.compare import Verdict

from ..verdicts import WORKLOAD, make_level


class ScriptedRun:
    """What ``PointCheck`` uses of a ``PerfRun``: samples served from ``values`` in order."""

    def __init__(self, values: list[float], *, relaunch: bool) -> None:
        self._next: Iterator[float] = iter(values)
        self.relaunch = relaunch
        self.launch = 1
        self.got: list[LevelResult] = []
        self.options = RunOptions(probes=0)  # speed is scripted here; probes need a server

    def _sample(self, c: int) -> LevelResult:
        lv = make_level(c, next(self._next))
        lv.launch = f"engine#{self.launch}"
        self.got.append(lv)
        return lv

    def hardware_for(self, config: str) -> str:
        return "hw"

    def facts(self, config: str) -> None:
        return None

    def can_relaunch(self, config: str) -> bool:
        return self.relaunch

    def mode_for(self, config: str) -> str:
        return "simulated"

    def samples(self, config: str, workload: Workload, c: int) -> list[LevelResult]:
        return list(self.got)

    def ensure(
        self, config: str, workload: Workload, c: int, n: int, **kw: Any
    ) -> list[LevelResult]:
        while len(self.got) < n:
            self._sample(c)
        return list(self.got)

    def measure(self, config: str, workload: Workload, c: int, fresh_launch: bool = False) -> None:
        if fresh_launch and self.relaunch:
            self.launch += 1
        self._sample(c)


def _baseline(tmp_path: Path, values: list[float]) -> BaselineStore:
    """A baseline of ``values`` at C=4, each from its own launch."""
    store = BaselineStore(tmp_path)
    summary = summarize(
        "output_throughput", values, launches=[f"rec#{i}" for i in range(len(values))]
    )
    store.queue_update(
        EntryKey("hw", "engine", WORKLOAD.key(), 4),
        BaselineEntry(metrics={"output_throughput": summary}),
    )
    store.flush()
    return BaselineStore(tmp_path)


def _check(run: ScriptedRun, store: BaselineStore) -> PointCheck:
    check = PointCheck(
        "engine",
        4,
        WORKLOAD,
        cast(PerfRun, run),
        store,
        metrics=["output_throughput"],
        tolerances={"output_throughput": 0.10},
    )
    check.measure()
    return check


def test_an_inconclusive_point_is_remeasured_in_fresh_launches(tmp_path: Path) -> None:
    # Baseline 1000 ± 2 % over 3 launches, tolerance 10 %: the first sample is 11.5 % low
    # (inside the 4.6 % margin), the re-run in a fresh launch is on target; judged on both.
    store = _baseline(tmp_path, [980.0, 1000.0, 1020.0])
    run = ScriptedRun([885.0, 990.0, 1000.0], relaunch=True)
    check = _check(run, store)
    check.judge()
    assert [lv.launch for lv in run.got] == ["engine#1", "engine#2"]
    assert check.comparison is not None and check.comparison.verdict == Verdict.PASS
    assert check.comparison.metrics[0].n_current == 2


def test_an_attached_server_is_not_remeasured_when_only_launches_could_help(
    tmp_path: Path,
) -> None:
    # Baseline recorded over runs whose means scatter 12 %: the margin alone exceeds the 10 %
    # tolerance, and more samples of the one live launch cannot narrow it.
    store = _baseline(tmp_path, [850.0, 1000.0, 1150.0, 900.0, 1100.0])
    run = ScriptedRun([885.0, 990.0, 1000.0], relaunch=False)
    check = _check(run, store)
    outcome = check.judge()
    assert len(run.got) == 1
    assert check.comparison is not None and check.comparison.verdict == Verdict.INCONCLUSIVE
    assert [kind for kind, _ in outcome.warnings] == ["inconclusive"]
    assert "measure more independent launches" in outcome.warnings[0][1]


def test_an_attached_server_is_remeasured_when_more_samples_can_settle_it(
    tmp_path: Path,
) -> None:
    # A quiet baseline (2 % over 3 launches): an 11.5 % dip is inside the margin but
    # resolvable, so the live server is measured again and the point judged on all samples.
    store = _baseline(tmp_path, [980.0, 1000.0, 1020.0])
    run = ScriptedRun([885.0, 990.0, 1000.0], relaunch=False)
    check = _check(run, store)
    check.judge()
    assert [lv.launch for lv in run.got] == ["engine#1", "engine#1"]
    assert check.comparison is not None and check.comparison.verdict == Verdict.PASS


def test_a_failure_is_confirmed_in_a_fresh_launch_before_it_fails(tmp_path: Path) -> None:
    # One sample 30 % low (a stall, a neighbour's burst), then two on target: not a failure.
    store = _baseline(tmp_path, [980.0, 1000.0, 1020.0])
    run = ScriptedRun([700.0, 1000.0, 1000.0], relaunch=True)
    check = _check(run, store)
    outcome = check.judge()
    assert outcome.kind == "pass"
    assert [lv.launch for lv in run.got] == ["engine#1", "engine#2", "engine#3"]


def test_a_persistent_regression_fails_after_its_confirmation(tmp_path: Path) -> None:
    store = _baseline(tmp_path, [980.0, 1000.0, 1020.0])
    run = ScriptedRun([700.0, 705.0, 1000.0], relaunch=True)
    check = _check(run, store)
    outcome = check.judge()
    assert outcome.kind == "fail" and "mean of 2" in outcome.message
    assert [lv.launch for lv in run.got] == ["engine#1", "engine#2"]
