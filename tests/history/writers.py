"""Runs to append, and a writer process's body, shared by the SQLite and PostgreSQL tests.

A writer is a separate process (multiprocessing, spawn) with its own engine, as separate
pytest sessions are: it appends its runs, each a second time (a retried append), and reports
how long each took.
"""

from __future__ import annotations

import multiprocessing
import queue
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from pytest_llmperf.history.records import CheckRecord, PointRecord, RunRecord

CONFIGS = ("plain", "mtp")
LEVELS = (1, 4)
HW = "sim-fast-moe"
WORKLOAD = "sglang-in64-out16"
T0 = datetime(2025, 1, 1, tzinfo=UTC)


def make_run(writer: int, i: int, *, uuid: str | None = None) -> RunRecord:
    """Run ``i`` of writer ``writer``: two configs x two levels, three samples each."""
    started = T0 + timedelta(hours=i, seconds=writer)
    points = tuple(
        PointRecord(
            config=config,
            workload_key=WORKLOAD,
            concurrency=c,
            hardware_key=HW,
            verdict="pass",
            valid=True,
            metrics={"output_throughput": 100.0 * c + i, "median_ttft_ms": 20.0 + writer},
            samples={
                "output_throughput": (100.0 * c + i - 1, 100.0 * c + i, 100.0 * c + i + 1),
                "median_ttft_ms": (19.0 + writer, 20.0 + writer, 21.0 + writer),
            },
        )
        for config in CONFIGS
        for c in LEVELS
    )
    return RunRecord(
        uuid=uuid or f"w{writer}-r{i}",
        started_at=started,
        finished_at=started + timedelta(minutes=5),
        source="pytest",
        hardware_key=HW,
        git_commit=f"{writer:02d}{i:038d}",
        plugin_version="0.1.0",
        sglang_version="0.5.23",
        points=points,
        checks=(CheckRecord("gate", "mtp-wins-low-C", "pass", "mtp 3 % above plain"),),
        provenance={"servers": {"plain": {"server_args": {"tp_size": 1}}}},
    )


def write_runs(url: str, writer: int, runs: int, barrier: Any, results: Any) -> None:
    """A writer process: open, wait for the others, append ``runs`` runs (each twice: the
    retry must not duplicate), and put (writer, seconds per append or the error) on
    ``results``."""
    from pytest_llmperf.history.store import HistoryStore

    try:
        store = HistoryStore.open(url)
        try:
            barrier.wait(timeout=120)
            took = []
            for i in range(runs):
                record = make_run(writer, i)
                t = time.perf_counter()
                first = store.append(record)
                again = store.append(record)
                took.append(time.perf_counter() - t)
                if first != again:
                    raise AssertionError(f"retried append got run {again}, not {first}")
        finally:
            store.close()
        results.put((writer, took))
    except Exception as exc:  # reported to the parent, which fails the test with it
        results.put((writer, f"{type(exc).__name__}: {exc}"))


def run_writers(url: str, writers: int, runs: int, timeout_s: float = 300) -> dict[int, Any]:
    """``writers`` processes appending ``runs`` runs each at once; each writer's seconds per
    append (or its error). Every process is joined (bounded) or killed."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(writers)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=write_runs, args=(url, w, runs, barrier, results))
        for w in range(writers)
    ]
    for proc in procs:
        proc.start()
    out: dict[int, Any] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < writers and time.monotonic() < deadline:
            try:
                writer, value = results.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                break
            out[writer] = value
    finally:
        for proc in procs:
            proc.join(timeout=max(1.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=10)
    return out
