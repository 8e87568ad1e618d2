"""Length mixes: per-request lengths around input_len/output_len, in SGLang's or vLLM's sense."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from pytest_llmperf.base.results import LevelResult, Workload
from pytest_llmperf.core.lengths import length_bounds, request_lengths
from pytest_llmperf.core.plan import plan_level
from pytest_llmperf.core.sweep import run_level
from pytest_llmperf.verdicts.validity import check_level

from .fake_server import FakeServer

MIX = Workload(input_len=100, output_len=40, range_ratio=0.5)


def test_bounds_follow_each_tools_convention() -> None:
    # SGLang bench_serving: randint(int(L*r), L + 1); vLLM: [floor(L(1-r)), ceil(L(1+r))]
    assert length_bounds(100, 0.5, "sglang") == (50, 100)
    assert length_bounds(100, 0.5, "vllm") == (50, 150)
    assert length_bounds(100, 1.0, "sglang") == (100, 100)  # r = 1: fixed in SGLang
    assert length_bounds(100, 0.0, "vllm") == (100, 100)  # r = 0: fixed in vLLM
    assert length_bounds(100, 0.0, "sglang") == (1, 100)  # never an empty prompt
    assert length_bounds(7, 0.25, "vllm") == (5, 9)


@pytest.mark.parametrize(("convention", "lo", "hi"), [("sglang", 50, 100), ("vllm", 50, 150)])
def test_lengths_are_seeded_per_ordinal_and_fill_the_range(
    convention: str, lo: int, hi: int
) -> None:
    wl = MIX.model_copy(update={"range_convention": convention})
    lens = [request_lengths(wl, n) for n in range(400)]
    ins = [i for i, _ in lens]
    assert min(ins) >= lo and max(ins) <= hi
    assert min(ins) < lo + 5 and max(ins) > hi - 5  # uniform over the whole range
    assert len(set(ins)) > 30
    assert request_lengths(wl, 123) == lens[123]  # the ordinal alone decides
    other = wl.model_copy(update={"seed": 1})
    assert [request_lengths(other, n) for n in range(400)] != lens


def test_plan_gives_each_request_its_own_lengths_and_distinct_prompts() -> None:
    plan = plan_level(MIX, 16, start=10)
    assert [len(p) for p in plan.prompts] == plan.input_lens
    assert plan.input_lens == [request_lengths(MIX, n)[0] for n in range(10, 26)]
    assert plan.output_lens == [request_lengths(MIX, n)[1] for n in range(10, 26)]
    assert len({p[0] for p in plan.prompts}) == 16  # the first token still names the ordinal
    assert plan_level(MIX, 4, start=12).prompts == plan.prompts[2:6]


def test_key_records_the_mix_and_defaults_stay_out() -> None:
    assert Workload().key() == "sglang-in1000-out1000"
    assert Workload(range_convention="vllm").key() == "sglang-in1000-out1000"
    assert MIX.key() == "sglang-in100-out40-rr0.5sglang"
    vllm = MIX.model_copy(update={"range_convention": "vllm"})
    assert vllm.key() == "sglang-in100-out40-rr0.5vllm"


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"range_ratio": 1.0, "range_convention": "vllm"}, "< 1 with range_convention"),
        ({"range_ratio": 1.5}, "must be between 0 and 1, got 1.5"),
        (
            {"range_ratio": 0.5, "kind": "shared-prefix", "prefix_len": 1, "prefix_groups": 1},
            "range_ratio needs workload = 'random'",
        ),
    ],
)
def test_bad_mixes_say_what_is_wrong(fields: dict, needle: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValidationError, match=needle):
        Workload(**fields)


def test_a_mixed_level_sends_each_max_tokens_and_is_valid_at_zero_slack(
    fake_server: FakeServer,
) -> None:
    wl = MIX.model_copy(update={"requests_per_level": 12})
    lv = run_level(fake_server.url, 4, wl, warmup=False)
    plan = plan_level(wl, 12)
    sent = [b["sampling_params"]["max_new_tokens"] for b in fake_server.state.bodies]
    assert sorted(sent) == sorted(plan.output_lens)
    assert all(b["sampling_params"]["ignore_eos"] for b in fake_server.state.bodies)
    assert lv.expected_output_tokens == sum(plan.output_lens) == lv.total_output_tokens
    assert lv.expected_input_tokens == sum(plan.input_lens) == lv.total_input_tokens
    assert check_level(lv, wl) == []


def test_validity_checks_the_requests_own_targets_not_the_level_length() -> None:
    lv = LevelResult(
        max_concurrency=1, num_requests=2, completed=2, failed=0, duration=1.0,
        total_input_tokens=150, total_output_tokens=60,
        expected_input_tokens=150, expected_output_tokens=70,
    )  # fmt: skip
    reasons = check_level(lv, MIX)
    assert len(reasons) == 1
    assert "expected 70 (the sum of each request's max_tokens)" in reasons[0]
    assert "short" in reasons[0]
    lv.expected_output_tokens = 60
    assert check_level(lv, MIX) == []  # 2 x 100 in / 2 x 40 out would have failed both
