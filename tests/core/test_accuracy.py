"""The load generator against the real simulator subprocess, checked against the server's own
ground truth (``/_sim/ground_truth``: engine-side arrival, first-token and finish times, and the
HTTP front's first/last write of each stream, on the same system-wide monotonic clock as our
``perf_counter``).

Short outputs keep it fast; the assertions are the plugin's accuracy contract: aggregate tok/s
within 2 % and TTFT p50 within 1 ms of the server's truth at every level up to C=128, tokens
counted exactly with speculative (multi-token) events, and broken streams as failed requests.

The TTFT truth is the time the server handed the first token event to its socket, minus our
send time: the engine's planned step end leaves out the server's own HTTP work, which any
client (bench_serving too) rightly measures as part of TTFT. What is left between the two is
the client's own delay in noticing bytes that had arrived; it can never be negative.

The simulator and the load generator share this machine's cores, so the simulator is pinned to
CPU 0 and the TTFT level's load-generator thread to CPU 1, as ``benchmarks/bench_loadgen.py``
pins its server and clients. Unpinned, Linux wakes the client on the core whose softirq
delivered the loopback bytes, i.e. behind the simulator's own burst of writes: that added
about 1 ms to first tokens at C=64..128 on the 2-core box. That is an artefact of co-locating
the two, not of the client, and a real server on its own host does not cause it.
"""

from __future__ import annotations

import asyncio
import gc
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import psutil
import pytest

from pytest_llmperf.base.results import ClientHealth, Workload
from pytest_llmperf.core.client import LoadGenerator
from pytest_llmperf.core.metrics import compute_level
from pytest_llmperf.core.monitor import LoopMonitor
from pytest_llmperf.core.records import RequestRecord
from pytest_llmperf.core.sweep import run_in_own_loop, run_level, sweep_deadline_s
from pytest_llmperf.core.workload import build_prompts
from pytest_llmperf.launch.launcher import ServerHandle, launch
from pytest_llmperf.launch.server_config import ServerConfig

pytestmark = pytest.mark.slow

PROFILE = "sglang-rtxpro6000x4-qwen35-122b-a10b"
LEVELS = [1, 4, 16, 64, 128]
WORKLOAD = Workload(input_len=128, output_len=64, request_timeout_s=120.0)
TOK_S_TOLERANCE = 0.02
TTFT_P50_TOLERANCE_MS = 1.0
SERVER_CPU, CLIENT_CPU = 0, 1  # used only where there are at least two CPUs
# TTFT levels send 3C+1 requests: a closed loop's first tokens come in waves of C, and with 2C
# requests the median sits on the edge between two waves, i.e. on the single latest request
# of a wave, so one request's delay would stand for the p50.
TTFT_WAVES = 3
TTFT_ATTEMPTS = 3


def _launch(tmp: Path, name: str, *flags: str) -> ServerHandle:
    config = ServerConfig(
        name=name, model="sim/model", args=("--sim-profile", PROFILE, *flags), launch_timeout_s=60
    )
    return launch(config, log_dir=tmp, simulate=True, health_timeout_s=60)


def _can_pin() -> bool:
    return hasattr(os, "sched_setaffinity") and {SERVER_CPU, CLIENT_CPU} <= os.sched_getaffinity(0)


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    with _launch(tmp_path_factory.mktemp("sim"), "acc-plain") as handle:
        if _can_pin() and handle.pid is not None:
            leader = psutil.Process(handle.pid)
            for proc in [leader, *leader.children(recursive=True)]:
                for thread in proc.threads():  # affinity is per thread on Linux
                    os.sched_setaffinity(thread.id, {SERVER_CPU})
        yield handle


def _truth(url: str) -> list[dict[str, Any]]:
    data = httpx.get(f"{url}/_sim/ground_truth", timeout=30, trust_env=False).json()
    return [dict(zip(data["fields"], row, strict=True)) for row in data["requests"]]


def _level_truth(url: str, before: int, expected: int) -> list[dict[str, Any]]:
    rows = _truth(url)[before:]
    # health checks and warm-ups are short; the level's requests are the 128-token prompts
    level = [r for r in rows if r["prompt_len"] == WORKLOAD.input_len]
    assert len(level) == expected, f"ground truth has {len(level)} level requests, not {expected}"
    return level


_MEASURED: dict[int, tuple[Any, list[dict[str, Any]]]] = {}


