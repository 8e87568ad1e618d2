"""Is a measured level worth judging at all? Checked before any verdict.

A level is INVALID when the number does not describe the server: the load generator was the
bottleneck, the server delivered different lengths than requested (EOS, tokenizer drift), the
closed loop never reached its concurrency, or requests failed. Queueing beyond the server's
running-request cap is *not* invalid: it is how the server behaves at that C, and the report
states it next to the number.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from pytest_llmperf.base.results import ClientHealth, LevelResult, Workload
from pytest_llmperf.base.values import (
    COALESCED_ITL_SHARE_LIMIT,
    CPU_PERCENT_LIMIT,
    LOOP_LAG_P99_LIMIT_MS,
)
from pytest_llmperf.core.monitor import MIN_LAG_SAMPLES, STARVED_CPU_PERCENT
from pytest_llmperf.verdicts.starvation import client_holders, stolen

__all__ = [
    "ValidityPolicy",
    "check_level",
    "context_shortfall",
    "disturbed",
    "is_valid",
    "policy_from_settings",
    "starved_by_machine",
    "throttled_by_gpu",
]


class ValidityPolicy(BaseModel):
    """Thresholds; defaults are strict where a deviation changes the meaning of the number."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_failed: int = Field(default=0, ge=0)
    # Relative slack on delivered vs requested token totals (0 = exact, as max_tokens is).
    length_tolerance: float = Field(default=0.0, ge=0.0, lt=1.0)
    check_input_lengths: bool = True
    # A closed loop of N = 2C requests has a one-request-deep ramp and tail: with equal lengths
    # achieved ≈ C; with spread lengths the tail can pull it to ~0.7C. Below half of the
    # reachable in-flight count something else (client, connection pool, fast failures) limited
    # the load.
    min_concurrency_ratio: float = Field(default=0.5, gt=0.0, le=1.0)
    # Prompt tokens per completed request the server may serve from its prefix cache. Every
    # measured prompt is fresh (core/workload.py), so any hit means another client or a reused
    # prompt skipped prefills the number claims to include.
    max_cached_tokens_per_request: int = Field(default=0, ge=0)
    # shared-prefix workloads: how far (absolute, as a fraction of prompt tokens) the measured
    # cache hit rate may be from the expected one. Page-granular caches (vLLM's 16-token
    # blocks) serve a little less than the prefix; anything beyond this slack means the
    # workload did not do what it says (cache off or evicting, or serving more than the
    # prefix), and the numbers do not describe it.
    hit_rate_slack: float = Field(default=0.1, ge=0.0, lt=1.0)
    # The client is the bottleneck above these (the defaults of base/values.py).
    loop_lag_p99_limit_ms: float = Field(default=LOOP_LAG_P99_LIMIT_MS, gt=0.0)
    cpu_percent_limit: float = Field(default=CPU_PERCENT_LIMIT, gt=0.0)
    # Above this share of ITL gaps from one network read, the median gap is the client's read
    # pattern (0 ms when events pile up), not the server's pace.
    max_coalesced_itl_share: float = Field(default=COALESCED_ITL_SHARE_LIMIT, ge=0.0, le=1.0)
    # Share of a level's GPU samples that may show a thermal, power-cap or HW-slowdown reason
    # (base/gpu_stats.DISTURBING): above it the GPU, not the code, set the level's speed.
    max_throttled_share: float = Field(default=0.0, ge=0.0, lt=1.0)


def policy_from_settings(get: Callable[[str], Any]) -> ValidityPolicy:
    """The policy from the settings of ``run/settings.py``, read by name through ``get``."""
    return ValidityPolicy(
        max_failed=get("max_failed"),
        length_tolerance=get("length_slack"),
        max_cached_tokens_per_request=get("max_cached_tokens"),
        hit_rate_slack=get("hit_rate_slack"),
        loop_lag_p99_limit_ms=get("loop_lag_limit"),
        cpu_percent_limit=get("cpu_limit"),
        max_coalesced_itl_share=get("coalesced_limit"),
    )


