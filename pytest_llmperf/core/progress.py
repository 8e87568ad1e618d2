"""Progress reports of a sweep, throttled so the callback stays off the hot path."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pytest_llmperf.core.records import RequestRecord

PROGRESS_INTERVAL_S = 0.25


@dataclass(frozen=True)
class Progress:
    """A progress report: which level, how far, and output tok/s so far."""

    concurrency: int
    done: int
    total: int
    failed: int
    output_tokens: int
    elapsed_s: float
    phase: Literal["warmup", "level", "level-done"] = "level"

    @property
    def tok_per_s(self) -> float:
        return self.output_tokens / self.elapsed_s if self.elapsed_s > 0 else 0.0


ProgressCallback = Callable[[Progress], None]


class _Tracker:
    """Counts completions and calls the progress callback, throttled to keep it off the hot path."""

    def __init__(self, concurrency: int, total: int, cb: ProgressCallback | None) -> None:
        self.c, self.total, self.cb = concurrency, total, cb
        self.done = self.failed = self.tokens = 0
        self.t0 = time.perf_counter()
        self._last = 0.0

    def add(self, rec: RequestRecord) -> None:
        self.done += 1
        if rec.ok:
            self.tokens += rec.output_tokens
        else:
            self.failed += 1
        now = time.perf_counter()
        if self.cb is not None and (now - self._last >= PROGRESS_INTERVAL_S):
            self._last = now
            self.report("level")

    def report(self, phase: Literal["warmup", "level", "level-done"]) -> None:
        if self.cb is not None:
            self.cb(
                Progress(
                    self.c,
                    self.done,
                    self.total,
                    self.failed,
                    self.tokens,
                    time.perf_counter() - self.t0,
                    phase,
                )
            )
