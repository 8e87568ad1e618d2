"""The performance model's SGLang arithmetic: profiles, caps, KV pool, spec params, log lines."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_llmperf.sim.knobs import ServerKnobs
from pytest_llmperf.sim.perf_model import (
    SPEC_DRAFT_ADJUST_WARNING,
    SPEC_RESET_WARNING,
    SimConfigError,
    accept_distribution,
    auto_mem_fraction_static,
    auto_running_cap,
    resolve,
    speed_factor,
    step_time,
)
from pytest_llmperf.sim.profile import (
    DEFAULT_PROFILE,
    ProfileError,
    available_profiles,
    load_profile,
    profile_path,
)

SEED003 = "sglang-rtxpro6000x4-qwen35-122b-a10b"
SEED000 = "sglang-rtxpro6000-qwen36-27b"


def _resolve(profile: str = DEFAULT_PROFILE, **kw: object):
    return resolve(profile, ServerKnobs(**kw))  # type: ignore[arg-type]


# -- profiles ---------------------------------------------------------------------------------
def test_shipped_profiles_all_load() -> None:
    names = available_profiles()
    assert {DEFAULT_PROFILE, SEED003, SEED000} <= set(names)
    for name in names:
        assert load_profile(name).name == name


def test_default_profile_when_nothing_is_named() -> None:
    assert load_profile(None).name == DEFAULT_PROFILE
    model, _ = resolve(None, ServerKnobs())
    assert model.profile.name == DEFAULT_PROFILE


def test_profile_by_path(tmp_path: Path) -> None:
    src = json.loads(profile_path(DEFAULT_PROFILE).read_text())
    src["name"] = "mine"
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(src))
    assert load_profile(str(path)).name == "mine"


def test_bad_profile_names_file_and_field(tmp_path: Path) -> None:
    src = json.loads(profile_path(DEFAULT_PROFILE).read_text())
    src["step"]["base_ms"] = "fast"
    src["step"]["bogus"] = 1
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(src))
    with pytest.raises(ProfileError) as err:
        load_profile(str(path))
    msg = str(err.value)
    assert str(path) in msg and "step.base_ms" in msg and "step.bogus" in msg


def test_unknown_profile_lists_shipped_ones() -> None:
    with pytest.raises(ProfileError, match=DEFAULT_PROFILE):
        load_profile("no-such-profile")


def test_not_json_profile(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text("{nope")
    with pytest.raises(ProfileError, match="not valid JSON"):
        load_profile(str(path))


# -- running caps -------------------------------------------------------------------------------
@pytest.mark.parametrize("algo", ["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"])
def test_speculative_resets_auto_cap_to_48(algo: str) -> None:
    model, logs = _resolve(speculative_algorithm=algo)
    assert model.effective_max_running_requests == 48
    assert SPEC_RESET_WARNING in logs
    assert model.spec is not None
    assert model.spec.algorithm == ("EAGLE" if algo == "NEXTN" else algo)


def test_spec_warning_is_verbatim() -> None:
    assert SPEC_RESET_WARNING == (
        "Max running requests is reset to 48 for speculative decoding. You can override this "
        "by explicitly setting --max-running-requests."
    )


def test_explicit_max_running_requests_wins_over_spec_reset() -> None:
    model, logs = _resolve(speculative_algorithm="NEXTN", max_running_requests=128)
    assert model.effective_max_running_requests == 128
    assert SPEC_RESET_WARNING not in logs


def test_auto_cap_without_spec_follows_kv_pool() -> None:
    model, logs = _resolve()
    expected = auto_running_cap(model.max_total_num_tokens, model.context_len)
    assert model.effective_max_running_requests == expected
    assert SPEC_RESET_WARNING not in logs
    # SGLang's req_to_token pool: min(max(tokens/context*512, 2048), 4096), and tokens // 2.
    assert auto_running_cap(3_000, 4096) == 1_500  # tokens // 2
    assert auto_running_cap(10_000, 4096) == 2048  # the pool floor
    assert auto_running_cap(10**7, 4096) == 4096
    assert auto_running_cap(100_000, 10**6) == 2048


def test_dp_cap_is_total_across_dp() -> None:
    model, logs = _resolve(speculative_algorithm="EAGLE", dp_size=2)
    assert model.max_running_requests_per_dp == 24
    assert model.effective_max_running_requests == 48
    assert "max_running_requests=24," in logs[-1]
    explicit, _ = _resolve(max_running_requests=64, dp_size=4)
    assert explicit.max_running_requests_per_dp == 16
    assert explicit.effective_max_running_requests == 64
    assert explicit.kv_token_budget == 4 * explicit.max_total_num_tokens


def test_mamba_caps_seed000() -> None:
    plain, plogs = _resolve(SEED000, mem_fraction_static=0.85, context_length=8192)
    assert plain.effective_max_running_requests == 16
    assert any(
        line.startswith("Mamba Cache is allocated. max_mamba_cache_size: 48,") for line in plogs
    )
    mtp, _ = _resolve(
        SEED000, mem_fraction_static=0.92, context_length=8192, speculative_algorithm="NEXTN"
    )
    assert mtp.effective_max_running_requests == 4
    # The mamba pool caps an explicit flag too.
    forced, _ = _resolve(SEED000, max_running_requests=64)
    assert forced.effective_max_running_requests == 16


# -- memory ------------------------------------------------------------------------------------
def test_auto_mem_fraction_matches_sglang_formula() -> None:
    # H100 80 GB, TP8: 512 + 8192*1.5 + 512*2 + 8/8*1024 = 14848 MB reserved.
    assert auto_mem_fraction_static(80, 8192, 512, 8, None) == 0.819
    # Small GPU: no 10 GB floor; EAGLE adds 2 GB, STANDALONE 6 GB, NGRAM nothing.
    assert auto_mem_fraction_static(24, 2048, 24, 1, None) == round((24576 - 3760) / 24576, 3)
    base = auto_mem_fraction_static(24, 2048, 24, 1, None)
    assert auto_mem_fraction_static(24, 2048, 24, 1, "EAGLE") < base
    assert auto_mem_fraction_static(24, 2048, 24, 1, "STANDALONE") < auto_mem_fraction_static(
        24, 2048, 24, 1, "EAGLE"
    )
    assert auto_mem_fraction_static(24, 2048, 24, 1, "NGRAM") == base


def test_kv_budget_follows_memory_flags() -> None:
    plain, _ = _resolve(mem_fraction_static=0.8)
    fuller, _ = _resolve(mem_fraction_static=0.85)
    assert fuller.max_total_num_tokens > plain.max_total_num_tokens
    spec, _ = _resolve(mem_fraction_static=0.8, speculative_algorithm="EAGLE")
    assert spec.max_total_num_tokens < plain.max_total_num_tokens  # draft weights and KV
    capped, _ = _resolve(max_total_tokens=12_345)
    assert capped.max_total_num_tokens == 12_345


def test_not_enough_memory() -> None:
    with pytest.raises(SimConfigError, match="Not enough memory"):
        _resolve(mem_fraction_static=0.3)


def test_startup_log_lines_have_sglang_wording() -> None:
    model, logs = _resolve(chunked_prefill_size=4096)
    kv = [line for line in logs if line.startswith("KV Cache is allocated.")]
    assert len(kv) == 1
    assert re.fullmatch(
        rf"KV Cache is allocated\. #tokens: {model.max_total_num_tokens}, "
        r"K size: \d+\.\d\d GB, V size: \d+\.\d\d GB",
        kv[0],
    )
    assert re.fullmatch(
        rf"max_total_num_tokens={model.max_total_num_tokens}, chunked_prefill_size=4096, "
        r"max_prefill_tokens=16384, "
        rf"max_running_requests={model.max_running_requests_per_dp}, "
        rf"context_len={model.context_len}, available_gpu_mem=\d+\.\d\d GB",
        logs[-1],
    )
    assert any(re.fullmatch(r"Load weight begin\. avail mem=\d+\.\d\d GB", x) for x in logs)


# -- speculative parameters ----------------------------------------------------------------------
def test_spec_auto_params_and_adjustment() -> None:
    model, logs = _resolve(speculative_algorithm="EAGLE")
    assert model.spec is not None
    assert (model.spec.num_steps, model.spec.eagle_topk, model.spec.num_draft_tokens) == (3, 1, 4)
    assert SPEC_DRAFT_ADJUST_WARNING not in logs
    adj, logs = _resolve(
        speculative_algorithm="EAGLE",
        speculative_num_steps=2,
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=8,
    )
    assert adj.spec is not None and adj.spec.num_draft_tokens == 3
    assert SPEC_DRAFT_ADJUST_WARNING in logs


def test_unknown_spec_algorithm() -> None:
    with pytest.raises(SimConfigError, match="MEDUSA"):
        _resolve(speculative_algorithm="MEDUSA")


@pytest.mark.parametrize("spread", [0.0, 0.5, 1.0])
def test_accept_distribution_mean_is_exact(spread: float) -> None:
    mean, values, cdf = accept_distribution(2.6, 3, 3, spread)
    probs = [cdf[0]] + [b - a for a, b in zip(cdf, cdf[1:], strict=False)]
    assert values == (1, 2, 3, 4)
    assert sum(v * p for v, p in zip(values, probs, strict=True)) == pytest.approx(2.6, abs=1e-6)
    assert mean == pytest.approx(2.6, abs=1e-6)
    if spread == 0.0:
        assert probs[0] == pytest.approx(0) and probs[3] == pytest.approx(0)  # only 2 and 3
    # Fewer draft steps accept less on average.
    assert accept_distribution(2.6, 3, 1, spread)[0] < 2.0


# -- step time -----------------------------------------------------------------------------------
def test_step_time_shape() -> None:
    model, _ = _resolve(cuda_graph_max_bs=512)
    t1, t64, t128 = (step_time(model, b, 0) for b in (1, 64, 128))
    assert t1 < t64 < t128 < 128 * t1  # grows, sublinearly
    assert step_time(model, 64, 100_000) > t64  # attended KV costs time
    assert step_time(model, 64, 0, prefill_tokens=4000) > t64  # mixed prefill chunk
    spec, _ = _resolve(cuda_graph_max_bs=512, speculative_algorithm="NEXTN")
    assert step_time(spec, 16, 0) > step_time(model, 16, 0)
    # Verify cost grows with batch x draft tokens: the spec overhead widens with batch.
    assert step_time(spec, 48, 0) - step_time(model, 48, 0) > step_time(spec, 4, 0) - step_time(
        model, 4, 0
    )


def test_beyond_cuda_graph_max_bs_is_slower() -> None:
    model, _ = _resolve(cuda_graph_max_bs=32)
    within = step_time(model, 32, 0)
    beyond = step_time(model, 33, 0)
    assert beyond > within * (model.no_cuda_graph_factor - 0.01)
    eager, _ = _resolve(disable_cuda_graph=True)
    assert step_time(eager, 8, 0) == pytest.approx(
        step_time(model, 8, 0) * model.no_cuda_graph_factor
    )


def test_slowdown_time_scale_and_jitter() -> None:
    base, _ = _resolve()
    slow, _ = _resolve(sim_slowdown=((4, 8, 1.1),))
    assert step_time(slow, 4, 1000) == pytest.approx(step_time(base, 4, 1000) * 1.1)
    assert step_time(slow, 9, 1000) == pytest.approx(step_time(base, 9, 1000))
    stretched, _ = _resolve(sim_time_scale=2.0)
    assert step_time(stretched, 16, 5000) == pytest.approx(2 * step_time(base, 16, 5000))
    jittered, logs = _resolve(sim_jitter=0.05, sim_seed=3)
    f = speed_factor(3, 0.05)
    assert f == jittered.speed_factor and 0.95 <= f <= 1.05
    assert step_time(jittered, 16, 5000) == pytest.approx(f * step_time(base, 16, 5000))
    factors = {speed_factor(seed, 0.05) for seed in range(20)}
    assert len(factors) == 20 and all(0.95 <= x <= 1.05 for x in factors)
    assert speed_factor(7, 0.05) == speed_factor(7, 0.05)
    assert speed_factor(7, 0.0) == 1.0


def test_tp_size_default_means_profile_deployment() -> None:
    model, _ = _resolve(SEED003)
    assert model.tp_size == 4
    knobs = replace(ServerKnobs(), tp_size=8)
    wider, _ = resolve(SEED003, knobs)
    assert wider.tp_size == 8 and wider.max_total_num_tokens > model.max_total_num_tokens
