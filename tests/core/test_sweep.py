"""Sweeps against the simulator and the local fake server: closed-loop concurrency, per-level
probes, notes."""

from __future__ import annotations

import asyncio

import pytest

from pytest_llmperf.base.results import Workload
from pytest_llmperf.core import plan as plan_module
from pytest_llmperf.core.sweep import (
    Progress,
    SweepError,
    run_level,
    run_sweep,
    run_sweep_async,
    validate_levels,
)
from pytest_llmperf.core.workload import build_prompts
from tests.sim_servers import ServerThread

from .fake_server import FakeServer

SMALL = Workload(input_len=16, output_len=12)


def test_closed_loop_keeps_exactly_c_in_flight(fake_server: FakeServer) -> None:
    fake_server.config.step_s = 0.004
    lv = run_level(fake_server.url, 8, SMALL, warmup=False)
    assert fake_server.state.max_running == 8  # never more than C (and C was reached)
    assert lv.num_requests == 16 == fake_server.state.requests
    assert lv.completed == 16 and lv.total_output_tokens == 16 * 12
    assert 1.0 < lv.concurrency <= 8.0 + 1e-9


def test_sweep_levels_probes_and_notes(fake_server: FakeServer) -> None:
    fake_server.config.cap = 4
    fake_server.config.accept_length = 2.25
    fake_server.config.tokens_per_event = (1, 3)
    seen: list[Progress] = []
    result = run_sweep(fake_server.url, [1, 8], SMALL, progress=seen.append, config_name="t")
    assert result.config == "t" and result.server.max_running_requests == 4
    assert [lv.max_concurrency for lv in result.levels] == [1, 8]
    assert fake_server.state.requests == 1 + 4 + 16  # warm-up, then 4 at C=1, 2*C above
    assert fake_server.state.flushes == 2  # once before each level
    c1, c8 = result.levels
    assert not c1.queueing and c8.queueing
    assert "C=8 > max running requests 4: queueing" in c8.notes
    assert c1.accept_length == 2.25
    assert c8.client is not None and c8.client.transport.startswith("llhttp-stream/")
    done = [p for p in seen if p.phase == "level-done"]
    assert [(p.concurrency, p.done, p.total) for p in done] == [(1, 4, 4), (8, 16, 16)]


def test_every_level_sends_fresh_prompts_deterministically(fake_server: FakeServer) -> None:
    run_sweep(fake_server.url, [2, 4], SMALL)
    bodies = [tuple(b["input_ids"]) for b in fake_server.state.bodies]
    warm, level2, level4 = bodies[0], bodies[1:5], bodies[5:]
    assert len(level4) == 8
    # no measured prompt shares even its first token with any earlier prompt
    firsts = [b[0] for b in bodies]
    assert len(set(firsts)) == len(firsts) == 13
    fake_server.reset()
    run_sweep(fake_server.url, [2, 4], SMALL)  # the same command sends the same prompts
    again = [tuple(b["input_ids"]) for b in fake_server.state.bodies]
    # per level, in any order: concurrent requests reach the server in whatever order they do
    assert again[0] == warm
    assert sorted(again[1:5]) == sorted(level2) and sorted(again[5:]) == sorted(level4)
    fake_server.reset()
    # a later measurement of the same server starts past them: nothing repeats
    run_level(fake_server.url, 4, SMALL, prompt_start=12)
    again = [tuple(b["input_ids"]) for b in fake_server.state.bodies]
    assert again[0] != warm and not set(again[1:]) & set(level2 + level4)


@pytest.mark.parametrize("backend", ["sglang", "openai"])
def test_cached_tokens_reach_the_level(fake_server: FakeServer, backend: str) -> None:
    fake_server.config.cached_tokens = 5
    w = Workload(backend=backend, input_len=16, output_len=12)  # type: ignore[arg-type]
    lv = run_level(fake_server.url, 2, w, warmup=False)
    assert lv.completed == 4 and lv.total_cached_tokens == 4 * 5


def test_legacy_server_info_and_busy_flush(fake_server: FakeServer) -> None:
    fake_server.config.legacy_info_only = True
    fake_server.config.flush_status = 400
    result = run_sweep(fake_server.url, [2], SMALL)
    assert result.server.version == "0.0-fake"
    assert any("flush_cache refused" in n for n in result.levels[0].notes)


def test_failed_requests_counted_not_measured(fake_server: FakeServer) -> None:
    fake_server.config.scenario = "cut"
    fake_server.config.fail_every = 3
    lv = run_level(fake_server.url, 4, SMALL, warmup=False)
    assert lv.failed == 2 and lv.completed == 6
    assert lv.total_output_tokens == 6 * 12
    assert lv.errors and "stream cut" in lv.errors[0]


