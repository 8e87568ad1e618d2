"""shared-prefix prompts: G seeded prefixes of P tokens, fresh suffixes, primed per group."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from pytest_llmperf.base.results import Workload
from pytest_llmperf.core.workload import build_prompts, prime_prompts, prompt_ids
from pytest_llmperf.sim.prefix_cache import BLOCK, PrefixCache

SP = Workload(kind="shared-prefix", prefix_len=1000, prefix_groups=8, input_len=1100)


def test_prompts_share_their_group_prefix_and_nothing_else() -> None:
    prompts = build_prompts(SP, 24)
    assert all(len(p) == 1100 for p in prompts)
    for i, p in enumerate(prompts):
        assert p[:1000] == prompts[i % 8][:1000]  # same group, same prefix
        assert p[1000:] == prompt_ids(i, 100, SP.seed)  # a fresh suffix, as random prompts
    heads = {tuple(p[:1000]) for p in prompts}
    assert len(heads) == 8
    assert build_prompts(SP, 3, start=5) == prompts[5:8]  # deterministic by ordinal


def test_priming_one_prompt_per_group_then_every_prompt_hits_its_prefix() -> None:
    primes = prime_prompts(SP)
    assert len(primes) == 8 and all(len(p) == 1001 for p in primes)
    cache = PrefixCache(1_000_000)
    assert [cache.match_and_insert(p) for p in primes] == [0] * 8
    cached = [cache.match_and_insert(p) for p in build_prompts(SP, 16)]
    # the simulator caches whole 16-token blocks, as vLLM's pages do: 992 of 1000
    assert cached == [1000 // BLOCK * BLOCK] * 16
    assert sum(cached) / (16 * 1100) == pytest.approx(0.9018, abs=1e-4)
    assert SP.expected_cache_hit_rate() == pytest.approx(1000 / 1100)


def test_random_workload_primes_nothing_and_expects_no_hits() -> None:
    assert prime_prompts(Workload()) == []
    assert Workload().expected_cache_hit_rate() == 0.0


def test_keys_name_the_shared_prefix_and_leave_defaults_alone() -> None:
    assert Workload().key() == "sglang-in1000-out1000"
    assert SP.key() == "sglang-in1100-out1000-sp8x1000"
    assert SP.model_copy(update={"prefix_groups": 4}).key() != SP.key()


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"kind": "shared-prefix", "prefix_len": 1000}, "needs prefix_len and prefix_groups"),
        ({"kind": "shared-prefix", "prefix_len": 1000, "prefix_groups": 2}, "below input_len"),
        ({"prefix_len": 10}, "need workload = 'shared-prefix'"),
        (
            {
                "kind": "shared-prefix",
                "prefix_len": 10,
                "prefix_groups": 2,
                "backend": "openai-chat",
            },
            "sends token ids",
        ),
    ],
)
def test_bad_shared_prefix_settings_say_what_is_wrong(fields: dict, needle: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValidationError, match=needle):
        Workload(**fields)
