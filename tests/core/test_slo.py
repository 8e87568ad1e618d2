"""SLOs on hand-built records and levels: goodput, level verdicts, max C within SLO, search."""

from __future__ import annotations

import asyncio
import math

import pytest

from pytest_llmperf.base.results import LevelResult, ServerFacts, SweepResult, Workload
from pytest_llmperf.core.metrics import compute_level
from pytest_llmperf.core.records import RequestRecord
from pytest_llmperf.core.slo import (
    Slo,
    SloError,
    goodput,
    level_meets,
    load_slo,
    max_concurrency_within_slo,
    request_meets,
    search_max_level,
    search_max_level_async,
)
from pytest_llmperf.core.sweep import run_level, run_sweep
from tests.sim_servers import ServerThread


def _rec(i: int, ttft_ms: float, tpot_ms: float, tokens: int = 101, t_send: float = 0.0):
    """A completed request with exactly this TTFT and TPOT (e2e follows)."""
    ttft, tpot = ttft_ms / 1e3, tpot_ms / 1e3
    return RequestRecord(
        index=i,
        t_send=t_send,
        ttft=ttft,
        e2e=ttft + tpot * (tokens - 1),
        output_tokens=tokens,
    )


SLO = Slo(ttft_ms=200, tpot_ms=20)


def test_goodput_counts_only_requests_meeting_every_limit() -> None:
    records = [
        _rec(0, 100, 10),  # good
        _rec(1, 200, 20),  # good: limits are inclusive (vLLM: slo >= value)
        _rec(2, 250, 10),  # TTFT too slow
        _rec(3, 100, 25),  # TPOT too slow
        _rec(4, 100, 10).fail("HTTP 500"),  # failed: never good, even with fast timings
        _rec(5, 100, 999, tokens=1),  # one token: no TPOT, counts as meeting it (vLLM: 0)
    ]
    assert [request_meets(r, SLO) for r in records] == [True, True, False, False, False, True]
    assert goodput(records, SLO, duration=2.0) == pytest.approx(1.5)
    # The E2E limit is a third, independent condition.
    with_e2e = Slo(ttft_ms=200, tpot_ms=20, e2e_ms=1500)
    assert goodput(records, with_e2e, duration=1.0) == pytest.approx(2.0)  # r1: e2e 2200 ms


def test_request_without_a_first_token_is_not_good() -> None:
    r = RequestRecord(index=0, t_send=0.0, e2e=0.5, output_tokens=0)  # ttft NaN
    assert r.ok and math.isnan(r.ttft)
    assert not request_meets(r, SLO)
    assert request_meets(r, Slo(e2e_ms=600))


def test_goodput_needs_per_request_limits_and_a_duration() -> None:
    with pytest.raises(ValueError, match="goodput needs a per-request limit"):
        goodput([_rec(0, 1, 1)], Slo(p99_ttft_ms=100), duration=1.0)
    assert goodput([_rec(0, 1, 1)], SLO, duration=0.0) == 0.0


def test_compute_level_fills_goodput_only_under_a_per_request_slo() -> None:
    records = [_rec(i, 100 + 100 * i, 10, t_send=0.1 * i) for i in range(4)]
    records.append(_rec(4, 100, 10, t_send=0.2).fail("boom"))
    lv = compute_level(records, max_concurrency=4, slo=SLO)
    # Requests 0 and 1 meet TTFT <= 200 ms; duration is the level's own.
    assert lv.goodput == pytest.approx(2 / lv.duration)
    assert lv.goodput < lv.request_throughput == pytest.approx(4 / lv.duration)
    assert compute_level(records, max_concurrency=4).goodput is None
    assert compute_level(records, max_concurrency=4, slo=Slo(p99_ttft_ms=500)).goodput is None


def _level(
    c: int,
    p99_ttft: float | None,
    p99_tpot: float | None,
    *,
    n: int = 8,
    good: int | None = None,
    duration: float = 10.0,
) -> LevelResult:
    return LevelResult(
        max_concurrency=c,
        num_requests=n,
        completed=n,
        failed=0,
        duration=duration,
        p99_ttft_ms=p99_ttft,
        p99_tpot_ms=p99_tpot,
        goodput=None if good is None else good / duration,
    )


def test_level_meets_reasons() -> None:
    slo = Slo(p99_ttft_ms=2000, p99_tpot_ms=200)
    assert level_meets(_level(4, 1999.9, 200.0), slo) == (True, [])
    ok, reasons = level_meets(_level(64, 2380.4, 212.0), slo)
    assert not ok
    assert reasons == ["p99 TTFT 2380.4 ms > 2000 ms", "p99 TPOT 212.0 ms > 200 ms"]
    assert level_meets(_level(4, None, None), slo)[1] == [
        "p99 TTFT not measured (no completed request)",
        "p99 TPOT not measured (no completed request)",
    ]


