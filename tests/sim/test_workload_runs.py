"""Workloads end to end on the simulator (real engine model and prefix cache).

A dataset file's prompts are counted by the server; a multi-turn level's re-sent history is
served from the prefix cache at about the expected share, turn by turn.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_llmperf.base.results import Workload
from pytest_llmperf.core.sweep import run_level
from pytest_llmperf.sim.args import parse_args
from pytest_llmperf.sim.server import SimServer
from pytest_llmperf.verdicts.validity import check_level

from .conftest import ServerThread, SimProcess, profile_args

SMALL = Path(__file__).resolve().parents[1] / "data" / "sharegpt_small.json"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProcess]:
    """Its own process, as a user's server is: a server thread here would share the client's
    interpreter lock, and the client's loop lag (a validity check) would measure the thread."""
    proc = SimProcess(profile_args(), tmp_path_factory.mktemp("sim") / "sim.log")
    try:
        proc.wait_healthy()
        yield proc
    finally:
        proc.stop()


def test_a_sharegpt_file_runs_with_prompt_tokens_from_the_server(sim: SimProcess) -> None:
    wl = Workload(dataset=str(SMALL), requests_per_level=12, dataset_output_len=16)
    lv = run_level(sim.url, 4, wl, warmup=False, details=True)
    assert lv.completed == 12 and lv.total_output_tokens == 12 * 16
    assert lv.details is not None
    # the simulator counts words: the ordinal tag plus the human turn's words
    words = sorted(1 + len(p.split()) for p in _prompts(wl))
    assert sorted(lv.details.input_lens) == words
    assert lv.expected_input_tokens is None and lv.expected_output_tokens == 12 * 16
    assert check_level(lv, wl) == []


def _prompts(wl: Workload) -> list[str]:
    from pytest_llmperf.core.plan import plan_level

    return [str(p).split(" ", 1)[1] for p in plan_level(wl, 12).prompts]


def test_multi_turn_history_is_served_from_the_prefix_cache(sim: SimProcess) -> None:
    wl = Workload(
        kind="multi-turn", turns=4, input_len=128, output_len=16, think_time_s=0.01,
        requests_per_level=8,
    )  # fmt: skip
    lv = run_level(sim.url, 4, wl, warmup=False)
    assert lv.completed == 32 and check_level(lv, wl) == []
    # history per conversation: 128 + 272 + 416 of 1376 prompt tokens (all multiples of 16)
    assert wl.expected_cache_hit_rate() == pytest.approx(816 / 1376)
    assert lv.cache_hit_rate == pytest.approx(816 / 1376)
    assert lv.ttft_by_turn_ms is not None and len(lv.ttft_by_turn_ms) == 4
    assert all(t is not None and t > 0 for t in lv.ttft_by_turn_ms)


@pytest.mark.parametrize("metrics", [True, False])
def test_without_a_cache_report_the_hit_rate_comes_from_metrics(metrics: bool) -> None:
    """OpenAI routes carry no cached_tokens without --enable-cache-report: the level reads
    SGLang's counters from /metrics instead (and has no rate without them)."""
    flags = [*profile_args(), *(["--enable-metrics"] if metrics else [])]
    st = ServerThread(SimServer(parse_args(flags).knobs)).start()
    try:
        wl = Workload(
            kind="multi-turn", turns=3, input_len=128, output_len=16, backend="openai",
            requests_per_level=4,
        )  # fmt: skip
        lv = run_level(st.url, 2, wl, warmup=False)
    finally:
        st.stop()
    assert lv.completed == 12 and lv.total_cached_tokens == 0
    if metrics:
        assert lv.cache_hit_rate == pytest.approx(wl.expected_cache_hit_rate())
        assert any("/metrics counters" in n for n in lv.notes)
    else:
        assert lv.cache_hit_rate == 0.0  # what the responses said; nothing to fall back on
