"""``baseline_passes = "auto"`` (run/passes.py): passes chosen from the first launch's start-up
and its first pass, once per config; ``PerfRun.ensure_launches`` measures them."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_llmperf.run import plan_time
from pytest_llmperf.run.passes import (
    AUTO,
    AUTO_MAX_PASSES,
    auto_passes,
    first_pass,
    parse_passes,
)
from pytest_llmperf.run.perfrun import PerfRun
from pytest_llmperf.run.samples import SampleStore
from pytest_llmperf.verdicts.baseline_file import BaselineEntry, MetricSummary

from ..verdicts import WORKLOAD, make_level


def test_the_setting_takes_auto_or_a_positive_count() -> None:
    assert parse_passes("auto") == parse_passes(" AUTO ") == AUTO
    assert parse_passes("4") == parse_passes(4) == 4
    with pytest.raises(ValueError, match="positive whole number.*, or auto"):
        parse_passes(0)
    with pytest.raises(ValueError, match="or auto"):
        parse_passes("many")


@pytest.mark.parametrize(
    ("startup_s", "pass_s", "passes"),
    [
        (None, 10.0, 1),  # attached: the start-up is unknown
        (0.5, 10.0, 1),  # the simulator
        (23.0, 1.0, 1),  # real SGLang on a CPU: under 30 s a launch is cheap
        (300.0, 60.0, 4),  # 2 x sqrt(5) = 4.5
        (120.0, 30.0, 4),  # 2 x sqrt(4)
        (600.0, 20.0, AUTO_MAX_PASSES),  # 2 x sqrt(30) = 11: capped
        (300.0, 0.0, 1),
    ],
)
def test_auto_balances_a_launchs_start_up_against_a_pass(
    startup_s: float | None, pass_s: float, passes: int
) -> None:
    assert auto_passes(startup_s, pass_s) == passes


class TimedRun(PerfRun):
    """``PerfRun.ensure_launches`` over scripted launches: each starts in ``startup_s``, each
    level takes ``level_s``; only what ``ensure_launches`` uses of a run is real."""

    def __init__(self, startup_s: float, level_s: float) -> None:  # no servers, no suite
        self.store = SampleStore()
        self._passes = {}
        self.startup_s, self.level_s = startup_s, level_s
        self.launches = 0
        self.calls: list[tuple[str, int]] = []

    def can_relaunch(self, config: str) -> bool:
        return True

    @property
    def servers(self) -> Any:  # type: ignore[override]
        run = self

        class Pool:
            def live_launch(self, config: str) -> str | None:
                return f"L{run.launches}" if run.launches else None

        return Pool()

    def measure(self, config: str, workload: Any, concurrency: int, **kw: Any) -> Any:
        if kw.get("fresh_launch") or not self.launches:
            self.launches += 1
        level = make_level(concurrency, 1000.0)
        level.duration, level.startup_s = self.level_s, self.startup_s
        level.launch = f"L{self.launches}"
        self.calls.append((level.launch, concurrency))
        self.store.add(config, workload, concurrency, level)
        return level


def test_auto_measures_the_chosen_passes_on_every_launch_and_says_why() -> None:
    # start-up 300 s, a pass of three 5 s levels 15 s: 2 x sqrt(20) = 8.9 -> 8 passes
    run = TimedRun(300.0, 5.0)
    by = run.ensure_launches("plain", WORKLOAD, [1, 4, 16], 2, AUTO)
    assert sorted(by) == ["L1", "L2"]
    assert all(len(samples) == 8 for got in by.values() for samples in got.values())
    # the first launch: its first pass, then its other seven, interleaved
    assert [c for _, c in run.calls[:6]] == [1, 4, 16, 1, 4, 16]
    first = by["L1"][1][0]
    assert "baseline_passes = auto: 8 passes of the sweep a launch (start-up 300 s, a pass " \
        "15.0 s)" in first.notes  # fmt: skip
    assert run.chosen_passes("plain", WORKLOAD, [1, 4, 16]) == 8
    assert first_pass(by, [1, 4, 16]) == (300.0, 15.0)


def test_auto_on_a_cheap_launch_is_one_pass() -> None:
    run = TimedRun(2.0, 5.0)
    by = run.ensure_launches("plain", WORKLOAD, [1, 4, 16], 3, AUTO)
    assert len(by) == 3
    assert all(len(samples) == 1 for got in by.values() for samples in got.values())
    assert any("baseline_passes = auto: 1 pass of" in n for n in by["L1"][1][0].notes)


class Entries:
    """What ``plan_time.plan`` reads of a baseline store: one config, every level recorded at
    1000 tok/s with a 300 s start-up."""

    def __init__(self, levels: list[int]) -> None:
        metrics = {
            "output_throughput": MetricSummary(mean=1000.0, direction="higher"),
            "startup_s": MetricSummary(mean=300.0, direction="lower"),
        }
        self.entries = {c: BaselineEntry(metrics=metrics) for c in levels}

    def file(self, hardware: str, config: str) -> Any:
        class File:
            workloads = {"w": self.entries}

        return File()

    def get(self, key: Any, mark_used: bool = False) -> BaselineEntry | None:
        return self.entries.get(key.concurrency)


@pytest.mark.parametrize(("record", "passes"), [(None, 1), (3, 3), (AUTO, None)])
def test_the_header_counts_a_recordings_passes(record: Any, passes: int | None) -> None:
    levels = [1, 4, 16]
    one = sum(WORKLOAD.requests_sent(c) * WORKLOAD.output_len / 1000.0 for c in levels)
    if passes is None:  # auto: what the first launch will choose from the same figures
        passes = auto_passes(300.0, one)
        assert passes > 1
    got = plan_time.plan([("plain", "hw", True)], Entries(levels), WORKLOAD, levels,  # type: ignore[arg-type]
                         lambda n: (3, 3), 0, record_passes=record)  # fmt: skip
    assert got.seconds[0] == pytest.approx(3 * 300.0 + passes * one)


@pytest.mark.parametrize(
    ("passes", "budget", "most"), [(3, None, 6), (AUTO, None, 6), (1, 20.0, 2)]
)
def test_the_header_counts_ab_rounds_and_their_passes(
    passes: Any, budget: float | None, most: int
) -> None:
    levels = [1, 4, 16]
    one = sum(WORKLOAD.requests_sent(c) * WORKLOAD.output_len / 1000.0 for c in levels)
    n = passes if isinstance(passes, int) else auto_passes(300.0, one)
    assert passes != AUTO or n > 1
    sides = [("old", "hw"), ("new", "hw")]
    got = plan_time.ab_plan("new-vs-old", sides, Entries(levels), WORKLOAD, levels, (2, 6),  # type: ignore[arg-type]
                            passes, budget)  # fmt: skip
    per_round = 2 * (300.0 + n * one)  # two launches, each a start-up and n passes
    # a 20-minute budget holds one round of about 630 s; never fewer than the two a paired t needs
    assert (got.rounds, got.passes) == ((2, most), n)
    assert got.seconds == pytest.approx((2 * per_round, most * per_round))
    assert got.text() == f"A/B new-vs-old 2{'' if most == 2 else f'-{most}'} rounds of 2 " \
        f"launches ({n} pass{'es' if n > 1 else ''} a launch)"  # fmt: skip
    whole = plan_time.plan([("old", "hw", True), ("new", "hw", True)], Entries(levels), WORKLOAD,  # type: ignore[arg-type]
                           levels, lambda k: (1, 1), 0, ab=[got])  # fmt: skip
    sweeps = 2 * (300.0 + one)
    assert whole.seconds == pytest.approx((sweeps + 2 * per_round, sweeps + most * per_round))
    assert " + A/B new-vs-old " in whole.line()
