"""multi-turn: conversations re-send their history; think time is seeded and bounded."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from pytest_llmperf.base.results import Workload
from pytest_llmperf.core.conversations import conversation_prompts, think_times
from pytest_llmperf.core.plan import plan_level
from pytest_llmperf.core.sweep import level_deadline_s, run_level
from pytest_llmperf.sim.prefix_cache import BLOCK, PrefixCache

from .fake_server import FakeServer

MT = Workload(kind="multi-turn", turns=4, input_len=100, output_len=20, think_time_s=0.05)


def test_each_turn_resends_the_previous_prompt_then_a_reply_and_a_new_message() -> None:
    prompts = conversation_prompts(MT, 7)
    assert [len(p) for p in prompts] == [100, 220, 340, 460]  # t*U + (t-1)*O
    for prev, cur in zip(prompts, prompts[1:], strict=False):
        assert cur[: len(prev)] == prev
    assert conversation_prompts(MT, 7) == prompts  # seeded
    assert conversation_prompts(MT, 8)[0][0] != prompts[0][0]  # conversations share nothing
    other_seed = conversation_prompts(MT.model_copy(update={"seed": 1}), 7)
    assert other_seed[1][100:] != prompts[1][100:]


def test_think_times_are_seeded_bounded_and_zero_before_the_first_turn() -> None:
    draws = [think_times(MT, k) for k in range(50)]
    assert all(d[0] == 0.0 and all(0.0 <= x <= 0.05 for x in d) for d in draws)
    assert len({tuple(d) for d in draws}) == 50
    assert think_times(MT, 3) == draws[3]
    assert think_times(MT.model_copy(update={"think_time_s": 0.0}), 3) == [0.0] * 4


def test_the_expected_hit_rate_is_the_history_share_and_a_prefix_cache_serves_it() -> None:
    # prompts 100, 220, 340, 460 = 1120 tokens; history 100 + 220 + 340 = 660
    assert MT.expected_cache_hit_rate() == pytest.approx(660 / 1120)
    plan = plan_level(MT, 3, start=5)
    assert plan.turns == 4 and len(plan.prompts) == 12 and plan.ordinals == 3
    cache = PrefixCache(1_000_000)
    hits = [cache.match_and_insert(p) for p in plan.prompts]
    assert hits[:4] == [0, 100 // BLOCK * BLOCK, 220 // BLOCK * BLOCK, 340 // BLOCK * BLOCK]
    assert hits[4:8] == hits[:4]


def test_key_and_settings_that_do_not_fit() -> None:
    assert MT.key() == "sglang-in100-out20-mt4-think0.05"
    assert MT.model_copy(update={"think_time_s": 0.0}).key() == "sglang-in100-out20-mt4"
    for fields, needle in [
        ({"kind": "multi-turn"}, "needs turns"),
        ({"turns": 3}, "needs turns"),
        ({"think_time_s": 1.0}, "turns and think_time_s need it"),
        ({"kind": "multi-turn", "turns": 2, "backend": "openai-chat"}, "sends token ids"),
        ({"kind": "multi-turn", "turns": 2, "request_rate": 1.0}, "without request_rate"),
        ({"kind": "multi-turn", "turns": 1}, "turns per conversation must be from 2 to 64, got 1"),
    ]:
        with pytest.raises(ValidationError, match=needle):
            Workload(**fields)


def test_the_level_deadline_covers_every_turn_and_think_time() -> None:
    one = Workload(requests_per_level=2, request_timeout_s=10.0)
    mt = MT.model_copy(update={"requests_per_level": 2, "request_timeout_s": 10.0})
    assert level_deadline_s(mt, 2) - level_deadline_s(one, 2) == pytest.approx(3 * 10 + 4 * 0.05)


def test_a_conversation_sends_its_turns_in_order_c_at_a_time(fake_server: FakeServer) -> None:
    fake_server.config.step_s = 0.002
    wl = MT.model_copy(update={"requests_per_level": 4})
    lv = run_level(fake_server.url, 2, wl, warmup=False)
    assert lv.completed == 16 and lv.total_output_tokens == 16 * 20
    assert fake_server.state.max_running <= 2
    sent = [b["input_ids"] for b in fake_server.state.bodies]
    plan = plan_level(wl, 4)
    for k in range(4):
        turns = [sent.index(list(plan.prompts[4 * k + t])) for t in range(4)]
        assert turns == sorted(turns)  # turn t leaves after turn t-1
    assert lv.ttft_by_turn_ms is not None and len(lv.ttft_by_turn_ms) == 4
    assert lv.expected_input_tokens == 4 * 1120 == lv.total_input_tokens
