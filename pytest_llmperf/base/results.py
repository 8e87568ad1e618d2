"""Result models shared by the load generator, the comparison and the reports.

These are file formats too (``results.json``, ``llmperf sweep --json``, ``llmperf merge``), so
every model forbids unknown fields and the top-level one carries a schema version.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from pytest_llmperf.base.gpu_stats import GpuTelemetry
from pytest_llmperf.base.values import (
    DEFAULT_IDLE_TIMEOUT_S,
    optional,
    parse_bool,
    parse_choice,
    parse_idle_timeout,
    parse_int,
    parse_positive_float,
    parse_positive_int,
    parse_request_count,
    parse_str,
    parse_think_time,
    parse_token_count,
    parse_turns,
    parse_unit_float,
)
from pytest_llmperf.base.version import __version__

Backend = Literal["sglang", "openai", "openai-chat"]
# What the prompts are: fresh random ones (no cache can serve them), or G groups sharing a
# P-token prefix each (the radix cache serves the prefix; core/workload.py).
# multi-turn: conversations that re-send their history each turn (core/conversations.py).
WorkloadKind = Literal["random", "shared-prefix", "multi-turn"]
# How ``range_ratio`` spreads lengths around L: SGLang's bench_serving draws from [r*L, L],
# vLLM's benchmarks from [(1-r)*L, (1+r)*L] (core/lengths.py cites both).
RangeConvention = Literal["sglang", "vllm"]
# The parsers of these choices: the settings of the same name use these very functions.
parse_backend = parse_choice(*get_args(Backend))
parse_workload_kind = parse_choice(*get_args(WorkloadKind))
parse_range_convention = parse_choice(*get_args(RangeConvention))
# How a server came to be measured: the one word the header, results and baselines use.
Mode = Literal["launched", "attached", "simulated"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Workload(_Model):
    """What is sent: seeded prompts, fresh per level, the same for the same command."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Each field runs the parser of its setting (run/settings.py), so a value the command line,
    # the suite file or `llmperf sweep` rejects is rejected here too, with the same bounds.
    backend: Annotated[Backend, BeforeValidator(parse_backend)] = "sglang"
    input_len: Annotated[int, BeforeValidator(parse_token_count)] = 1000
    output_len: Annotated[int, BeforeValidator(parse_token_count)] = 1000
    seed: Annotated[int, BeforeValidator(parse_int)] = 0
    temperature: float = Field(default=0.0, ge=0.0)
    # None means the seed scripts' default: 4 requests at C=1, 2*C above.
    requests_per_level: Annotated[int | None, BeforeValidator(optional(parse_request_count))] = None
    request_timeout_s: Annotated[float, BeforeValidator(parse_positive_float)] = 600.0
    # A request with no new stream event (nor response headers) for this long has stalled and
    # fails then, not at its deadline; the shorter of the two applies.
    idle_timeout_s: Annotated[float, BeforeValidator(parse_idle_timeout)] = DEFAULT_IDLE_TIMEOUT_S
    # Open-loop Poisson arrivals in req/s instead of closed-loop concurrency (None = closed loop).
    request_rate: Annotated[float | None, BeforeValidator(optional(parse_positive_float))] = None
    # OpenAI backends: send the non-standard fields (ignore_eos, continuous_usage_stats).
    openai_extensions: Annotated[bool, BeforeValidator(parse_bool)] = True
    kind: Annotated[WorkloadKind, BeforeValidator(parse_workload_kind)] = "random"
    # shared-prefix: every prompt is one of ``prefix_groups`` common prefixes of ``prefix_len``
    # tokens, then a unique suffix up to ``input_len``.
    prefix_len: Annotated[int | None, BeforeValidator(optional(parse_token_count))] = None
    prefix_groups: Annotated[int | None, BeforeValidator(optional(parse_positive_int))] = None
    # Length mixes: per-request input/output lengths drawn uniformly around input_len and
    # output_len (None: every request has exactly those lengths).
    range_ratio: Annotated[float | None, BeforeValidator(optional(parse_unit_float))] = None
    range_convention: Annotated[RangeConvention, BeforeValidator(parse_range_convention)] = "sglang"
    # A ShareGPT .json/.jsonl file (base/sharegpt.py) instead of generated prompts; output
    # lengths from the replies (core/dataset.py) or dataset_output_len for all.
    dataset: Annotated[str | None, BeforeValidator(optional(parse_str))] = None
    dataset_output_len: Annotated[int | None, BeforeValidator(optional(parse_token_count))] = None
    # The file's SHA-256, taken when the workload is made (a results file keeps it, so its key
    # is known where the dataset file is not).
    dataset_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    # multi-turn: turns per conversation and the most think time between two turns (seconds).
    turns: Annotated[int | None, BeforeValidator(optional(parse_turns))] = None
    think_time_s: Annotated[float, BeforeValidator(parse_think_time)] = 0.0

    @model_validator(mode="before")
    @classmethod
    def _hash_dataset(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("dataset") and not data.get("dataset_sha256"):
            from pytest_llmperf.base.sharegpt import content_hash, load_sharegpt

            load_sharegpt(data["dataset"])  # a bad file fails here, naming entry and field
            data = {**data, "dataset_sha256": content_hash(data["dataset"])}
        return data

    @model_validator(mode="after")
    def _mixes(self) -> Workload:
        if self.range_ratio is not None:
            if self.kind != "random" or self.dataset is not None:
                raise ValueError("range_ratio needs workload = 'random' without a dataset")
            if self.range_convention == "vllm" and self.range_ratio >= 1.0:
                raise ValueError("range_ratio must be < 1 with range_convention = 'vllm'")
        if self.dataset is None and self.dataset_sha256 is not None:
            raise ValueError("dataset_sha256 needs a dataset")
        if self.dataset_output_len is not None and self.dataset is None:
            raise ValueError("dataset_output_len needs a dataset")
        if self.dataset is not None and self.kind != "random":
            raise ValueError("a dataset replaces the generated prompts: use workload = 'random'")
        multi = self.kind == "multi-turn"
        if multi != (self.turns is not None) or (self.think_time_s > 0 and not multi):
            raise ValueError(
                "workload 'multi-turn' needs turns (>= 2); turns and think_time_s need it"
            )
        if multi and (self.backend == "openai-chat" or self.request_rate is not None):
            raise ValueError(
                "workload 'multi-turn' sends token ids in a closed loop: use backend sglang or "
                "openai, without request_rate"
            )
        return self

    @model_validator(mode="after")
    def _shared_prefix(self) -> Workload:
        if self.kind != "shared-prefix":
            if self.prefix_len is not None or self.prefix_groups is not None:
                raise ValueError("prefix_len and prefix_groups need workload = 'shared-prefix'")
            return self
        if self.prefix_len is None or self.prefix_groups is None:
            raise ValueError("workload 'shared-prefix' needs prefix_len and prefix_groups")
        if self.prefix_len >= self.input_len:
            raise ValueError(
                f"prefix_len {self.prefix_len} must be below input_len {self.input_len}: each "
                "prompt is the shared prefix plus a unique suffix of at least one token"
            )
        if self.backend == "openai-chat":
            raise ValueError(
                "workload 'shared-prefix' sends token ids; use backend sglang or openai "
                "(a chat template would change what is shared)"
            )
        return self

    def expected_cache_hit_rate(self) -> float:
        """Prompt tokens a prefix cache should serve, as a fraction of all prompt tokens.

        shared-prefix primes every group's prefix after the flush, so each measured request
        finds its ``prefix_len`` tokens cached; random prompts share nothing.
        """
        if self.kind == "shared-prefix" and self.prefix_len is not None:
            return self.prefix_len / self.input_len
        if self.kind == "multi-turn" and self.turns is not None:
            # turn t re-sends turn t-1's prompt: t-1 user messages and t-2 replies
            u, o, n = self.input_len, self.output_len, self.turns
            prompts = sum(t * u + (t - 1) * o for t in range(1, n + 1))
            history = sum((t - 1) * u + max(t - 2, 0) * o for t in range(2, n + 1))
            return history / prompts
        return 0.0

    def requests_sent(self, concurrency: int) -> int:
        """Requests of a level: ``num_requests`` conversations of ``turns`` each (multi-turn)."""
        return self.num_requests(concurrency) * (self.turns or 1)

    def num_requests(self, concurrency: int) -> int:
        """How many requests a level of this concurrency sends."""
        if self.requests_per_level is not None:
            return self.requests_per_level
        return 4 if concurrency == 1 else 2 * concurrency

    def key(self) -> str:
        """A short stable key used in baseline files and reports.

        It names everything that changes the numbers (backend, lengths, requests per level,
        request rate, seed, temperature); settings left at their defaults are omitted, so
        ``sglang-in1000-out1000`` still means the default workload. ``request_timeout_s`` and
        ``idle_timeout_s`` are left out: they decide whether a request fails, not how fast it
        runs.
        """
        if self.dataset is not None:
            k = f"{self.backend}-ds{self.dataset_tag()}"
            if self.dataset_output_len is not None:
                k += f"-out{self.dataset_output_len}"
        else:
            k = f"{self.backend}-in{self.input_len}-out{self.output_len}"
        if self.range_ratio is not None:
            k += f"-rr{self.range_ratio:g}{self.range_convention}"
        if self.requests_per_level is not None:
            k += f"-req{self.requests_per_level}"
        if self.request_rate is not None:
            k += f"-rate{self.request_rate:g}"
        if self.seed != 0:
            k += f"-seed{self.seed}"
        if self.temperature != 0.0:
            k += f"-temp{self.temperature:g}"
        if self.kind == "shared-prefix":
            k += f"-sp{self.prefix_groups}x{self.prefix_len}"
        if self.kind == "multi-turn":
            k += f"-mt{self.turns}" + (f"-think{self.think_time_s:g}" if self.think_time_s else "")
        return k

    def dataset_tag(self) -> str:
        """The dataset file's stem and the first 8 hex digits of its SHA-256."""
        from pathlib import Path

        assert self.dataset is not None and self.dataset_sha256 is not None
        return f"{Path(self.dataset).stem}-{self.dataset_sha256[:8]}"


class ServerFacts(_Model):
    """What the server said about itself (``/server_info``), plus how we reached it."""

    mode: Mode = "attached"
    url: str = ""
    version: str | None = None
    model_path: str | None = None
    speculative_algorithm: str | None = None
    # Effective cap: sum over DP ranks of internal_states[i].effective_max_running_requests_per_dp.
    max_running_requests: int | None = None
    dp_size: int = 1
    sim_profile: str | None = None
    server_args: dict[str, Any] = Field(default_factory=dict)


class ClientHealth(_Model):
    """Whether the load generator itself kept up; a saturated client invalidates a level."""

    transport: str = ""
    cpu_percent: float = 0.0  # of one core, over the level
    loop_lag_p99_ms: float = 0.0
    loop_lag_max_ms: float = 0.0
    loop_lag_samples: int = 0  # how many lag probes the p99 rests on
    saturated: bool = False
    reason: str | None = None
    # What one client process costs and can take on this level's stream (None: no tokens)
    cpu_us_per_output_token: float | None = None
    output_tok_s_ceiling: float | None = None  # one process at the CPU limit
    processes_needed: int | None = None  # set when the client's own CPU saturated it
    # The whole machine over the level: its own processes' busy share of all its CPUs (100 =
    # every core busy), and the share the hypervisor gave to other guests (steal). With a
    # lagging loop and an idle client, they say who held the CPU.
    system_cpu_percent: float | None = None
    steal_percent: float | None = None
    cpus: int | None = None


class RequestDetails(_Model):
    """Per-request arrays (only with details on): compact columns, not one object per request."""

    input_lens: list[int] = Field(default_factory=list)
    output_lens: list[int] = Field(default_factory=list)
    ttfts: list[float] = Field(default_factory=list)  # seconds, NaN for failed
    e2e_latencies: list[float] = Field(default_factory=list)  # seconds
    errors: list[str | None] = Field(default_factory=list)


class SteadyState(_Model):
    """The stretch of a level with C requests in flight: ramp-up and drain cut off.

    Closed loop, it runs from the C-th send to the first completion after the last send (after
    that nothing replaces a finished request). Throughput judged here does not depend on how
    long the ramp-up and drain were, which is what made short levels noisy.
    """

    start_s: float  # from the level's first send
    window_s: float
    output_tokens: int  # tokens that arrived inside the window
    output_throughput: float  # tok/s inside the window


# Metrics judged on the steady-state window when a level has one (``LevelResult.judged_value``).
STEADY_METRICS: dict[str, str] = {"output_throughput": "output_throughput"}


class LevelResult(_Model):
    """One concurrency level of a sweep, with bench_serving's key names."""

    max_concurrency: int  # the target C (bench_serving's key)
    num_requests: int
    completed: int
    failed: int
    duration: float  # seconds, first send to last completion
    total_input_tokens: int = 0
    total_output_tokens: int = 0
    # Prompt tokens the server reported serving from its prefix cache (SGLang
    # meta_info.cached_tokens, OpenAI usage.prompt_tokens_details.cached_tokens).
    total_cached_tokens: int = 0
    # shared-prefix and multi-turn levels only: total_cached_tokens / total_input_tokens (None
    # elsewhere, so random workloads record no hit rate and gate none).
    cache_hit_rate: float | None = None
    # Sums of the completed requests' own targets (length mixes, datasets, multi-turn): what
    # validity compares the delivered totals with. None: completed x the workload's lengths
    # (input: also when the server's count cannot be known offline, as for a dataset's text).
    expected_input_tokens: int | None = None
    expected_output_tokens: int | None = None
    # multi-turn: median TTFT (ms) of each turn over the level's conversations.
    ttft_by_turn_ms: list[float | None] | None = None
    # Chat: tokens of each prompt around its sized content (template, the prompt's number),
    # measured at the server; a prefix cache may serve up to this many per request.
    prompt_overhead_tokens: int = 0
    request_throughput: float = 0.0
    input_throughput: float = 0.0
    output_throughput: float = 0.0
    total_throughput: float = 0.0
    per_request_throughput: float = 0.0
    concurrency: float = 0.0  # achieved: sum of e2e latencies / duration
    mean_ttft_ms: float | None = None
    median_ttft_ms: float | None = None
    p90_ttft_ms: float | None = None
    p99_ttft_ms: float | None = None
    mean_itl_ms: float | None = None
    median_itl_ms: float | None = None
    p90_itl_ms: float | None = None
    p99_itl_ms: float | None = None
    mean_tpot_ms: float | None = None
    median_tpot_ms: float | None = None
    p90_tpot_ms: float | None = None
    p99_tpot_ms: float | None = None
    mean_e2e_latency_ms: float | None = None
    median_e2e_latency_ms: float | None = None
    p90_e2e_latency_ms: float | None = None
    p99_e2e_latency_ms: float | None = None
    accept_length: float | None = None
    goodput: float | None = None
    server_max_running_requests: int | None = None
    # From /server_info, for explaining a speculative config's loss (verdicts/compare.py).
    server_cuda_graph_max_bs: int | None = None
    server_dp_size: int | None = None
    # Tokens one request may hold (prompt + output) as the server reports it, and where from
    # (``core/context_limit.py``): a context below prompt + output explains short outputs.
    server_context_tokens: int | None = None
    server_context_source: str | None = None
    speculative: bool = False
    # Launched servers: launch -> healthy, and the first request after healthy (the warm-up,
    # WARMUP_OUTPUT_LEN tokens), stamped on every level of that server so each point's
    # baseline carries them.
    startup_s: float | None = None
    first_request_ms: float | None = None
    queueing: bool = False
    # Open-loop (request_rate) levels only: how late requests left against their schedule.
    schedule_lag_p99_ms: float | None = None
    # Requests re-sent once on a new connection because a pooled keep-alive one was dead.
    connection_retries: int = 0
    # Share of the ITL gaps that came from several SSE events in one network read: the client
    # read late and stamped them alike (None: no gaps). Mostly coalesced: ITL is not measured.
    coalesced_itl_share: float | None = None
    notes: list[str] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)  # distinct messages, capped
    client: ClientHealth | None = None
    server_metrics: dict[str, float] | None = None
    details: RequestDetails | None = None
    # The judged statistic's window and its within-run error (``core/metrics.py``): relative
    # standard error of each judged metric from this level's own data, and which server launch
    # measured it (samples sharing a launch are not independent for between-launch noise).
    steady: SteadyState | None = None
    within_se: dict[str, float] = Field(default_factory=dict)
    launch: str | None = None
    # What the server's GPUs did during the level (NVML; None: telemetry off or no GPU).
    gpu: GpuTelemetry | None = None

    def judged_value(self, name: str) -> float | None:
        """The value verdicts judge: the steady-state window's where there is one, else
        ``metric_value`` (bench_serving's whole-run number, kept beside it)."""
        if self.steady is not None and name in STEADY_METRICS:
            return float(getattr(self.steady, STEADY_METRICS[name]))
        return self.metric_value(name)

    def metric_value(self, name: str) -> float | None:
        """The value of a metric defined in ``metric_defs`` (None when not measured)."""
        from pytest_llmperf.base.metric_defs import metric

        metric(name)  # raises with the list of known names
        value = getattr(self, name, None)
        return None if value is None else float(value)


class SweepResult(_Model):
    """A whole sweep of one server config."""

    schema_version: Literal[1] = 1
    config: str
    server: ServerFacts
    workload: Workload
    levels: list[LevelResult] = Field(default_factory=list)
    # Further samples of a level (``repeat`` and re-runs of inconclusive points), by C, in
    # measurement order; ``levels`` holds the first sample of each. Verdicts use them all.
    repeats: dict[int, list[LevelResult]] = Field(default_factory=dict)
    started_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    plugin_version: str = __version__

    def level(self, concurrency: int) -> LevelResult | None:
        return next((lv for lv in self.levels if lv.max_concurrency == concurrency), None)

    def samples(self, concurrency: int) -> list[LevelResult]:
        """Every sample of a level: the first (in ``levels``), then its repeats."""
        first = self.level(concurrency)
        return [] if first is None else [first, *self.repeats.get(concurrency, [])]
