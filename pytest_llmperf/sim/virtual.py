"""Closed-loop sweeps against the simulated engine in virtual time: curves in milliseconds.

This is the seed-003 benchmark (``bench_qwen.py``) with zero client latency: per level, C
requests in flight, a new one sent the instant one finishes, 4 requests at C=1 and 2*C above.
Aggregate tok/s is total output tokens over the level's wall time, first send to last finish.
Calibration tests use it, and so can anyone wanting a quick curve for a profile and flags.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from pytest_llmperf.sim.engine import SimEngine
from pytest_llmperf.sim.engine_api import SimRequest, TokenEvent
from pytest_llmperf.sim.knobs import ServerKnobs
from pytest_llmperf.sim.perf_model import resolve
from pytest_llmperf.sim.profile import Profile

SEED_LEVELS = (1, 4, 16, 32, 64, 128)


def seed_num_requests(concurrency: int) -> int:
    """Requests per level in the seed benchmark: 4 at C=1, 2*C above."""
    return 4 if concurrency == 1 else 2 * concurrency


@dataclass(frozen=True)
class VirtualLevel:
    """One sweep level's aggregates (bench_serving names where they exist)."""

    concurrency: int
    completed: int
    duration_s: float
    total_output_tokens: int
    output_throughput: float  # aggregate tok/s: total output tokens / duration
    per_request_throughput: float  # mean over requests of tokens / e2e latency
    decode_throughput: float  # mean over requests of (tokens - 1) / (finish - first token)
    mean_ttft_ms: float
    max_ttft_ms: float
    accept_length: float | None
    token_events: int  # stream events the level produced (one per request per step)

    @property
    def events_per_s(self) -> float:
        return self.token_events / self.duration_s if self.duration_s > 0 else 0.0


@dataclass(frozen=True)
class VirtualSweep:
    levels: list[VirtualLevel]
    effective_max_running_requests: int
    startup_logs: list[str] = field(default_factory=list)

    @property
    def total_duration_s(self) -> float:
        return sum(level.duration_s for level in self.levels)

    def throughput(self) -> dict[int, float]:
        return {level.concurrency: level.output_throughput for level in self.levels}


def run_virtual_level(
    engine: SimEngine, concurrency: int, num_requests: int, input_len: int, output_len: int
) -> VirtualLevel:
    """Run one closed-loop level on an idle virtual engine."""
    assert engine.virtual and engine.is_idle()
    engine.reset_metrics()
    t0 = engine.now
    reqs: list[SimRequest] = []
    events = [0]

    def send() -> None:
        req = SimRequest(
            rid=f"c{concurrency}-{len(reqs)}-{t0:.6f}",
            prompt_len=input_len,
            max_new_tokens=output_len,
            on_event=on_event,
        )
        reqs.append(req)
        engine.submit(req)

    def on_event(ev: TokenEvent) -> None:
        events[0] += 1
        if ev.finished and len(reqs) < num_requests:
            send()

    for _ in range(min(concurrency, num_requests)):
        send()
    engine.run_until_idle()
    done = [r for r in reqs if r.t_finish is not None and r.t_first_token is not None]
    end = max((r.t_finish or t0) for r in reqs)
    duration = end - t0
    tokens = len(done) * output_len
    e2e = [(r.t_finish or 0.0) - (r.t_arrival or 0.0) for r in done]
    ttft = [(r.t_first_token or 0.0) - (r.t_arrival or 0.0) for r in done]
    decode = [
        (output_len - 1) / ((r.t_finish or 0.0) - (r.t_first_token or 0.0))
        for r in done
        if output_len > 1 and (r.t_finish or 0.0) > (r.t_first_token or 0.0)
    ]
    n = max(1, len(done))
    return VirtualLevel(
        concurrency=concurrency,
        completed=len(done),
        duration_s=duration,
        total_output_tokens=tokens,
        output_throughput=tokens / duration if duration > 0 else 0.0,
        per_request_throughput=sum(output_len / x for x in e2e if x > 0) / n,
        decode_throughput=sum(decode) / max(1, len(decode)),
        mean_ttft_ms=sum(ttft) / n * 1e3,
        max_ttft_ms=max(ttft, default=0.0) * 1e3,
        accept_length=engine.stats().avg_spec_accept_length,
        token_events=events[0],
    )


def run_virtual_sweep(
    knobs: ServerKnobs | None = None,
    *,
    profile: Profile | str | None = None,
    concurrencies: Sequence[int] = SEED_LEVELS,
    input_len: int = 1000,
    output_len: int = 1000,
    num_requests: Callable[[int], int] = seed_num_requests,
) -> VirtualSweep:
    """Closed-loop sweep in virtual time over ``concurrencies`` on one engine, levels in order.

    ``profile`` overrides ``knobs.sim_profile`` (a name, a path or a ``Profile``).
    """
    knobs = knobs or ServerKnobs()
    if isinstance(profile, str):
        knobs = replace(knobs, sim_profile=profile)
        profile = None
    model, logs = resolve(profile, knobs)
    engine = SimEngine(model, virtual=True)
    levels = [
        run_virtual_level(engine, c, num_requests(c), input_len, output_len) for c in concurrencies
    ]
    return VirtualSweep(
        levels=levels,
        effective_max_running_requests=model.effective_max_running_requests,
        startup_logs=logs,
    )