def _pct(a: float, b: float) -> str:
    return f"{100 * abs(a - b) / b:.1f} %" if b else "n/a"


def _saturation(client: ClientHealth, policy: ValidityPolicy) -> str | None:
    """Why the client was the bottleneck ('' without details), or None when it was not.

    The monitor's own verdict at its default limits; re-judged from its numbers at others.
    """
    defaults = (LOOP_LAG_P99_LIMIT_MS, CPU_PERCENT_LIMIT)
    limits = (policy.loop_lag_p99_limit_ms, policy.cpu_percent_limit)
    if limits == defaults or not client.loop_lag_samples:  # or a file from before the count
        return (client.reason or "") if client.saturated else None
    why = []
    if (
        client.loop_lag_samples >= MIN_LAG_SAMPLES
        and client.loop_lag_p99_ms > policy.loop_lag_p99_limit_ms
    ):
        why.append(
            f"event-loop lag p99 {client.loop_lag_p99_ms:.1f} ms > "
            f"{policy.loop_lag_p99_limit_ms:g} ms"
        )
    if client.cpu_percent > policy.cpu_percent_limit:
        why.append(f"client CPU {client.cpu_percent:.0f}% > {policy.cpu_percent_limit:g}%")
    return "; ".join(why) if why else None


def _client_reason(client: ClientHealth, saturation: str, level: LevelResult) -> str:
    """One sentence: what the client measured, and the advice its cause calls for."""
    why = f" ({saturation})" if saturation else ""
    if client.cpu_percent < STARVED_CPU_PERCENT:
        machine = (
            f" and the machine was {client.system_cpu_percent:.0f} % busy on {client.cpus} CPUs"
            f"{stolen(client.steal_percent)}"
            if client.system_cpu_percent is not None and client.cpus
            else ""
        )
        who = client_holders(client)
        return (
            f"the load generator was starved of CPU{why} while it used only "
            f"{client.cpu_percent:.0f} % of a core{machine}: {who.cause}, so "
            f"its timestamps are late by about the lag; {who.measure}, or raise "
            f"loop_lag_limit in [sweep] of llmperf.toml if {client.loop_lag_p99_ms:.0f} ms is "
            "small next to "
            f"TTFT p50 {level.median_ttft_ms or 0:.1f} ms and ITL p50 "
            f"{level.median_itl_ms or 0:.1f} ms"
        )
    needed = client.processes_needed or 2
    return (
        f"the load generator was the bottleneck{why} at {client.cpu_percent:.0f} % of a core: "
        f"it needs at least {needed} client processes: run with --llmperf-client-processes "
        f"{needed}"
    )


def _hit_rate(level: LevelResult, workload: Workload, policy: ValidityPolicy) -> list[str]:
    """A shared-prefix level must hit its prefix cache as designed (both numbers said)."""
    want = workload.expected_cache_hit_rate()
    got = (
        level.cache_hit_rate
        if level.cache_hit_rate is not None
        else level.total_cached_tokens / level.total_input_tokens
        if level.total_input_tokens
        else 0.0
    )
    if abs(got - want) <= policy.hit_rate_slack:
        return []
    design = (
        f"{workload.prefix_groups} groups × {workload.prefix_len}-token prefix of "
        f"{workload.input_len}-token prompts, primed after the flush"
    )
    if got < want:
        why = (
            "the prefix cache is off, evicting, or not reported (SGLang: --disable-radix-cache "
            "turns it off; OpenAI routes report usage.prompt_tokens_details.cached_tokens only "
            "with --enable-cache-report)"
        )
    else:
        why = "the cache served more than the shared prefixes: another client or a reused seed"
    return [
        f"cache hit rate {100 * got:.1f} % is far from the expected {100 * want:.1f} % "
        f"({design}; allowed ± {100 * policy.hit_rate_slack:g} points): {why}"
    ]


