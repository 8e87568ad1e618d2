"""``baseline_passes = "auto"`` (run/passes.py): passes chosen from the first launch's start-up
and its first pass, once per config, at the ratio of a pass's noise to a launch's own effect
that earlier entries recorded (else assumed); ``PerfRun.ensure_launches`` measures them."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_llmperf.run import plan_time
from pytest_llmperf.run.passes import (
    AUTO,
    auto_passes,
    first_pass,
    parse_passes,
    ratio_text,
    recorded_ratio,
)
from pytest_llmperf.run.perfrun import PerfRun
from pytest_llmperf.run.samples import SampleStore
from pytest_llmperf.verdicts.baseline import BaselineStore
from pytest_llmperf.verdicts.baseline_file import (
    BaselineEntry,
    EntryKey,
    LaunchResidual,
    MetricSummary,
)
from pytest_llmperf.verdicts.launch_adjust import summarize_passes, within_to_launch

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
        (1.9, 1.0, 1),  # a launch dearer than a pass, but under two: cheap
        (2.1, 1.0, 2),  # 2 x sqrt(2.1) = 2.9, but only 2 passes fit in the start-up
        (26.0, 1.6, 8),  # real SGLang on a CPU: 2 x sqrt(16) = 8
        (300.0, 60.0, 4),  # 2 x sqrt(5) = 4.5
        (120.0, 30.0, 4),  # 2 x sqrt(4)
        (600.0, 20.0, 11),  # 2 x sqrt(30) = 11, under the 30 that fit in the start-up
        (40.0, 10.0, 4),  # 2 x sqrt(4) = 4 = all that fit
        (30.0, 10.0, 3),  # 2 x sqrt(3) = 3.5: only 3 fit
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
    # start-up 300 s, a pass of three 5 s levels 15 s: 2 x sqrt(20) = 8.9 -> 9 passes
    run = TimedRun(300.0, 5.0)
    by = run.ensure_launches("plain", WORKLOAD, [1, 4, 16], 2, AUTO)
    assert sorted(by) == ["L1", "L2"]
    assert all(len(samples) == 9 for got in by.values() for samples in got.values())
    # the first launch: its first pass, then its other eight, interleaved
    assert [c for _, c in run.calls[:6]] == [1, 4, 16, 1, 4, 16]
    first = by["L1"][1][0]
    assert "baseline_passes = auto: 9 passes of the sweep a launch (start-up 300 s, a pass " \
        "15.0 s, pass-to-launch noise ratio 2 assumed)" in first.notes  # fmt: skip
    assert run.chosen_passes("plain", WORKLOAD, [1, 4, 16]) == 9
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


def drawn_residuals(
    launch_sd: float,
    pass_sd: float,
    levels: int = 4,
    launches: int = 6,
    passes: int = 4,
    rng: np.random.Generator | None = None,
) -> list[LaunchResidual]:
    """What recording entries keep of ``levels`` levels: each launch moves a level by its own
    N(0, ``launch_sd``), each pass by N(0, ``pass_sd``) (seeded draws)."""
    rng = rng or np.random.default_rng(7)
    out = []
    for _ in range(levels):
        per_launch = [
            list(effect + rng.normal(0.0, pass_sd, passes))
            for effect in rng.normal(0.0, launch_sd, launches)
        ]
        got = summarize_passes(per_launch)
        assert got is not None
        out.append(got)
    return out


@pytest.mark.parametrize(
    ("launch_sd", "pass_sd", "truth", "seen"), [(0.01, 0.02, 2.0, 0.6), (0.02, 0.01, 0.5, 0.95)]
)
def test_the_ratio_is_learned_from_recorded_passes(
    launch_sd: float, pass_sd: float, truth: float, seen: float
) -> None:
    rng = np.random.default_rng(11)
    # 200 re-recordings of 4 levels x 6 launches x 4 passes: a launch effect is seen in most
    # (71 % and 100 % of these draws; where it is not, the ratio is infinite and auto takes
    # the most passes, what a ratio of 2 takes too at 300 s / 15 s), and where it is seen the
    # ratio is found within a factor of 1.5 in most
    got = [within_to_launch(drawn_residuals(launch_sd, pass_sd, rng=rng)) for _ in range(200)]
    finite = [r for r in got if r is not None and math.isfinite(r)]
    assert len(finite) >= seen * len(got), len(finite)
    assert truth / 1.25 < float(np.median(finite)) < truth * 1.25, np.median(finite)
    assert np.mean([truth / 1.5 < r < truth * 1.5 for r in finite]) > 0.6


def test_no_launch_effect_is_an_infinite_ratio_mostly() -> None:
    # launches that differ by their passes' noise alone: the F-test (10 %) finds no effect in
    # about 9 of 10 recordings, and then passes are worth all they cost
    rng = np.random.default_rng(12)
    got = [within_to_launch(drawn_residuals(0.0, 0.02, rng=rng)) for _ in range(200)]
    assert 0.8 < np.mean([r == math.inf for r in got]) < 0.97
    # one pass a launch, or one launch, records nothing to learn from
    assert within_to_launch(drawn_residuals(0.01, 0.02, passes=1)) is None
    assert within_to_launch(drawn_residuals(0.01, 0.02, launches=1)) is None


def test_auto_follows_the_learned_ratio() -> None:
    # start-up 300 s, a pass 15 s: sqrt(20) = 4.47
    assert auto_passes(300.0, 15.0) == 9  # 2 assumed: 8.9
    assert auto_passes(300.0, 15.0, 1.0) == 4
    assert auto_passes(300.0, 15.0, 0.2) == 1  # launches are the noise: passes buy little
    assert auto_passes(300.0, 15.0, 6.0) == 20  # 26.8, but only 20 passes fit in 300 s
    assert auto_passes(300.0, 15.0, math.inf) == 20  # no launch effect: all that fit
    assert auto_passes(37.0, 1.5, math.inf) == 24  # real SGLang on a CPU, as re-recorded
    assert auto_passes(10.0, 15.0, math.inf) == 1  # a cheap launch: one pass, whatever the ratio
    assert ratio_text(None) == "pass-to-launch noise ratio 2 assumed"
    assert ratio_text(1.234) == "pass-to-launch noise ratio 1.2 from the entries recorded before"


def test_a_rerecording_chooses_at_the_ratio_its_entries_show(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    levels = [1, 4, 16]
    spreads = drawn_residuals(0.02, 0.01, levels=3)
    for c, res in zip(levels, spreads, strict=True):
        tput = MetricSummary(mean=1000.0, direction="higher", launch_residual=res)
        store.queue_update(EntryKey("hw", "plain", WORKLOAD.key(), c),
                           BaselineEntry(metrics={"output_throughput": tput}))  # fmt: skip
    store.flush()
    ratio = recorded_ratio(store, "hw", "plain", WORKLOAD.key(), levels)
    assert ratio == pytest.approx(within_to_launch(spreads))
    assert recorded_ratio(store, "hw", "other", WORKLOAD.key(), levels) is None
    run = TimedRun(300.0, 5.0)
    by = run.ensure_launches("plain", WORKLOAD, levels, 1, AUTO, ratio)
    want = auto_passes(300.0, 15.0, ratio)
    assert want < 9  # the assumed ratio would choose 9
    assert all(len(samples) == want for got in by.values() for samples in got.values())
    assert any(ratio_text(ratio) in n for n in by["L1"][1][0].notes)