def _measure(sim: ServerHandle, concurrency: int) -> tuple[Any, list[dict[str, Any]]]:
    """One level against the sim, with its ground truth (cached: two tests read it)."""
    if concurrency not in _MEASURED:
        before = len(_truth(sim.url))
        lv = run_level(sim.url, concurrency, WORKLOAD, warmup=False)
        n = WORKLOAD.num_requests(concurrency)
        assert (lv.completed, lv.failed) == (n, 0), lv.errors
        _MEASURED[concurrency] = (lv, _level_truth(sim.url, before, n))
    return _MEASURED[concurrency]


@pytest.mark.parametrize("concurrency", LEVELS)
def test_tokens_and_throughput_match_ground_truth(sim: ServerHandle, concurrency: int) -> None:
    lv, truth = _measure(sim, concurrency)
    n = WORKLOAD.num_requests(concurrency)
    assert lv.total_output_tokens == sum(r["tokens"] for r in truth) == n * WORKLOAD.output_len
    span = max(r["t_finish"] for r in truth) - min(r["t_arrival"] for r in truth)
    server_tok_s = sum(r["tokens"] for r in truth) / span
    err = abs(lv.output_throughput - server_tok_s) / server_tok_s
    print(
        f"C={concurrency}: client {lv.output_throughput:.1f} tok/s vs server {server_tok_s:.1f} "
        f"({100 * err:.2f}%); client {lv.client}"
    )
    assert err <= TOK_S_TOLERANCE, f"aggregate tok/s off by {100 * err:.2f}% at C={concurrency}"


def _runqueue_wait_s() -> float:
    """Time this thread has spent runnable but waiting for a CPU (Linux schedstat; else 0)."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def _steal_s() -> float:
    """Time the hypervisor has run something else on the client's CPU (steal, counted in
    ticks of 1/100 s; the whole machine's, per CPU, when the client is not pinned; 0 where the
    platform does not report it).

    A guest's run queue cannot see it: the client thread was "running" while its virtual CPU
    was not, so its bytes sat unread for that long.
    """
    if _can_pin():
        return float(getattr(psutil.cpu_times(percpu=True)[CLIENT_CPU], "steal", 0.0))
    return float(getattr(psutil.cpu_times(), "steal", 0.0)) / (psutil.cpu_count() or 1)


def _taken_s() -> float:
    """CPU time others took from the client: its run-queue wait plus its CPU's steal."""
    return _runqueue_wait_s() + _steal_s()


def _closed_loop_with_rids(
    url: str, concurrency: int, tag: str, n: int
) -> tuple[list[RequestRecord], ClientHealth, float]:
    """One closed-loop level of ``n`` requests as a sweep runs it (same generator, uvloop, GC
    off), except that each body carries a ``rid`` so every record pairs with its truth row."""

    async def level() -> tuple[list[RequestRecord], ClientHealth, float]:
        if _can_pin():
            os.sched_setaffinity(0, {CLIENT_CPU})  # this thread only: it ends with the level
        async with LoadGenerator(
            url, "sglang", request_timeout_s=WORKLOAD.request_timeout_s
        ) as gen:
            bodies = [
                orjson.dumps(
                    {**orjson.loads(gen.body(p, WORKLOAD.output_len)), "rid": f"{tag}-{i}"}
                )
                for i, p in enumerate(build_prompts(WORKLOAD, n))
            ]
            records: list[RequestRecord] = []
            queue = iter(range(n))

            async def worker() -> None:
                for i in queue:  # shared iterator: each index is taken once
                    records.append(
                        await gen.request(i, [0] * WORKLOAD.input_len, 0, body=bodies[i])
                    )

            monitor = LoopMonitor()
            gc.disable()
            taken0 = _taken_s()
            monitor.start()
            try:
                await asyncio.gather(*(worker() for _ in range(concurrency)))
            finally:
                health = await monitor.stop()
                gc.enable()
        return records, health, _taken_s() - taken0

    waves = WORKLOAD.model_copy(update={"requests_per_level": n})
    return run_in_own_loop(level, timeout_s=sweep_deadline_s(waves, [concurrency]))