def test_level_meets_per_request_limits_through_attainment() -> None:
    slo = Slo(ttft_ms=200, tpot_ms=20, min_attainment=0.9)
    assert level_meets(_level(16, None, None, n=32, good=29, duration=7.3), slo) == (True, [])
    ok, reasons = level_meets(_level(16, None, None, n=32, good=28, duration=7.3), slo)
    assert not ok
    assert reasons == ["28 of 32 requests (87.5 %) met TTFT ≤ 200 ms, TPOT ≤ 20 ms; needs 90 %"]
    ok, reasons = level_meets(_level(16, None, None), slo)
    assert not ok and reasons[0].startswith("goodput not measured")


def test_level_meets_counts_failed_requests_against_attainment() -> None:
    records = [_rec(i, 100, 10, t_send=0.01 * i) for i in range(7)]
    records.append(_rec(7, 100, 10).fail("HTTP 503"))
    lv = compute_level(records, max_concurrency=4, slo=Slo(ttft_ms=200, min_attainment=1.0))
    ok, reasons = level_meets(lv, Slo(ttft_ms=200, min_attainment=1.0))
    assert not ok and reasons[0].startswith("7 of 8 requests (87.5 %)")
    assert level_meets(lv, Slo(ttft_ms=200, min_attainment=0.875)) == (True, [])


# Seed 003 with MTP (server cap 48): p99 TPOT from per-request tok/s (123.1, 118.6, 84.4, 62.3,
# 65.7, 64.5), p99 TTFT jumping once C=64 queues behind the cap. TPOT is not monotonic in C.
SEED_003_MTP = [
    (1, 120.0, 8.1),
    (4, 150.0, 8.4),
    (16, 300.0, 11.8),
    (32, 500.0, 16.1),
    (64, 15000.0, 15.2),
    (128, 45000.0, 15.5),
]


def _sweep(rows: list[tuple[int, float, float]]) -> SweepResult:
    return SweepResult(
        config="mtp",
        server=ServerFacts(mode="simulated", max_running_requests=48),
        workload=Workload(),
        levels=[_level(c, ttft, tpot) for c, ttft, tpot in rows],
    )


@pytest.mark.parametrize(
    ("slo", "expected"),
    [
        (Slo(p99_ttft_ms=2000, p99_tpot_ms=20), 32),  # C=64 queues: TTFT 15 s
        (Slo(p99_tpot_ms=12), 16),
        (Slo(p99_tpot_ms=15.5), 16),  # C=64/128 meet it again after C=32 missed: not counted
        (Slo(p99_tpot_ms=8.0), None),  # already missed at C=1
        (Slo(p99_ttft_ms=60_000, p99_tpot_ms=100), 128),  # never missed: the largest C
    ],
)
def test_max_concurrency_within_slo_on_seed_003(slo: Slo, expected: int | None) -> None:
    assert max_concurrency_within_slo(_sweep(SEED_003_MTP), slo) == expected
    assert max_concurrency_within_slo(_sweep(SEED_003_MTP[::-1]), slo) == expected


def test_search_finds_the_seed_003_answer_in_three_measurements() -> None:
    by_c = {c: _level(c, ttft, tpot) for c, ttft, tpot in SEED_003_MTP}
    calls: list[int] = []

    def measure(c: int) -> LevelResult:
        calls.append(c)
        return by_c[c]

    found = search_max_level(measure, [128, 1, 4, 64, 16, 32], Slo(p99_ttft_ms=2000))
    assert (found.best, calls) == (32, [16, 64, 32])
    assert found.level is by_c[32] and found.measurements == 3
    assert found.misses == {64: ["p99 TTFT 15000.0 ms > 2000 ms"]}


def test_search_assumes_monotonic_degradation() -> None:
    # Seed 003's TPOT dips again past the cap: bisection lands on a level that met the SLO with
    # a miss above it (128), the upward scan stops at the first miss (16). Both as documented.
    by_c = {c: _level(c, ttft, tpot) for c, ttft, tpot in SEED_003_MTP}
    slo = Slo(p99_tpot_ms=15.5)
    assert search_max_level(by_c.__getitem__, list(by_c), slo).best == 128
    assert max_concurrency_within_slo(_sweep(SEED_003_MTP), slo) == 16


