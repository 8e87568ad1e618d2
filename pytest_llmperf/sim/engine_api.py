"""The contract between the simulator's HTTP front (``sim/server.py``) and its engine.

The engine (``sim/engine.py``) owns time: it runs continuous batching over a performance
model (``sim/perf_model.py``) either in real time (the server) or in virtual time (fast
calibration tests). The HTTP front only submits requests and forwards the token events the
engine pushes back. Keeping this seam narrow lets each side be tested alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class TokenEvent:
    """Tokens the engine sends for one request at the end of one scheduler step.

    One event can carry several tokens (a speculative step accepts more than one; with a
    stream interval above 1 it carries every token since the last event), exactly like one SSE
    chunk of SGLang's ``/generate`` stream.
    """

    n_new: int  # tokens since the previous event (>= 1), 0 only for a final abort event
    completion_tokens: int  # cumulative output tokens so far
    finished: bool
    # SGLang's finish_reason dict when finished: {"type": "length", "length": N} or
    # {"type": "abort", "message": ..., "status_code": ..., "err_type": ...}.
    finish_reason: dict[str, Any] | None = None
    t: float = 0.0  # engine clock (seconds) when the step completed
    spec_verify_ct: int = 0  # cumulative verify forwards for this request (spec decoding only)


@dataclass
class SimRequest:
    """A request as the engine sees it: lengths only; token ids do not change the model."""

    rid: str
    prompt_len: int
    max_new_tokens: int
    on_event: Callable[[TokenEvent], None]
    ignore_eos: bool = True
    cached_tokens: int = 0
    stream: bool = True  # a streamed request is sent by the stream interval, others in 50s
    stream_interval: int = 0  # the request's sampling_params.stream_interval; 0: the server's
    # Filled in by the engine, read by the debug endpoint (ground truth).
    t_arrival: float | None = None
    t_first_token: float | None = None
    t_finish: float | None = None
    token_times: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class EngineStats:
    """What ``/server_info``, ``/metrics`` and the scheduler log lines report."""

    num_running: int
    num_queued: int
    used_kv_tokens: int
    max_total_num_tokens: int
    effective_max_running_requests: int
    last_gen_throughput: float
    avg_spec_accept_length: float | None  # cumulative since start / last reset; None if no spec
    total_output_tokens: int
    total_requests: int
    lag_ms_p99: float  # how far the real-time loop fell behind its own schedule
    behind_schedule: bool


class Engine(Protocol):
    """What the HTTP front needs from the engine."""

    def submit(self, req: SimRequest) -> None:
        """Queue a request; events arrive through ``req.on_event`` from the engine's loop."""

    def abort(self, rid: str) -> None:
        """Drop a request (client went away); frees its slot and KV."""

    def is_idle(self) -> bool:
        """No running and no queued requests (``/flush_cache`` works only then)."""

    def reset_metrics(self) -> None:
        """Zero the speculative accept counters, as SGLang's idle ``/flush_cache`` does."""

    def stats(self) -> EngineStats: ...

    def ground_truth(self) -> dict[str, Any]:
        """Per-request timings and token counts the engine really produced (debug endpoint)."""

    async def run(self) -> None:
        """The real-time scheduler loop; runs until cancelled."""