def _ttft_level(sim: ServerHandle, concurrency: int, tag: str) -> tuple[float, float, str]:
    """Measure one level; return (TTFT p50 gap ms, CPU time others took s, a summary line).

    Asserts causality on the way: no first token may be stamped before the server sent it.
    """
    n = TTFT_WAVES * concurrency + 1
    records, health, taken_s = _closed_loop_with_rids(sim.url, concurrency, tag, n)
    assert all(r.ok for r in records), [r.error for r in records if not r.ok]
    truth = {r["rid"]: r for r in _truth(sim.url) if str(r["rid"]).startswith(tag + "-")}
    assert len(truth) == len(records) == n
    first_write = np.array([truth[f"{tag}-{r.index}"]["t_first_write"] for r in records])
    t_send = np.array([r.t_send for r in records])
    client_ttft = np.array([r.ttft for r in records])
    # How long after the server handed the first token to its socket did we stamp it?
    delay_ms = (t_send + client_ttft - first_write) * 1e3
    assert delay_ms.min() >= 0.0, (
        f"a first token stamped {-delay_ms.min():.3f} ms before it was sent"
    )
    lv = compute_level(records, max_concurrency=concurrency)  # the sweep's own definitions
    assert lv.median_ttft_ms is not None
    truth_p50_ms = float(np.median(first_write - t_send)) * 1e3
    gap_ms = lv.median_ttft_ms - truth_p50_ms
    engine_p50_ms = (
        float(np.median([truth[f"{tag}-{r.index}"]["t_first_token"] - r.t_send for r in records]))
        * 1e3
    )
    summary = (
        f"C={concurrency}: TTFT p50 client {lv.median_ttft_ms:.3f} ms, server first write "
        f"{truth_p50_ms:.3f} ms (gap {gap_ms:+.3f} ms; engine step end {engine_p50_ms:.3f} ms); "
        f"client delay p50 {np.median(delay_ms):.3f} / p99 {np.percentile(delay_ms, 99):.3f} / "
        f"max {delay_ms.max():.3f} ms; loop lag p99 {health.loop_lag_p99_ms:.2f} ms, client CPU "
        f"{health.cpu_percent:.0f}%, others took {taken_s * 1e3:.1f} ms of the client's CPU"
    )
    return gap_ms, taken_s, summary


@pytest.mark.parametrize("concurrency", LEVELS)
def test_ttft_p50_matches_ground_truth(sim: ServerHandle, concurrency: int) -> None:
    # A miss is measured again only when others took the client's CPU for as long as the miss
    # exceeds the tolerance: its thread sat runnable on the guest's run queue, or the hypervisor
    # ran something else on its virtual CPU (steal; 200 ms of it in one level on this VM), for
    # that long, so the box, not the client, was late. Steal is counted in whole ticks, so it
    # is an estimate to the tick. A miss they cannot account for fails at once; every attempt is
    # held to the same 1 ms.
    for attempt in range(1, TTFT_ATTEMPTS + 1):
        gap_ms, taken_s, summary = _ttft_level(sim, concurrency, f"ttft-c{concurrency}-{attempt}")
        print(summary)
        excess_ms = abs(gap_ms) - TTFT_P50_TOLERANCE_MS
        if excess_ms <= 0 or taken_s * 1e3 < excess_ms:
            break
    assert abs(gap_ms) <= TTFT_P50_TOLERANCE_MS, f"TTFT p50 off by {gap_ms:+.3f} ms: {summary}"


def test_speculative_multi_token_events_counted_exactly(tmp_path: Path) -> None:
    with _launch(tmp_path, "acc-spec", "--speculative-algorithm", "NEXTN") as handle:
        before = len(_truth(handle.url))
        lv = run_level(handle.url, 8, WORKLOAD, warmup=False, details=True)
        truth = _level_truth(handle.url, before, 16)
    assert lv.completed == 16 and lv.failed == 0, lv.errors
    assert lv.details is not None
    assert lv.details.output_lens == [WORKLOAD.output_len] * 16
    assert lv.total_output_tokens == sum(r["tokens"] for r in truth)
    assert lv.accept_length is not None and lv.accept_length > 1.0
    # with accept length > 1 some events carry several tokens: ITL count is still tokens - 1
    assert lv.mean_itl_ms is not None and lv.mean_tpot_ms is not None


@pytest.mark.parametrize(
    ("fault", "needle"),
    [("stream-error-after-tokens=100", "error in stream"), ("cut-stream-after-tokens=100", "")],
)
def test_broken_streams_from_the_sim_fail_requests(tmp_path: Path, fault: str, needle: str) -> None:
    with _launch(tmp_path, "acc-fault", "--sim-fault", fault) as handle:
        lv = run_level(handle.url, 4, WORKLOAD, warmup=False)
    assert lv.failed > 0, "a broken stream must be a failed request"
    assert lv.total_output_tokens == lv.completed * WORKLOAD.output_len  # no partial tokens
    assert any(needle in e for e in lv.errors), lv.errors