def context_shortfall(level: LevelResult, want_out: int) -> str | None:
    """Why outputs were cut, when the server's context per request (``LevelResult.
    server_context_tokens``) is below what each completed request needed (its mean prompt as
    the server counted it plus its requested output); None when the context is unknown or fits.
    """
    ctx = level.server_context_tokens
    n = level.completed
    if ctx is None or n <= 0:
        return None
    prompt = round(level.total_input_tokens / n)
    out = round(want_out / n)
    if ctx >= prompt + out:
        return None
    where = level.server_context_source or "as the server reports it"
    return (
        f"the server's context is {ctx} tokens per request ({where}), below the {prompt} prompt "
        f"+ {out} output = {prompt + out} tokens each request needs, so outputs stop at the "
        "context (llama-server divides -c over its -np slots; SGLang: --context-length)"
    )


def _lengths(level: LevelResult, workload: Workload, policy: ValidityPolicy) -> list[str]:
    """Delivered token totals against the completed requests' own targets (a length mix,
    dataset or multi-turn level records their sums; else completed x the workload's lengths)."""
    reasons = []
    n = level.completed
    own = level.expected_output_tokens is not None
    want_out = level.expected_output_tokens if own else n * workload.output_len
    design = "the sum of each request's max_tokens" if own else f"{n} × {workload.output_len}"
    got_out = level.total_output_tokens
    if want_out is not None and abs(got_out - want_out) > policy.length_tolerance * want_out:
        side = "short" if got_out < want_out else "over"
        context = context_shortfall(level, want_out) if got_out < want_out else None
        why = context or (
            "likely EOS before max_tokens (send ignore_eos) or tokenizer drift"
            if got_out < want_out
            else "the server generated past max_tokens or counts tokens differently"
        )
        reasons.append(
            f"delivered {got_out} output tokens for {n} completed requests, "
            f"expected {want_out} ({design}), {_pct(got_out, want_out)} {side}: {why}"
        )
    if workload.dataset is not None and level.expected_input_tokens is None:
        return reasons  # a dataset's text: only the server can count its tokens
    own_in = level.expected_input_tokens is not None
    want_in = level.expected_input_tokens if own_in else n * workload.input_len
    design = "the sum of each prompt's length" if own_in else f"{n} × {workload.input_len}"
    got_in = level.total_input_tokens
    if (
        policy.check_input_lengths
        and want_in
        and got_in > 0
        and abs(got_in - want_in) > policy.length_tolerance * want_in
    ):
        reasons.append(
            f"prompts were {got_in} tokens in total, expected {want_in} "
            f"({design}), {_pct(got_in, want_in)} off: "
            "the server's tokenizer re-encoded the prompt to a different length"
        )
    return reasons


