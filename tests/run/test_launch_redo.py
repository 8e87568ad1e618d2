"""A launch re-measures in itself the samples the moment spoiled (``busy.launch_redo``), so a
recorded entry holds every launch's passes on a busy machine, and the redo is bounded."""

from __future__ import annotations

from typing import Any

from pytest_llmperf.base.results import ClientHealth, LevelResult
from pytest_llmperf.run.busy import launch_redo
from pytest_llmperf.run.recording import valid_samples

from ..verdicts import WORKLOAD
from .test_passes import TimedRun

# The load generator lagged while it was nearly idle: other processes held the CPU.
STARVED = ClientHealth(
    cpu_percent=3.0,
    loop_lag_p99_ms=10.9,
    loop_lag_samples=500,
    saturated=True,
    reason="event-loop lag p99 10.9 ms > 10 ms",
)


class BusyRun(TimedRun):
    """Scripted launches whose ``spoil`` next measurements (by count) are starved."""

    def __init__(self, spoil: set[int]) -> None:
        super().__init__(startup_s=2.0, level_s=1.0)
        self.spoil, self.count = spoil, 0

    def measure(self, config: str, workload: Any, concurrency: int, **kw: Any) -> Any:
        level: LevelResult = super().measure(config, workload, concurrency, **kw)
        self.count += 1
        if self.count in self.spoil:
            level.client = STARVED
        return level


def _valid_per_launch(by: dict[str, dict[int, list[LevelResult]]]) -> dict[str, list[int]]:
    return {
        lid: [len(valid_samples(got[c], WORKLOAD, None)[0]) for c in sorted(got)]
        for lid, got in by.items()
    }


def test_a_starved_sample_is_measured_again_in_its_own_launch() -> None:
    # 2 launches x 2 passes of levels 1, 4: the 2nd measurement (C=4, pass 1) is starved
    run = BusyRun(spoil={2})
    by = run.ensure_launches("plain", WORKLOAD, [1, 4], 2, 2, redo=launch_redo(WORKLOAD, None, 2))
    assert _valid_per_launch(by) == {"L1": [2, 2], "L2": [2, 2]}
    # the redo is in L1, before L2 starts: the launch's speed is the same for all its passes
    assert run.calls[:5] == [("L1", 1), ("L1", 4), ("L1", 1), ("L1", 4), ("L1", 4)]
    assert len(run.calls) == 9


def test_without_a_redo_the_starved_pass_is_missing_from_its_launch() -> None:
    run = BusyRun(spoil={2})
    by = run.ensure_launches("plain", WORKLOAD, [1, 4], 2, 2)
    assert _valid_per_launch(by) == {"L1": [2, 1], "L2": [2, 2]}
    assert len(run.calls) == 8


def test_a_machine_that_stays_busy_is_redone_at_most_rounds_times() -> None:
    run = BusyRun(spoil=set(range(1, 1000)))
    by = run.ensure_launches("plain", WORKLOAD, [1, 4], 2, 1, redo=launch_redo(WORKLOAD, None, 2))
    # The first launch never completes: every round (n + 1 + 2 in all) measures both levels in
    # it again, then the loop stops with what it has.
    assert _valid_per_launch(by) == {"L1": [0, 0]}
    assert len(run.calls) == 2 * (2 + 1 + 2)
