"""The samples a run measured, by (config, workload, concurrency), in the order measured."""

from __future__ import annotations

from dataclasses import dataclass, field

from pytest_llmperf.base.results import LevelResult, Workload

Key = tuple[str, Workload, int]


@dataclass
class SampleStore:
    """Every kept sample of a run; a point's first sample is its level, the rest repeats."""

    _samples: dict[Key, list[LevelResult]] = field(default_factory=dict, repr=False)

    def of(self, config: str, workload: Workload, concurrency: int) -> list[LevelResult]:
        return list(self._samples.get((config, workload, concurrency), []))

    def add(self, config: str, workload: Workload, concurrency: int, level: LevelResult) -> None:
        self._samples.setdefault((config, workload, concurrency), []).append(level)

    def by_launch(self, config: str, workload: Workload) -> dict[str, dict[int, list[LevelResult]]]:
        """``config``'s samples grouped by the launch that measured them: {launch: {C: that
        launch's samples, in order}} (launch-adjusted verdicts compare levels of one launch;
        the j-th sample of each level is the launch's pass j of the sweep)."""
        out: dict[str, dict[int, list[LevelResult]]] = {}
        for (c, w, cc), samples in self._samples.items():
            if c == config and w == workload:
                for lv in samples:
                    if lv.launch is not None:
                        out.setdefault(lv.launch, {}).setdefault(cc, []).append(lv)
        return out

    def levels(self, config: str, workload: Workload) -> dict[int, list[LevelResult]]:
        """{C: its samples} of one config and workload, by C."""
        mine = {
            cc: s for (c, w, cc), s in self._samples.items() if c == config and w == workload and s
        }
        return {cc: mine[cc] for cc in sorted(mine)}

    def sweeps(self) -> list[tuple[str, Workload]]:
        """Every (config, workload) measured, by config then workload key."""
        return sorted({(c, w) for (c, w, _) in self._samples}, key=lambda k: (k[0], k[1].key()))
