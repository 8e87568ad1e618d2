"""Hardware/model profiles for the simulator, as data files.

A profile says what a real SGLang deployment looks like to the scheduler: how much GPU memory
there is, what the weights and the KV cache cost, how long a decode step takes as a function of
batch size and attended KV tokens, what prefill costs, and what speculative decoding adds.
Profiles are JSON files under ``sim/profiles/`` (loaded by name) or anywhere (loaded by path),
validated by the pydantic models below so a typo fails loudly with the file and field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pytest_llmperf.base.errors import InputError

PROFILE_SCHEMA_VERSION = 1
PROFILES_DIR = Path(__file__).parent / "profiles"
# Used when no profile is named: fast enough for a full plain+MTP sweep in about a minute.
DEFAULT_PROFILE = "sim-fast-moe"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HardwareSpec(_Strict):
    """The GPUs one server (one TP group) runs on."""

    gpu_name: str
    gpu_memory_gb: float = Field(gt=0, description="per GPU, as SGLang sees it")
    tp_size: int = Field(
        ge=1,
        description="TP size the coefficients were measured at; used when --tp-size is left at 1",
    )


class MambaSpec(_Strict):
    """Hybrid Mamba/attention models (Qwen3-Next, Qwen3.5/3.6): the state pool caps running reqs.

    SGLang caps ``max_running_requests`` to ``max_mamba_cache_size // ratio``; with speculative
    decoding the intermediate draft states are reserved first, leaving far fewer slots.
    """

    cache_slots: int = Field(ge=1, description="max_mamba_cache_size without speculative decoding")
    cache_slots_spec: int = Field(
        ge=1, description="max_mamba_cache_size with speculative decoding"
    )
    slots_per_request: int = Field(default=3, ge=1, description="SGLang's mamba ratio")
    conv_state_gb: float = Field(ge=0, description="per GPU, at cache_slots")
    ssm_state_gb: float = Field(ge=0, description="per GPU, at cache_slots")


class ModelSpec(_Strict):
    model_path: str
    architecture: str
    weights_gb: float = Field(gt=0, description="all weights, summed over the TP group")
    kv_bytes_per_token: float = Field(
        gt=0, description="K+V bytes per token, all layers, whole TP group"
    )
    context_length: int = Field(ge=1)
    mamba: MambaSpec | None = None


class StepSpec(_Strict):
    """Decode step time: base + per_seq * W**per_seq_exponent + per_kv_token * K.

    W is the number of positions in the forward: the running batch B for plain decode, and
    B * num_draft_tokens for a speculative verify. The exponent < 1 is the sublinear growth real
    MoE and dense servers show (bigger batches share the weight reads). K is the KV tokens the
    batch attends to. Beyond ``cuda_graph_max_bs`` SGLang runs eagerly, which is slower.
    """

    base_ms: float = Field(ge=0)
    per_seq_ms: float = Field(ge=0)
    per_seq_exponent: float = Field(gt=0, le=1.5)
    per_kv_token_us: float = Field(ge=0, description="per attended KV token in the running batch")
    cuda_graph_max_bs: int | None = Field(
        default=None,
        ge=1,
        description="auto value on this hardware; None = SGLang's GPU-memory table",
    )
    no_cuda_graph_factor: float = Field(default=1.25, ge=1)


class PrefillSpec(_Strict):
    per_token_us: float = Field(ge=0)
    base_ms: float = Field(
        default=0.0, ge=0, description="extra cost of a step that carries prefill"
    )
    chunked_prefill_size: int | None = Field(
        default=None, description="auto value on this hardware; None = SGLang's GPU-memory table"
    )


class SpecDecodeSpec(_Strict):
    """Speculative decoding (EAGLE/MTP family) costs and acceptance.

    A spec step = the plain decode step + ``num_steps`` draft forwards + verifying
    ``B * (num_draft_tokens - 1)`` extra tokens. The accept length (tokens per verify, bonus
    token included) has mean ``accept_length_mean`` at ``accept_ref_num_steps`` draft steps;
    ``accept_length_spread`` mixes a tight two-point law (0) with the full truncated geometric
    chain of per-token acceptance (1), so the mean is exact either way.
    """

    draft_weights_gb: float = Field(ge=0, description="summed over the TP group")
    draft_kv_bytes_per_token: float = Field(ge=0, description="whole TP group")
    draft_step_base_ms: float = Field(ge=0)
    draft_step_per_seq_ms: float = Field(ge=0)
    verify_per_token_ms: float = Field(ge=0, description="per sequence per extra draft token")
    overhead_ms: float = Field(default=0.0, ge=0)
    accept_length_mean: float = Field(ge=1)
    accept_ref_num_steps: int = Field(default=3, ge=1)
    accept_length_spread: float = Field(default=1.0, ge=0, le=1)
    auto_params: tuple[int, int, int] = Field(
        default=(3, 1, 4),
        description="(num_steps, eagle_topk, num_draft_tokens) SGLang's auto choice",
    )


class NoiseSpec(_Strict):
    """Noise like a shared GPU box; all zero (the default) is the quiet, calibrated simulator.

    Exact semantics in ``sim/noise.py``. Times are model time: ``--sim-time-scale`` stretches the
    drift period and the stalls like every step cost.
    """

    launch_speed_sd: float = Field(
        default=0.0, ge=0, le=1, description="per launch: step time x exp(sd*z), z ~ N(0,1)"
    )
    drift_sd: float = Field(
        default=0.0, ge=0, le=1, description="within a run: sd of the log step-time random walk"
    )
    drift_period_s: float = Field(
        default=60.0, gt=0, description="correlation time of the drift (Ornstein-Uhlenbeck)"
    )
    step_jitter: float = Field(
        default=0.0, ge=0, lt=0.5, description="per step: uniform +- fraction on step time"
    )
    stall_rate_per_s: float = Field(
        default=0.0, ge=0, description="rare stalls: Poisson rate per second of busy time"
    )
    stall_ms: float = Field(default=0.0, ge=0, description="each stall adds this to its step")


class Profile(_Strict):
    schema_version: Literal[1]
    name: str
    description: str
    hardware: HardwareSpec
    model: ModelSpec
    step: StepSpec
    prefill: PrefillSpec
    spec: SpecDecodeSpec | None = None
    step_jitter: float = Field(
        default=0.0, ge=0, lt=0.5, description="per-step random noise, fraction (uniform +-)"
    )
    noise: NoiseSpec = Field(
        default_factory=NoiseSpec, description="shared-GPU noise; --sim-noise replaces it"
    )


class ProfileError(InputError):
    """A profile could not be found or is invalid; the message names the file and field."""


def available_profiles() -> list[str]:
    """Names of the profiles shipped with the simulator."""
    return sorted(p.stem for p in PROFILES_DIR.glob("*.json"))


def profile_path(name_or_path: str | None) -> Path:
    """Resolve a profile name (shipped) or a path to a JSON file."""
    if not name_or_path:
        name_or_path = DEFAULT_PROFILE
    candidate = Path(name_or_path)
    if candidate.suffix == ".json" or candidate.exists() or "/" in name_or_path:
        if not candidate.is_file():
            raise ProfileError(f"simulator profile file {candidate} does not exist")
        return candidate
    shipped = PROFILES_DIR / f"{name_or_path}.json"
    if not shipped.is_file():
        names = ", ".join(available_profiles())
        raise ProfileError(
            f"unknown simulator profile {name_or_path!r}; shipped profiles: {names} "
            "(or pass a path to a profile JSON file)"
        )
    return shipped


def load_profile(name_or_path: str | None = None) -> Profile:
    """Load and validate a profile by name or path (None = the default profile)."""
    path = profile_path(name_or_path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ProfileError(
            f"simulator profile {path}: not valid JSON at line {exc.lineno}: {exc.msg}"
        ) from exc
    try:
        return Profile.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}"
            for err in exc.errors()
        )
        raise ProfileError(f"simulator profile {path} is invalid: {problems}") from exc
