"""The simulator's performance model: SGLang's startup arithmetic plus a step-time function.

``resolve(profile, knobs)`` does what SGLang does between argv and "ready": it picks the auto
defaults (``mem_fraction_static``, ``chunked_prefill_size``, ``cuda_graph_max_bs``), sizes the KV
pool, applies the running-request caps (the speculative 48 reset, the hybrid-Mamba slot cap, DP
division) and chooses speculative parameters. It returns a frozen ``ResolvedModel`` and the log
lines the real server prints with those values. Everything here is pure arithmetic so it can be
tested without an engine; ``step_time`` is the one formula the engine's hot loop inlines.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from pytest_llmperf.base.errors import InputError
from pytest_llmperf.sim.knobs import ServerKnobs
from pytest_llmperf.sim.noise import NoiseSettings, resolve_noise
from pytest_llmperf.sim.profile import Profile, load_profile

GIB = float(1 << 30)
SPEC_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
SPEC_RUNNING_CAP = 48
DEFAULT_MAX_PREFILL_TOKENS = 16384  # SGLang's --max-prefill-tokens default
CUDA_CONTEXT_GB = 0.5  # memory the CUDA context takes before weights load (for the log lines)

# Verbatim from SGLang v0.5.9 server_args.py (_handle_speculative_decoding) and v0.5.23
# arg_groups/speculative_hook.py.
SPEC_RESET_WARNING = (
    "Max running requests is reset to 48 for speculative decoding. "
    "You can override this by explicitly setting --max-running-requests."
)
# Verbatim from SGLang server_args.py (_handle_speculative_decoding).
SPEC_DRAFT_ADJUST_WARNING = (
    "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 "
    "when speculative_eagle_topk == 1"
)


class SimConfigError(InputError):
    """The flags and the profile do not make a server SGLang would start."""


@dataclass(frozen=True)
class SpecParams:
    """Resolved speculative decoding: what the server reports and how steps accept tokens."""

    algorithm: str  # as reported by /server_info (NEXTN is rewritten to EAGLE)
    num_steps: int
    eagle_topk: int
    num_draft_tokens: int
    accept_length_mean: float
    # Accept-length law over 1..num_steps+1: values and cumulative probabilities.
    accept_values: tuple[int, ...]
    accept_cdf: tuple[float, ...]
    draft_step_s: float  # per draft forward, fixed part
    draft_per_seq_s: float  # per draft forward, per running sequence
    verify_per_token_s: float  # per sequence per extra draft token verified
    overhead_s: float


@dataclass(frozen=True)
class ResolvedModel:
    """A profile under a set of flags: the numbers the scheduler and the step clock use."""

    profile: Profile
    knobs: ServerKnobs
    tp_size: int
    dp_size: int
    gpu_memory_gb: float
    mem_fraction_static: float
    context_len: int
    chunked_prefill_size: int  # -1 = disabled (whole prompts, up to max_prefill_tokens)
    max_prefill_tokens: int
    cuda_graph_max_bs: int
    cuda_graph_enabled: bool
    max_total_num_tokens: int  # per DP worker, as SGLang logs and reports it
    kv_token_budget: int  # summed over DP workers: what the simulator's admission uses
    max_running_requests_per_dp: int
    effective_max_running_requests: int  # summed over DP workers
    mamba_cap_per_dp: int | None
    spec: SpecParams | None
    # Step coefficients in seconds, speed factor and time scale already applied.
    base_s: float
    per_seq_s: float
    per_seq_exponent: float
    per_kv_token_s: float
    no_cuda_graph_factor: float
    prefill_per_token_s: float
    prefill_base_s: float
    step_jitter: float
    speed_factor: float  # >1 = slower: --sim-jitter's factor x the launch speed factor
    time_scale: float
    slowdown: tuple[tuple[int, int, float], ...]
    memory_gb: dict[str, float] = field(default_factory=dict)  # weight/kvcache/graph per GPU
    noise: NoiseSettings | None = None  # shared-GPU noise (sim/noise.py); None: quiet


def gpu_memory_defaults(gpu_memory_gb: float, tp_size: int) -> tuple[int, int]:
    """SGLang v0.5.9 ``_handle_gpu_memory_settings``: (chunked_prefill_size, cuda_graph_max_bs)."""
    if gpu_memory_gb < 20:
        return 2048, 8
    if gpu_memory_gb < 35:
        return 2048, 24 if tp_size < 4 else 80
    if gpu_memory_gb < 60:
        return 4096, 32 if tp_size < 4 else 160
    if gpu_memory_gb < 160:
        return 8192, 256 if tp_size < 4 else 512
    return 16384, 512


def auto_mem_fraction_static(
    gpu_memory_gb: float,
    chunked_prefill_size: int,
    cuda_graph_max_bs: int,
    tp_size: int,
    speculative_algorithm: str | None,
) -> float:
    """SGLang v0.5.9's default ``mem_fraction_static`` (all in MB, as there)."""
    gpu_mem = gpu_memory_gb * 1024
    reserved = 512.0
    reserved += max(chunked_prefill_size, 2048) * 1.5
    reserved += cuda_graph_max_bs * 2
    reserved += tp_size * 1 / 8 * 1024  # pp_size = 1
    if gpu_mem > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    if speculative_algorithm is not None:
        if speculative_algorithm == "STANDALONE":
            reserved += 6 * 1024
        elif speculative_algorithm != "NGRAM":
            reserved += 2 * 1024
    return round((gpu_mem - reserved) / gpu_mem, 3)