def test_warmup_failure_raises(fake_server: FakeServer) -> None:
    fake_server.config.scenario = "http_500"
    with pytest.raises(SweepError, match="warm-up request .* failed: HTTP 500"):
        run_sweep(fake_server.url, [1], SMALL)


def test_unreachable_server_raises_sweep_error() -> None:
    with pytest.raises(SweepError, match="warm-up"):
        run_sweep("http://127.0.0.1:9", [1], SMALL)


def test_open_loop_poisson_records_schedule_lag(sim_server: ServerThread) -> None:
    w = Workload(input_len=16, output_len=8, request_rate=200.0, requests_per_level=20)
    lv = run_level(sim_server.url, 4, w, warmup=False)
    assert lv.completed == 20 and lv.schedule_lag_p99_ms is not None
    assert any("open loop" in n for n in lv.notes)


def test_run_sweep_works_inside_a_running_loop(sim_server: ServerThread) -> None:
    async def inside() -> int:
        return len(run_sweep(sim_server.url, [1], SMALL).levels)

    assert asyncio.run(inside()) == 1


def test_async_api_and_metrics_scrape(fake_server: FakeServer) -> None:
    fake_server.config.step_s = 0.06
    result = asyncio.run(run_sweep_async(fake_server.url, [2], SMALL, scrape_metrics=True))
    metrics = result.levels[0].server_metrics
    assert metrics is not None and metrics["max_running_requests"] >= 1


@pytest.mark.parametrize("levels", [[], [0], [4, -1]])
def test_bad_levels_rejected(levels: list[int]) -> None:
    with pytest.raises(ValueError, match="concurrency|levels"):
        validate_levels(levels)


def test_chat_prompts_sized_to_the_servers_count(fake_server: FakeServer) -> None:
    w = Workload(backend="openai-chat", input_len=30, output_len=6)
    fake_server.config.cached_tokens = 4  # the template prefix, served from cache
    lv = run_level(fake_server.url, 2, w)
    # the fake wraps each message in 4 template tokens: content 26 tokens, server counts 30
    assert lv.completed == 4 and lv.total_input_tokens == 4 * 30
    assert lv.prompt_overhead_tokens == 5  # template + the prompt's number
    from pytest_llmperf.verdicts.validity import check_level

    assert check_level(lv, w) == []  # template cache hits are expected, not invalid
    probes = fake_server.state.bodies[1:3]  # after the warm-up
    assert all(b["max_completion_tokens"] == 1 for b in probes)


def test_a_level_sharded_over_client_processes_merges_exactly(fake_server: FakeServer) -> None:
    fake_server.config.step_s = 0.004
    fake_server.config.tokens_per_event = (1, 3)
    lv = run_level(fake_server.url, 6, SMALL, warmup=False, client_processes=2)
    assert fake_server.state.max_running == 6  # C split over the processes, all in flight
    assert lv.num_requests == 12 == fake_server.state.requests == lv.completed
    assert lv.total_output_tokens == 12 * 12
    # every request once: the shards sent disjoint prompts, merged by index
    sent = sorted(tuple(b["input_ids"]) for b in fake_server.state.bodies)
    assert len(set(sent)) == 12
    assert lv.client is not None and lv.client.transport.endswith("x2 processes")
    assert lv.client.cpu_us_per_output_token is not None
    # one time base: the merged level's duration covers the shards' requests and no more
    assert 0 < lv.duration < 5 and lv.mean_ttft_ms is not None and lv.mean_ttft_ms < 1000


def test_a_level_past_the_prebuilt_budget_sends_the_same_prompts_and_says_so(
    fake_server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bodies past the budget are built as they are sent: the server gets the prompts an
    eager build gives, and the level says its client CPU includes the building."""
    monkeypatch.setattr(plan_module, "PREBUILD_TOKENS", 3 * SMALL.input_len)
    lv = run_level(
        fake_server.url, 2, SMALL.model_copy(update={"requests_per_level": 10}), warmup=False
    )
    assert lv.completed == 10
    sent = sorted(tuple(b["input_ids"]) for b in fake_server.state.bodies)
    assert sent == sorted(tuple(p) for p in build_prompts(SMALL, 10))
    assert (
        f"7 request bodies were built while the level ran (past the first {3 * 16} prompt "
        "tokens): the client's CPU figures include them"
    ) in lv.notes
