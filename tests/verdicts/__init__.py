"""Tests of everything after measurement: baselines, verdicts, gates, validity (the factories
below also build the results tests/report renders).

Pure: results are built by hand with the factories below; no server, no pytest plugin.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_llmperf.base.results import (
    ClientHealth,
    LevelResult,
    ServerFacts,
    SweepResult,
    Workload,
)

WORKLOAD = Workload(input_len=1000, output_len=1000)
LEVELS = (1, 4, 16, 32, 64, 128)
# Seed 003: Qwen3.5-122B-A10B aggregate tok/s without and with MTP (server cap 48 with MTP).
PLAIN = dict(zip(LEVELS, (108, 286, 873, 1359, 2327, 2800), strict=True))
MTP = dict(zip(LEVELS, (121.5, 400.5, 1209.4, 1502.4, 1571.1, 1635), strict=True))


def make_level(
    c: int,
    tput: float,
    *,
    cap: int | None = None,
    accept: float | None = None,
    ttft: float = 100.0,
    itl: float = 10.0,
    failed: int = 0,
    output_tokens: int | None = None,
    saturated: bool = False,
    achieved: float | None = None,
    notes: list[str] | None = None,
) -> LevelResult:
    """A self-consistent level of the 1000/1000 workload at ``tput`` aggregate tok/s."""
    n = WORKLOAD.num_requests(c)
    completed = n - failed
    out = completed * WORKLOAD.output_len if output_tokens is None else output_tokens
    duration = out / tput if tput else 1.0
    return LevelResult(
        max_concurrency=c,
        num_requests=n,
        completed=completed,
        failed=failed,
        duration=duration,
        total_input_tokens=completed * WORKLOAD.input_len,
        total_output_tokens=out,
        request_throughput=completed / duration,
        output_throughput=tput,
        per_request_throughput=tput / min(c, cap or c),
        concurrency=0.95 * c if achieved is None else achieved,
        median_ttft_ms=ttft,
        p99_ttft_ms=ttft * 2,
        median_itl_ms=itl,
        accept_length=accept,
        server_max_running_requests=cap,
        queueing=cap is not None and c > cap,
        notes=notes or [],
        errors=["HTTP 500: boom"] if failed else [],
        client=ClientHealth(
            transport="aiohttp",
            cpu_percent=95.0 if saturated else 20.0,
            loop_lag_p99_ms=80.0 if saturated else 1.0,
            saturated=saturated,
            reason="event loop lag p99 80 ms" if saturated else None,
        ),
    )


def make_sweep(
    config: str, values: dict[int, float], *, cap: int | None = None, accept: float | None = None
) -> SweepResult:
    return SweepResult(
        config=config,
        server=ServerFacts(mode="simulated", max_running_requests=cap),
        workload=WORKLOAD,
        levels=[make_level(c, v, cap=cap, accept=accept) for c, v in values.items()],
    )


def baseline_entry(tput: float, n: int = 1) -> Any:
    """A baseline entry whose output_throughput samples are ``tput`` and 1 % steps above it."""
    from pytest_llmperf.verdicts.baseline import BaselineEntry, summarize

    vals = [tput * (1 + 0.01 * k) for k in range(n)]
    return BaselineEntry(metrics={"output_throughput": summarize("output_throughput", vals)})


def write_plain(directory: Path, hw: str, n: int = 1, provenance: Any = None) -> Path:
    """The PLAIN curve stored as config ``plain`` under ``hw`` in ``directory``."""
    from pytest_llmperf.verdicts.baseline import BaselineStore, EntryKey, baseline_path

    store = BaselineStore(directory)
    for c, v in PLAIN.items():
        store.queue_update(
            EntryKey(hw, "plain", WORKLOAD.key(), c), baseline_entry(v, n), provenance
        )
    store.flush()
    return baseline_path(directory, hw, "plain")
