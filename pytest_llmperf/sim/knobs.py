"""The server flags that shape the simulated performance, as one typed value.

``sim/args.py`` turns ``sglang.launch_server``-style argv into ``ServerKnobs``; the engine
(``sim/engine.py``) turns ``ServerKnobs`` plus a hardware/model profile into a running model.
Names and defaults follow SGLang's ``ServerArgs`` (None means "auto", as there).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ServerKnobs:
    model_path: str = "simulated/model"
    served_model_name: str | None = None
    host: str = "127.0.0.1"
    port: int = 30000
    tp_size: int = 1
    dp_size: int = 1
    mem_fraction_static: float | None = None
    max_running_requests: int | None = None
    max_total_tokens: int | None = None
    chunked_prefill_size: int | None = None
    context_length: int | None = None
    allow_auto_truncate: bool = False  # SGLang: max_new_tokens cut to the context, no refusal
    api_key: str | None = None
    speculative_algorithm: str | None = None
    speculative_draft_model_path: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    stream_interval: int = 1
    cuda_graph_max_bs: int | None = None
    disable_cuda_graph: bool = False
    enable_metrics: bool = False
    skip_server_warmup: bool = False
    decode_log_interval: int = 40
    log_level: str = "info"
    enable_cache_report: bool = False  # SGLang: cached tokens in OpenAI usage
    disable_radix_cache: bool = False  # SGLang; vLLM's --no-enable-prefix-caching maps here
    enable_prompt_tokens_details: bool = False  # vLLM: cached tokens in OpenAI usage
    # SGLang: batch-invariant kernels, so greedy outputs do not depend on the batch
    enable_deterministic_inference: bool = False
    # Simulator-only knobs (``--sim-*``); real SGLang has none of these.
    sim_profile: str | None = None  # profile name or path to a profile JSON file
    sim_seed: int = 0
    sim_jitter: float = (
        0.0  # run-to-run speed jitter (fraction, e.g. 0.03 = +-3 %), drawn once per process
    )
    sim_time_scale: float = (
        1.0  # >1 runs the model slower than real time (e.g. for tests on a busy CI)
    )
    # (lo, hi, factor): steps whose running batch size is in [lo, hi] take `factor` x longer.
    sim_slowdown: tuple[tuple[int, int, float], ...] = ()
    # llama-server (cpp-httplib) keep-alive closing; None: aiohttp's defaults (see keepalive.py)
    sim_keepalive_timeout: float | None = None
    sim_api: str = "sglang"  # "sglang" or "vllm": whose HTTP routes and shapes are served
    # (tokens per message, constant tokens) a chat template adds; Llama-3: header + eot, BOS +
    # the assistant header
    sim_chat_template_overhead: tuple[int, int] = (5, 5)
    sim_keepalive_max_requests: int | None = None
    # Shared-GPU noise (sim/noise.py): a preset name, then per-term overrides (None = unset).
    sim_noise: str | None = None  # "quiet" or "gpu-shared"; None: the profile's noise
    sim_launch_speed_sd: float | None = None
    sim_launch_nonce: str | None = None  # None: a fresh nonce per launch (pid and clock)
    sim_launch_sequence: str | None = None  # a counter file: the n-th launch's nonce is "seq-n"
    sim_drift_sd: float | None = None
    sim_drift_period: float | None = None  # seconds
    sim_step_jitter: float | None = None
    sim_stall_rate: float | None = None  # stalls per second of busy time
    sim_stall_ms: float | None = None
    sim_load_time: float = 0.0  # seconds of model load before the port binds
    sim_accept_scale: float = 1.0  # x the profile's speculative accept length
    sim_accuracy: float = 0.0  # share of the accuracy probe's items answered right (answers.py)
    sim_version: str | None = None  # SGLang (or vLLM) version the server reports
    sim_diverge_share: float = 0.0  # share of prompts whose greedy answer changes (sim/greedy)
    sim_nondeterminism: float = 0.0  # chance a greedy answer drifts (off when deterministic)
    unknown_args: tuple[str, ...] = field(default_factory=tuple)