def check_level(
    level: LevelResult, workload: Workload | None = None, policy: ValidityPolicy | None = None
) -> list[str]:
    """Reasons this level is invalid; an empty list means it may be judged."""
    policy = policy or ValidityPolicy()
    reasons: list[str] = []
    c = level.max_concurrency

    client = level.client
    saturation = _saturation(client, policy) if client is not None else None
    if client is not None and saturation is not None:
        reasons.append(_client_reason(client, saturation, level))

    share = level.coalesced_itl_share
    if share is not None and share > policy.max_coalesced_itl_share and level.completed > 0:
        reasons.append(
            f"ITL is not measured: {100 * share:.0f} % of the inter-token gaps came from several "
            "SSE events in one network read (the client read late and stamped them alike; "
            f"allowed {100 * policy.max_coalesced_itl_share:g} %), so ITL p50 "
            f"{level.median_itl_ms or 0:.2f} ms describes the client, not the server"
        )

    gpu = level.gpu
    if gpu is not None and gpu.throttled(policy.max_throttled_share):
        reasons.append(f"the GPU throttled ({gpu.throttle_text(policy.max_throttled_share)})")

    if level.completed == 0:
        reasons.append(f"no request completed ({level.failed} of {level.num_requests} failed)")
    elif level.failed > policy.max_failed:
        first = f"; first error: {level.errors[0]}" if level.errors else ""
        reasons.append(
            f"{level.failed} of {level.num_requests} requests failed "
            f"(allowed {policy.max_failed}){first}"
        )

    if workload is not None and level.completed > 0:
        reasons.extend(_lengths(level, workload, policy))

    shared = workload is not None and workload.kind == "shared-prefix"
    if shared and workload is not None and level.completed > 0:
        reasons.extend(_hit_rate(level, workload, policy))
    elif workload is not None and workload.kind == "multi-turn":
        pass  # re-sent history is meant to hit; its hit rate is the measurement (retention)
    elif level.total_cached_tokens and level.completed > 0:
        # a chat template (and the prompt's number) is a prefix every chat prompt shares
        per_request = policy.max_cached_tokens_per_request + level.prompt_overhead_tokens
        allowed = level.completed * per_request
        if level.total_cached_tokens > allowed:
            reasons.append(
                f"the server served {level.total_cached_tokens} prompt tokens from its prefix "
                f"cache over {level.completed} completed requests (allowed {allowed}): prefills "
                "were skipped, so the number is not that of fresh prompts; another client may be "
                "sending the same prompts, or a server without /flush_cache kept an earlier "
                "run's (change the seed or restart it)"
            )

    # think time (multi-turn) leaves a conversation idle by design: no in-flight floor then
    closed_loop = workload is None or (workload.request_rate is None and not workload.think_time_s)
    if closed_loop and level.concurrency > 0 and level.completed > 0:
        reachable = min(c, level.num_requests)
        floor = policy.min_concurrency_ratio * reachable
        if level.concurrency < floor:
            reasons.append(
                f"achieved concurrency {level.concurrency:.1f} is below "
                f"{policy.min_concurrency_ratio:g} × {reachable} requested in flight; the "
                "client did not keep C requests open (connection limit, client stall or fast "
                "failures)"
            )
    return reasons


def is_valid(
    level: LevelResult, workload: Workload | None = None, policy: ValidityPolicy | None = None
) -> bool:
    return not check_level(level, workload, policy)


def starved_by_machine(
    level: LevelResult, workload: Workload | None = None, policy: ValidityPolicy | None = None
) -> bool:
    """Invalid only because other processes held the CPU: the client's loop lagged while the
    client itself was nearly idle, and nothing else is wrong with the level (coalesced ITL
    gaps are what a late reader sees, so they count as the same cause).

    Such a level says nothing about the server or the client; a quieter moment may measure it.
    A client that is itself the bottleneck (its own CPU high) is not starved: more client
    processes are its remedy, and it stays INVALID.
    """
    policy = policy or ValidityPolicy()
    client = level.client
    if client is None or client.cpu_percent >= STARVED_CPU_PERCENT:
        return False
    if _saturation(client, policy) is None:
        return False
    rest = level.model_copy(update={"client": None, "coalesced_itl_share": None})
    return not check_level(rest, workload, policy)


def throttled_by_gpu(
    level: LevelResult, workload: Workload | None = None, policy: ValidityPolicy | None = None
) -> bool:
    """Invalid because a GPU of the server throttled (heat, power cap, HW slowdown), and for
    nothing else but that or a machine too busy: the GPU, not the code, set the speed, and a
    cooler moment may measure it, so it is re-measured like a noisy sample."""
    policy = policy or ValidityPolicy()
    gpu = level.gpu
    if gpu is None or not gpu.throttled(policy.max_throttled_share):
        return False
    rest = level.model_copy(update={"gpu": None})
    return not check_level(rest, workload, policy) or starved_by_machine(rest, workload, policy)


def disturbed(
    level: LevelResult, workload: Workload | None = None, policy: ValidityPolicy | None = None
) -> bool:
    """Invalid only for what the moment did (a machine too busy, a GPU that throttled): a
    quieter moment of the same launch may measure it."""
    return starved_by_machine(level, workload, policy) or throttled_by_gpu(level, workload, policy)
