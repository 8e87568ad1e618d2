"""Is the load generator itself keeping up? Event-loop lag and process CPU over a level.

A client that falls behind stamps tokens late: its TTFT and ITL grow and its tok/s shrinks,
which reads exactly like a server regression. So every level carries a ``ClientHealth`` and a
saturated client makes the level invalid rather than slow.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from array import array

import numpy as np
import psutil

from pytest_llmperf.base.results import ClientHealth
from pytest_llmperf.base.values import CPU_PERCENT_LIMIT, LOOP_LAG_P99_LIMIT_MS

LAG_PROBE_INTERVAL_S = 0.010  # the lag task sleeps this long and records the overshoot
MIN_LAG_SAMPLES = 10  # fewer samples than this (a very short level) cannot judge p99
SHARD_CPU_PERCENT = 50.0  # a process sized to this share keeps its loop lag low
# Below this client CPU, event-loop lag means the client waited for a CPU, not that it was busy:
# more client processes would not help.
STARVED_CPU_PERCENT = 50.0


def _system_times() -> tuple[float, float, float]:
    """(busy, steal, total) CPU seconds of the whole machine so far (all cores).

    Steal is time the hypervisor gave this virtual machine's CPUs to other guests: the guest's
    own processes cannot see it, yet it starves the load generator just as they do, so it is
    kept apart from ``busy`` (this machine's processes) to name the true cause. 0 where the OS
    does not count it.
    """
    t = psutil.cpu_times()
    total = sum(t)
    steal = getattr(t, "steal", 0.0)
    idle = t.idle + getattr(t, "iowait", 0.0)
    return total - idle - steal, steal, total


def _transport_name() -> str:
    loop = asyncio.get_running_loop()
    kind = "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
    return f"llhttp-stream/{kind}"


class LoopMonitor:
    """Samples loop lag and process CPU between ``start()`` and ``stop()`` on the running loop."""

    def __init__(self, interval_s: float = LAG_PROBE_INTERVAL_S) -> None:
        self._interval = interval_s
        self._lags_ms: array[float] = array("d")
        self._task: asyncio.Task[None] | None = None
        self._cpu0 = 0.0
        self._wall0 = 0.0
        self._sys0 = (0.0, 0.0, 0.0)
        self.cpu_s = 0.0  # process CPU seconds between start() and stop()

    def start(self) -> None:
        self._lags_ms = array("d")
        self._sys0 = _system_times()
        self._cpu0 = time.process_time()
        self._wall0 = time.perf_counter()
        self._task = asyncio.get_running_loop().create_task(self._probe())

    async def _probe(self) -> None:
        interval = self._interval
        lags = self._lags_ms
        while True:  # cancelled by stop()
            t0 = time.perf_counter()
            await asyncio.sleep(interval)
            lags.append(max(0.0, (time.perf_counter() - t0 - interval) * 1e3))

    async def stop(self) -> ClientHealth:
        """Stop sampling and judge the interval."""
        wall = time.perf_counter() - self._wall0
        cpu = time.process_time() - self._cpu0
        now = _system_times()
        busy, steal, total = (b - a for a, b in zip(self._sys0, now, strict=True))
        self.cpu_s = cpu
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        health = judge_health(
            lags_ms=list(self._lags_ms),
            cpu_percent=100.0 * cpu / wall if wall > 0 else 0.0,
            transport=_transport_name(),
        )
        if total <= 0:
            return health
        return health.model_copy(
            update={
                "system_cpu_percent": round(100.0 * busy / total, 1),
                "steal_percent": round(100.0 * steal / total, 1),
                "cpus": psutil.cpu_count(),
            }
        )


def judge_health(lags_ms: list[float], cpu_percent: float, transport: str = "") -> ClientHealth:
    """Pure verdict: saturated when loop lag p99 or CPU crosses its limit (named constants).

    ``reason`` holds the measured facts only; what to do about them is validity's one sentence
    (``verdicts/validity.py``), which depends on whether the client or others held the CPU.
    """
    p99 = float(np.percentile(lags_ms, 99)) if lags_ms else 0.0
    worst = max(lags_ms) if lags_ms else 0.0
    reasons = []
    if len(lags_ms) >= MIN_LAG_SAMPLES and p99 > LOOP_LAG_P99_LIMIT_MS:
        reasons.append(f"event-loop lag p99 {p99:.1f} ms > {LOOP_LAG_P99_LIMIT_MS:g} ms")
    if cpu_percent > CPU_PERCENT_LIMIT:
        reasons.append(f"client CPU {cpu_percent:.0f}% of a core > {CPU_PERCENT_LIMIT:g}%")
    return ClientHealth(
        transport=transport,
        cpu_percent=round(cpu_percent, 1),
        loop_lag_p99_ms=round(p99, 3),
        loop_lag_max_ms=round(worst, 3),
        loop_lag_samples=len(lags_ms),
        saturated=bool(reasons),
        reason="; ".join(reasons) or None,
    )


def with_token_cost(health: ClientHealth, cpu_s: float, output_tokens: int) -> ClientHealth:
    """Add what the client spent per output token and, when the client's own CPU saturated
    it, how many processes the level needs (none when it lagged while nearly idle: other
    processes held the CPU, and more client processes would only compete for it too).

    One process can ingest up to ``CPU_PERCENT_LIMIT`` % of a core / CPU per token. A saturated
    level only shows that the server can go at least this fast, so the count is a lower bound:
    enough processes to bring each below ``SHARD_CPU_PERCENT`` % of a core at the rate reached.
    """
    if output_tokens <= 0 or cpu_s <= 0:
        return health
    us = cpu_s / output_tokens * 1e6
    ceiling = CPU_PERCENT_LIMIT / 100.0 / (us * 1e-6)
    update: dict[str, object] = {
        "cpu_us_per_output_token": round(us, 2),
        "output_tok_s_ceiling": round(ceiling, 0),
    }
    if health.saturated and health.cpu_percent >= STARVED_CPU_PERCENT:
        update["processes_needed"] = max(2, math.ceil(health.cpu_percent / SHARD_CPU_PERCENT))
    return health.model_copy(update=update)