def auto_running_cap(max_total_num_tokens: int, context_len: int) -> int:
    """SGLang's auto ``max_running_requests`` per DP worker from the KV pool size.

    ``req_to_token_pool`` size is ``min(max(int(tokens / context_len * 512), 2048), 4096)`` and the
    cap is ``min(tokens // 2, that)`` (model_runner / model_runner_kv_cache_mixin).
    """
    pool = min(max(int(max_total_num_tokens / context_len * 512), 2048), 4096)
    return max(1, min(max_total_num_tokens // 2, pool))


def geometric_alpha(mean: float, num_steps: int) -> float:
    """Per-draft-token acceptance alpha with 1 + alpha + ... + alpha**num_steps == mean."""
    if mean >= num_steps + 1:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(mid**i for i in range(num_steps + 1)) < mean:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def accept_distribution(
    mean_at_ref: float, ref_steps: int, num_steps: int, spread: float
) -> tuple[float, tuple[int, ...], tuple[float, ...]]:
    """Accept-length law for ``num_steps`` draft steps: (mean, values, cdf).

    The truncated geometric chain (each draft token accepted with probability alpha if the
    previous one was) is mixed with a two-point law at the same mean; ``spread`` is the chain's
    weight. Both parts have the same mean, so the mixture's mean is exact.
    """
    alpha = geometric_alpha(mean_at_ref, ref_steps)
    k = num_steps
    chain = [alpha ** (j - 1) * (1 - alpha) for j in range(1, k + 1)] + [alpha**k]
    mean = sum((j + 1) * p for j, p in enumerate(chain))
    low = math.floor(mean)
    frac = mean - low
    tight = [0.0] * (k + 1)
    tight[low - 1] += 1 - frac
    if frac > 0:
        tight[min(low, k)] += frac
    probs = [spread * c + (1 - spread) * t for c, t in zip(chain, tight, strict=True)]
    cdf: list[float] = []
    acc = 0.0
    for p in probs:
        acc += p
        cdf.append(acc)
    cdf[-1] = 1.0
    return mean, tuple(range(1, k + 2)), tuple(cdf)


def speed_factor(seed: int, jitter: float) -> float:
    """One run-to-run speed factor per process: uniform in [1-jitter, 1+jitter] from the seed."""
    if jitter <= 0:
        return 1.0
    return 1.0 + random.Random(f"sim-speed-{seed}").uniform(-jitter, jitter)


def _resolve_spec(profile: Profile, knobs: ServerKnobs, logs: list[str]) -> SpecParams | None:
    algo = knobs.speculative_algorithm
    if algo is None:
        return None
    algo = algo.upper()
    if algo not in SPEC_ALGORITHMS:
        raise SimConfigError(
            f"--speculative-algorithm {knobs.speculative_algorithm!r} is not simulated; "
            f"choose one of {', '.join(SPEC_ALGORITHMS)}"
        )
    spec = profile.spec
    if spec is None:
        raise SimConfigError(
            f"--speculative-algorithm {algo}: simulator profile {profile.name!r} has no 'spec' "
            "section (no draft model is described for this model)"
        )
    steps, topk, draft = (
        knobs.speculative_num_steps,
        knobs.speculative_eagle_topk,
        knobs.speculative_num_draft_tokens,
    )
    if steps is None and topk is None and draft is None:
        steps, topk, draft = spec.auto_params
    steps = steps if steps is not None else spec.auto_params[0]
    topk = topk if topk is not None else 1
    draft = draft if draft is not None else steps + 1
    if topk == 1 and draft != steps + 1:
        logs.append(SPEC_DRAFT_ADJUST_WARNING)
        draft = steps + 1
    # --sim-accept-scale: "accept length fell after an upgrade"; a mean stays in [1, ref + 1].
    ref_mean = spec.accept_length_mean * knobs.sim_accept_scale
    ref_mean = min(max(ref_mean, 1.0), spec.accept_ref_num_steps + 1.0)
    mean, values, cdf = accept_distribution(
        ref_mean, spec.accept_ref_num_steps, steps, spec.accept_length_spread
    )
    return SpecParams(
        algorithm="EAGLE" if algo == "NEXTN" else algo,
        num_steps=steps,
        eagle_topk=topk,
        num_draft_tokens=draft,
        accept_length_mean=mean,
        accept_values=values,
        accept_cdf=cdf,
        draft_step_s=spec.draft_step_base_ms / 1e3,
        draft_per_seq_s=spec.draft_step_per_seq_ms / 1e3,
        verify_per_token_s=spec.verify_per_token_ms / 1e3,
        overhead_s=spec.overhead_ms / 1e3,
    )


def resolve(profile: Profile | str | None, knobs: ServerKnobs) -> tuple[ResolvedModel, list[str]]:
    """Apply SGLang's startup rules to a profile and flags; return the model and the log lines."""
    if not isinstance(profile, Profile):
        profile = load_profile(profile if profile is not None else knobs.sim_profile)
    logs: list[str] = []
    hw, mdl = profile.hardware, profile.model
    # --tp-size left at SGLang's default 1 means "the deployment the profile describes".
    tp = knobs.tp_size if knobs.tp_size > 1 else hw.tp_size
    dp = max(1, knobs.dp_size)
    algo_in = knobs.speculative_algorithm.upper() if knobs.speculative_algorithm else None

    spec = _resolve_spec(profile, knobs, logs)
    if spec is not None and knobs.max_running_requests is None:
        # SGLang logs this from ServerArgs, before any weights load.
        logs.insert(0, SPEC_RESET_WARNING)

    auto_chunk, auto_graph_bs = gpu_memory_defaults(hw.gpu_memory_gb, tp)
    if profile.prefill.chunked_prefill_size is not None:
        auto_chunk = profile.prefill.chunked_prefill_size
    if profile.step.cuda_graph_max_bs is not None:
        auto_graph_bs = profile.step.cuda_graph_max_bs
    chunk = knobs.chunked_prefill_size if knobs.chunked_prefill_size is not None else auto_chunk
    graph_bs = knobs.cuda_graph_max_bs if knobs.cuda_graph_max_bs is not None else auto_graph_bs
    mem_frac = knobs.mem_fraction_static
    if mem_frac is None:
        spec_name = None if spec is None else ("STANDALONE" if algo_in == "STANDALONE" else algo_in)
        mem_frac = auto_mem_fraction_static(hw.gpu_memory_gb, chunk, graph_bs, tp, spec_name)
    if not 0 < mem_frac < 1:
        raise SimConfigError(f"--mem-fraction-static {mem_frac} must be between 0 and 1")

    # Per-GPU memory, in GiB.
    weights = mdl.weights_gb / tp
    draft_weights = (profile.spec.draft_weights_gb / tp) if spec and profile.spec else 0.0
    kv_per_token = mdl.kv_bytes_per_token / tp
    if spec is not None and profile.spec is not None:
        kv_per_token += profile.spec.draft_kv_bytes_per_token / tp
    mamba = mdl.mamba
    mamba_slots = None
    mamba_gb = 0.0
    if mamba is not None:
        mamba_slots = mamba.cache_slots_spec if spec is not None else mamba.cache_slots
        mamba_gb = (mamba.conv_state_gb + mamba.ssm_state_gb) * mamba_slots / mamba.cache_slots
    kv_gb = hw.gpu_memory_gb * mem_frac - weights - draft_weights - mamba_gb
    tokens = int(kv_gb * GIB / kv_per_token) if kv_gb > 0 else 0
    if knobs.max_total_tokens is not None:
        tokens = min(tokens, knobs.max_total_tokens)
    if tokens <= 0:
        raise SimConfigError(
            "Not enough memory. Please try to increase --mem-fraction-static. "
            f"(simulator: {hw.gpu_memory_gb:.0f} GB x {mem_frac} leaves {kv_gb:.2f} GB for the "
            f"KV cache after {weights + draft_weights:.2f} GB of weights per GPU)"
        )
    context_len = knobs.context_length or mdl.context_length

    if knobs.max_running_requests is not None:
        cap_arg: int | None = knobs.max_running_requests
    elif spec is not None:
        cap_arg = SPEC_RUNNING_CAP
    else:
        cap_arg = None
    pool = min(max(int(tokens / context_len * 512), 2048), 4096)
    per_dp = auto_running_cap(tokens, context_len) if cap_arg is None else max(1, cap_arg // dp)
    per_dp = min(per_dp, pool)
    mamba_cap = None
    if mamba is not None and mamba_slots is not None:
        mamba_cap = max(1, mamba_slots // mamba.slots_per_request)
        per_dp = min(per_dp, mamba_cap)

    cuda_graph = not knobs.disable_cuda_graph
    graph_bs = min(graph_bs, per_dp) if cuda_graph else 0
    graph_gb = graph_bs * 2 / 1024 if cuda_graph else 0.0
    noise = resolve_noise(profile, knobs)
    factor = speed_factor(knobs.sim_seed, knobs.sim_jitter) * noise.launch_speed_factor
    scale = factor * knobs.sim_time_scale
    st, pf = profile.step, profile.prefill

    avail_before = hw.gpu_memory_gb - CUDA_CONTEXT_GB
    k_gb = v_gb = tokens * (mdl.kv_bytes_per_token / tp) / 2 / GIB
    avail_after = avail_before - weights - draft_weights - mamba_gb - 2 * k_gb - graph_gb
    logs.append(
        f"Simulated SGLang server: profile {profile.name} ({hw.gpu_name} x{tp}, "
        f"{mdl.model_path}), speed factor {factor:.3f}, time scale {knobs.sim_time_scale:g}"
    )
    if not noise.quiet:
        logs.append(f"Simulated noise: {noise.describe()}")
    logs.append(f"Load weight begin. avail mem={avail_before:.2f} GB")
    logs.append(
        f"Load weight end. elapsed={knobs.sim_load_time:.2f} s, type={mdl.architecture}, "
        "dtype=torch.bfloat16, "
        f"avail mem={avail_before - weights:.2f} GB, mem usage={weights:.2f} GB."
    )
    if spec is not None and draft_weights > 0:
        logs.append(
            f"Load weight end. elapsed=0.00 s, type={mdl.architecture}MTP, dtype=torch.bfloat16, "
            f"avail mem={avail_before - weights - draft_weights:.2f} GB, "
            f"mem usage={draft_weights:.2f} GB."
        )
    if mamba is not None and mamba_slots is not None:
        # Format as in SGLang's MambaPool (memory_pool.py): no space before "GB".
        share = mamba_slots / mamba.cache_slots
        logs.append(
            f"Mamba Cache is allocated. max_mamba_cache_size: {mamba_slots}, "
            f"conv_state size: {mamba.conv_state_gb * share:.2f}GB, "
            f"ssm_state size: {mamba.ssm_state_gb * share:.2f}GB"
        )
    # v0.5.9 wording (memory_pool.py MHATokenToKVPool); newer releases add "dtype: ..., ".
    logs.append(
        f"KV Cache is allocated. #tokens: {tokens}, K size: {k_gb:.2f} GB, V size: {v_gb:.2f} GB"
    )
    # Scheduler init line (scheduler.py), per DP worker; available_gpu_mem is our estimate.
    logs.append(
        f"max_total_num_tokens={tokens}, chunked_prefill_size={chunk}, "
        f"max_prefill_tokens={DEFAULT_MAX_PREFILL_TOKENS}, max_running_requests={per_dp}, "
        f"context_len={context_len}, available_gpu_mem={max(avail_after, 0.0):.2f} GB"
    )

    model = ResolvedModel(
        profile=profile,
        knobs=knobs,
        tp_size=tp,
        dp_size=dp,
        gpu_memory_gb=hw.gpu_memory_gb,
        mem_fraction_static=mem_frac,
        context_len=context_len,
        chunked_prefill_size=chunk,
        max_prefill_tokens=DEFAULT_MAX_PREFILL_TOKENS,
        cuda_graph_max_bs=graph_bs,
        cuda_graph_enabled=cuda_graph,
        max_total_num_tokens=tokens,
        kv_token_budget=tokens * dp,
        max_running_requests_per_dp=per_dp,
        effective_max_running_requests=per_dp * dp,
        mamba_cap_per_dp=mamba_cap,
        spec=spec,
        base_s=st.base_ms / 1e3 * scale,
        per_seq_s=st.per_seq_ms / 1e3 * scale,
        per_seq_exponent=st.per_seq_exponent,
        per_kv_token_s=st.per_kv_token_us / 1e6 * scale,
        no_cuda_graph_factor=st.no_cuda_graph_factor,
        prefill_per_token_s=pf.per_token_us / 1e6 * scale,
        prefill_base_s=pf.base_ms / 1e3 * scale,
        step_jitter=noise.spec.step_jitter,
        speed_factor=factor,
        time_scale=knobs.sim_time_scale,
        slowdown=tuple(knobs.sim_slowdown),
        memory_gb={
            "weight": round(weights + draft_weights, 3),
            "kvcache": round(2 * k_gb, 3),
            "token_capacity": float(tokens),
            "graph": round(graph_gb, 3),
        },
        noise=None if noise.quiet else noise,
    )
    if spec is not None:
        model = _scale_spec(model, scale)
    return model, logs


def _scale_spec(model: ResolvedModel, scale: float) -> ResolvedModel:
    from dataclasses import replace

    assert model.spec is not None
    s = model.spec
    return replace(
        model,
        spec=replace(
            s,
            draft_step_s=s.draft_step_s * scale,
            draft_per_seq_s=s.draft_per_seq_s * scale,
            verify_per_token_s=s.verify_per_token_s * scale,
            overhead_s=s.overhead_s * scale,
        ),
    )


def slowdown_factor(model: ResolvedModel, batch: int) -> float:
    """The injected ``--sim-slowdown`` factor for a running batch of this size."""
    for lo, hi, factor in model.slowdown:
        if lo <= batch <= hi:
            return factor
    return 1.0


def decode_time(model: ResolvedModel, batch: int, kv_tokens: int) -> float:
    """Seconds of one decode (or verify) forward over ``batch`` running sequences, no prefill."""
    if batch <= 0:
        return 0.0
    dp = model.dp_size
    b = -(-batch // dp)  # DP workers step in lockstep; the busiest one sets the pace
    spec = model.spec
    # A verify forward carries num_draft_tokens positions per sequence: it sits further out
    # on the same concave curve, which is why spec steps grow faster with batch.
    width = b if spec is None else b * spec.num_draft_tokens
    t = model.base_s + model.per_seq_s * width**model.per_seq_exponent
    t += model.per_kv_token_s * (kv_tokens / dp)
    if spec is not None:
        t += spec.overhead_s
        t += spec.num_steps * (spec.draft_step_s + spec.draft_per_seq_s * b)
        t += spec.verify_per_token_s * b * (spec.num_draft_tokens - 1)
    if not model.cuda_graph_enabled or b > model.cuda_graph_max_bs:
        t *= model.no_cuda_graph_factor
    return t


def step_time(model: ResolvedModel, batch: int, kv_tokens: int, prefill_tokens: int = 0) -> float:
    """Seconds of one scheduler step: decode over ``batch`` plus a prefill chunk, slowdown applied.

    ``kv_tokens`` is the KV the decoding sequences attend to. Jitter is not included: it is a
    per-step random draw the engine makes. ``sim_slowdown`` is keyed on the decode batch size.
    """
    t = decode_time(model, batch, kv_tokens)
    if prefill_tokens > 0:
        if batch <= 0:
            t = model.base_s
        t += model.prefill_base_s + model.prefill_per_token_s * prefill_tokens / model.dp_size
    return t * slowdown_factor(model, batch)