@pytest.mark.parametrize("n", [*range(1, 18), 31, 32, 33, 100])
def test_search_is_exact_and_bounded_for_every_threshold(n: int) -> None:
    candidates = [float(4 * k + 1) for k in range(n)]  # e.g. request rates
    bound = math.ceil(math.log2(n)) + 1
    for passing in range(n + 1):  # the first `passing` candidates meet the SLO
        limit = candidates[passing - 1] if passing else 0.0
        calls: list[float] = []

        def measure(x: float, limit: float = limit, calls: list[float] = calls) -> LevelResult:
            calls.append(x)
            return _level(1, p99_ttft=100.0 if x <= limit else 300.0, p99_tpot=None)

        found = search_max_level(measure, candidates, Slo(p99_ttft_ms=200))
        assert found.best == (candidates[passing - 1] if passing else None)
        assert len(calls) == len(set(calls)) <= bound, (n, passing, calls)


def test_async_search_matches_sync() -> None:
    by_c = {c: _level(c, ttft, tpot) for c, ttft, tpot in SEED_003_MTP}

    async def measure(c: int) -> LevelResult:
        await asyncio.sleep(0)
        return by_c[c]

    slo = Slo(p99_ttft_ms=2000, p99_tpot_ms=20)
    found = asyncio.run(search_max_level_async(measure, list(by_c), slo))
    assert (found.best, list(found.measured)) == (32, [16, 64, 32])


@pytest.mark.parametrize(
    ("candidates", "match"),
    [([], "no candidate levels"), ([0, 4], "> 0"), ([1, -2], "> 0"), ([1.0, math.inf], "> 0")],
)
def test_search_rejects_bad_candidates(candidates: list[float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        search_max_level(lambda c: _level(1, 1, 1), candidates, Slo(p99_ttft_ms=1))


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({}, "slo: an SLO needs at least one limit; set one or more of ttft_ms, tpot_ms"),
        ({"min_attainment": 0.9}, "an SLO needs at least one limit"),
        ({"ttft_ms": 0}, "slo.ttft_ms: Input should be greater than 0 (limits are milliseconds"),
        ({"tpot_ms": -5}, "slo.tpot_ms: Input should be greater than 0"),
        ({"p99_ttft_ms": math.inf}, "slo.p99_ttft_ms: Input should be a finite number"),
        ({"e2e_ms": math.nan}, "slo.e2e_ms: Input should be a finite number"),
        ({"p99_tpot_ms": "fast"}, "slo.p99_tpot_ms: Input should be a valid number"),
        ({"ttft_ms": 1, "min_attainment": 1.5}, "slo.min_attainment: Input should be less"),
        ({"ttft_ms": 1, "min_attainment": 0}, "slo.min_attainment: Input should be greater"),
        ({"ttft": 200}, "slo.ttft: unknown field; known fields: ttft_ms, tpot_ms, e2e_ms"),
    ],
)
def test_validation_errors_name_the_field(data: dict[str, object], expected: str) -> None:
    with pytest.raises(SloError) as err:
        load_slo(data)
    assert expected in str(err.value)


def test_validation_error_names_the_source_and_every_problem() -> None:
    with pytest.raises(SloError) as err:
        load_slo({"ttft_ms": -1, "tpot_ms": 0}, source="perf_tests/llmperf.toml [slo]")
    text = str(err.value)
    assert text.startswith("perf_tests/llmperf.toml [slo]: invalid SLO:")
    assert "[slo].ttft_ms:" in text and "[slo].tpot_ms:" in text


def test_slo_is_immutable_and_describes_itself() -> None:
    slo = load_slo({"ttft_ms": 2000, "tpot_ms": 100, "p99_ttft_ms": 2000, "p99_tpot_ms": 200})
    assert slo.describe() == (
        "TTFT ≤ 2000 ms, TPOT ≤ 100 ms per request (99 % of requests); "
        "p99 TTFT ≤ 2000 ms; p99 TPOT ≤ 200 ms"
    )
    with pytest.raises(ValueError):
        slo.ttft_ms = 1  # type: ignore[misc]


def test_sweep_and_level_compute_goodput_with_slo(sim_server: ServerThread) -> None:
    small = Workload(input_len=16, output_len=12)
    loose, tight = Slo(ttft_ms=60_000, tpot_ms=60_000), Slo(tpot_ms=1e-3)
    swept = run_sweep(sim_server.url, [1, 4], small, slo=loose)
    assert [lv.goodput for lv in swept.levels] == [lv.request_throughput for lv in swept.levels]
    assert max_concurrency_within_slo(swept, loose) == 4
    assert run_level(sim_server.url, 4, small, warmup=False, slo=tight).goodput == 0.0
    assert run_level(sim_server.url, 4, small, warmup=False).goodput is None
