"""The simulator's continuous-batching scheduler, in real time (the server) or virtual time (tests).

Each scheduler step admits waiting requests FIFO up to the running cap and the KV budget, runs
one chunk of prefill mixed with a decode step over every running request, and takes as long as
the performance model says. A decode step gives every running request one token, or with
speculative decoding a random accept length (mean from the profile) capped by what is left. A
request's tokens are sent as SGLang's scheduler sends them (``--stream-interval``): the first
token at once, then one ``TokenEvent`` whenever at least ``stream_interval`` tokens are unsent
(a step can pass the interval without landing on it), and at finish; the event carries every
unsent token. Non-streamed requests are sent every ``FORCE_STREAM_INTERVAL`` tokens, as there.
The hot loop is O(batch) with no per-token objects, so one core can stream hundreds of requests.

Real time is schedule-driven: step k ends at ``anchor + sum(durations)``; the loop sleeps until
then and measures how late it woke (``lag_ms_p99``), so model time never drifts with Python
overhead. Virtual time advances a number instead and never sleeps.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from bisect import bisect_right
from collections import deque
from collections.abc import Callable
from typing import Any

from pytest_llmperf.sim.engine_api import EngineStats, SimRequest, TokenEvent
from pytest_llmperf.sim.knobs import ServerKnobs
from pytest_llmperf.sim.noise import StepNoise
from pytest_llmperf.sim.perf_model import ResolvedModel, resolve, slowdown_factor

logger = logging.getLogger(__name__)

BEHIND_SCHEDULE_MS = 10.0  # lag p99 above this makes stats().behind_schedule true
MAX_CATCHUP_S = 0.5  # later than this (process stopped?), re-anchor instead of bursting steps
LAG_WINDOW = 2048
GROUND_TRUTH_LIMIT = 20000
# SGLang's SGLANG_FORCE_STREAM_INTERVAL default: how often a non-streamed request's output
# leaves the scheduler (the client sees it only at finish either way).
FORCE_STREAM_INTERVAL = 50


class _Live:
    """Scheduler state of one request; plain slots, mutated in place by the hot loop."""

    __slots__ = (
        "req",
        "on_event",
        "prompt_len",
        "max_new",
        "prefill_left",
        "prefill_total",
        "count",
        "verify_ct",
        "reserved",
        "aborted",
        "sent",
        "interval",
    )

    def __init__(self, req: SimRequest, stream_interval: int = 1) -> None:
        self.req = req
        self.on_event = req.on_event
        self.prompt_len = req.prompt_len
        self.max_new = max(1, req.max_new_tokens)
        self.prefill_total = self.prefill_left = max(1, req.prompt_len - req.cached_tokens)
        self.count = 0
        self.verify_ct = 0
        self.reserved = req.prompt_len + self.max_new
        self.aborted = False
        self.sent = 0  # output tokens already sent in an event
        if not req.stream:
            self.interval = FORCE_STREAM_INTERVAL
        else:
            self.interval = max(1, req.stream_interval or stream_interval)


def _abort_reason(
    message: str, status_code: int = 400, err_type: str = "BadRequest"
) -> dict[str, Any]:
    return {"type": "abort", "message": message, "status_code": status_code, "err_type": err_type}


class SimEngine:
    """Continuous batching over a ``ResolvedModel``; implements ``engine_api.Engine``.

    ``virtual=True`` uses a virtual clock driven by ``step()`` / ``run_until_idle()``;
    otherwise ``await run()`` drives it in real time on ``time.monotonic()``.
    ``on_log`` receives SGLang-style "Prefill batch" / "Decode batch" lines.
    """

    def __init__(
        self,
        model: ResolvedModel,
        *,
        virtual: bool = False,
        record_token_times: bool = False,
        on_log: Callable[[str], None] | None = None,
    ) -> None:
        self.model = model
        self.virtual = virtual
        self.record_token_times = record_token_times
        self.on_log = on_log
        seed = model.knobs.sim_seed
        self._rng = random.Random(seed)
        self._cap = model.effective_max_running_requests
        self._budget = model.kv_token_budget
        chunk = model.chunked_prefill_size
        self._chunk = chunk if chunk > 0 else model.max_prefill_tokens
        self._whole_prompts = chunk <= 0
        self._waiting: deque[_Live] = deque()
        self._prefilling: deque[_Live] = deque()
        self._running: list[_Live] = []
        self._by_rid: dict[str, _Live] = {}
        self._kv_reserved = 0
        self._kv_decode = 0  # KV tokens of decoding requests (what a decode step attends)
        self._kv_prefilled = 0  # prompt tokens already prefilled for requests still prefilling
        self._vnow = 0.0
        self._wake: asyncio.Event | None = None
        # Planned step (between _plan and _commit).
        self._plan_chunk: list[tuple[_Live, int]] = []
        # Metrics.
        self._total_out = 0
        self._total_requests = 0
        self._spec_accepted = 0
        self._spec_forwards = 0
        self._decode_steps = 0
        self._win_tokens = 0
        self._win_start = 0.0
        self._last_gen_tp = 0.0
        self._lags: deque[float] = deque(maxlen=LAG_WINDOW)
        self.reanchors = 0
        self.steps = 0
        self._truth: deque[tuple[str, int, float, float | None, float, int, str]] = deque(
            maxlen=GROUND_TRUTH_LIMIT
        )
        # Hot-loop constants.
        self._spec = model.spec
        self._interval = max(1, model.knobs.decode_log_interval)
        self._stream_interval = max(1, model.knobs.stream_interval)
        noise = model.noise
        self._noise = (
            StepNoise(noise, seed, model.time_scale)
            if noise is not None and noise.stepwise
            else None
        )

    # -- clock -----------------------------------------------------------------------------
    @property
    def now(self) -> float:
        """Engine clock: virtual seconds, or ``time.monotonic()`` in real time."""
        return self._vnow if self.virtual else time.monotonic()

    # -- Engine protocol -------------------------------------------------------------------
    def submit(self, req: SimRequest) -> None:
        """Queue a request (FIFO); it is admitted at the next step that has room for it."""
        live = _Live(req, self._stream_interval)
        req.t_arrival = self.now
        self._total_requests += 1
        if req.rid in self._by_rid:
            self._emit_abort(live, _abort_reason(f"Duplicate request id {req.rid}"))
            return
        if live.reserved > self._budget or req.prompt_len >= self.model.context_len:
            self._emit_abort(
                live,
                _abort_reason(
                    f"The input ({req.prompt_len} tokens) plus max_new_tokens "
                    f"({req.max_new_tokens}) does not fit the KV cache "
                    f"({self._budget} tokens) or context length ({self.model.context_len})."
                ),
            )
            return
        self._by_rid[req.rid] = live
        self._waiting.append(live)
        if self._wake is not None:
            self._wake.set()

    def abort(self, rid: str) -> None:
        """Drop a request wherever it is; its slot and KV are free for the next step."""
        live = self._by_rid.pop(rid, None)
        if live is None:
            return
        live.aborted = True
        if live in self._waiting:
            self._waiting.remove(live)
        else:
            self._kv_reserved -= live.reserved
            if live in self._prefilling:
                self._prefilling.remove(live)
                self._kv_prefilled -= live.prefill_total - live.prefill_left
            else:
                self._running.remove(live)
                self._kv_decode -= live.prompt_len + live.count
        self._emit_abort(live, _abort_reason("Abort request", 499, "ClientDisconnect"), record=True)

    def is_idle(self) -> bool:
        return not (self._waiting or self._prefilling or self._running)

    def reset_metrics(self) -> None:
        self._spec_accepted = 0
        self._spec_forwards = 0

    def stats(self) -> EngineStats:
        lags = sorted(self._lags)
        p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))] * 1e3 if lags else 0.0
        accept = None
        if self._spec is not None and self._spec_forwards > 0:
            accept = self._spec_accepted / self._spec_forwards
        return EngineStats(
            num_running=len(self._running) + len(self._prefilling),
            num_queued=len(self._waiting),
            used_kv_tokens=self._kv_decode + self._kv_prefilled,
            max_total_num_tokens=self.model.max_total_num_tokens,
            effective_max_running_requests=self._cap,
            last_gen_throughput=self._last_gen_tp,
            avg_spec_accept_length=accept,
            total_output_tokens=self._total_out,
            total_requests=self._total_requests,
            lag_ms_p99=p99,
            behind_schedule=p99 > BEHIND_SCHEDULE_MS,
        )

    def ground_truth(self) -> dict[str, Any]:
        """Finished requests (newest last): arrival, first token, finish, tokens, finish type."""
        return {
            "clock": "virtual" if self.virtual else "monotonic",
            "speed_factor": self.model.speed_factor,
            "launch_nonce": None if self.model.noise is None else self.model.noise.nonce,
            "stalls": 0 if self._noise is None else self._noise.stalls,
            "reanchors": self.reanchors,
            "fields": [
                "rid",
                "prompt_len",
                "t_arrival",
                "t_first_token",
                "t_finish",
                "tokens",
                "finish",
            ],
            "requests": [list(r) for r in self._truth],
        }

    async def run(self) -> None:
        """Real-time loop: sleep until each step's scheduled end, then emit its events."""
        if self.virtual:
            raise RuntimeError("a virtual-time SimEngine is driven by step()/run_until_idle()")
        self._wake = asyncio.Event()
        anchor = time.monotonic()
        while True:
            if self.is_idle():
                self._wake.clear()
                await self._wake.wait()
                anchor = time.monotonic()
            due = anchor + self._plan(anchor)
            delay = due - time.monotonic()
            if delay <= 0:
                await asyncio.sleep(0)  # let the HTTP front run even when behind
            while delay > 0:  # timers may fire a clock tick early: never emit before due
                await asyncio.sleep(delay)
                delay = due - time.monotonic()
            late = time.monotonic() - due
            self._lags.append(late if late > 0 else 0.0)
            self._commit(due)
            if late > MAX_CATCHUP_S:
                self.reanchors += 1
                anchor = time.monotonic()
            else:
                anchor = due

    # -- virtual time ----------------------------------------------------------------------
    def step(self) -> float:
        """Virtual time: run one scheduler step; return its duration (0.0 when idle)."""
        if self.is_idle():
            return 0.0
        d = self._plan(self._vnow)
        self._vnow += d
        self._commit(self._vnow)
        return d

    def run_until_idle(self, max_steps: int = 10_000_000) -> None:
        """Virtual time: step until nothing is running or queued."""
        for _ in range(max_steps):
            if self.step() == 0.0:
                return
        raise RuntimeError(f"virtual engine still busy after {max_steps} steps")

    def advance_to(self, t: float) -> None:
        """Virtual time: step while busy and before ``t``; an idle engine jumps to ``t``."""
        while self._vnow < t and not self.is_idle():
            self.step()
        self._vnow = max(self._vnow, t)

    # -- scheduler ---------------------------------------------------------------------------
    def _plan(self, start: float) -> float:
        """Admit, pick the prefill chunk; return the duration of the step starting at ``start``."""
        waiting, prefilling = self._waiting, self._prefilling
        cap, budget = self._cap, self._budget
        while waiting and len(self._running) + len(prefilling) < cap:
            live = waiting[0]
            if self._kv_reserved + live.reserved > budget:
                break  # FIFO: the head waits for KV; nobody overtakes it
            waiting.popleft()
            self._kv_reserved += live.reserved
            prefilling.append(live)
        chunk: list[tuple[_Live, int]] = []
        prefill_tokens = 0
        if prefilling:
            room = self._chunk
            for live in prefilling:
                left = live.prefill_left
                if self._whole_prompts:
                    if chunk and prefill_tokens + left > room:
                        break
                    take = left
                else:
                    take = left if left < room - prefill_tokens else room - prefill_tokens
                chunk.append((live, take))
                prefill_tokens += take
                if prefill_tokens >= room:
                    break
        self._plan_chunk = chunk
        m = self.model
        batch = len(self._running)
        t = 0.0
        if batch:
            b = -(-batch // m.dp_size)
            spec = self._spec
            width = b if spec is None else b * spec.num_draft_tokens  # see perf_model.decode_time
            t = (
                m.base_s
                + m.per_seq_s * width**m.per_seq_exponent
                + m.per_kv_token_s * (self._kv_decode / m.dp_size)
            )
            if spec is not None:
                t += spec.overhead_s + spec.num_steps * (
                    spec.draft_step_s + spec.draft_per_seq_s * b
                )
                t += spec.verify_per_token_s * b * (spec.num_draft_tokens - 1)
            if not m.cuda_graph_enabled or b > m.cuda_graph_max_bs:
                t *= m.no_cuda_graph_factor
        if prefill_tokens:
            if not batch:
                t = m.base_s
            t += m.prefill_base_s + m.prefill_per_token_s * prefill_tokens / m.dp_size
        if m.slowdown:
            t *= slowdown_factor(m, batch)
        if m.step_jitter:
            t *= 1.0 + self._rng.uniform(-m.step_jitter, m.step_jitter)
        if self._noise is not None:
            t = self._noise.apply(start, t)
        return t

    def _commit(self, t: float) -> None:
        """The planned step finished at engine time ``t``: emit its tokens, retire finished ones."""
        self.steps += 1
        running = self._running
        produced = 0
        finished: list[_Live] = []
        record = self.record_token_times
        if running:
            spec = self._spec
            if spec is None:
                for live in running:
                    live.count = c = live.count + 1
                    done = c >= live.max_new
                    if done:
                        finished.append(live)
                    if record:
                        live.req.token_times.append(t)
                    n = c - live.sent
                    if not done and n < live.interval:
                        continue  # held back by the stream interval
                    live.sent = c
                    try:
                        live.on_event(
                            TokenEvent(
                                n, c, done, {"type": "length", "length": c} if done else None, t, 0
                            )
                        )
                    except Exception:
                        logger.exception("token callback failed for %s", live.req.rid)
                produced = len(running)
            else:
                cdf, values = spec.accept_cdf, spec.accept_values
                rand = self._rng.random
                for live in running:
                    n = values[bisect_right(cdf, rand())]
                    left = live.max_new - live.count
                    if n > left:
                        n = left
                    live.count = c = live.count + n
                    live.verify_ct = v = live.verify_ct + 1
                    produced += n
                    done = c >= live.max_new
                    if done:
                        finished.append(live)
                    if record:
                        live.req.token_times.extend([t] * n)
                    unsent = c - live.sent
                    if not done and unsent < live.interval:
                        continue  # held back by the stream interval
                    live.sent = c
                    try:
                        live.on_event(
                            TokenEvent(
                                unsent,
                                c,
                                done,
                                {"type": "length", "length": c} if done else None,
                                t,
                                v,
                            )
                        )
                    except Exception:
                        logger.exception("token callback failed for %s", live.req.rid)
                self._spec_accepted += produced
                self._spec_forwards += len(running)
            self._kv_decode += produced
            self._decode_steps += 1
        for live, take in self._plan_chunk:
            if live.aborted:
                continue
            live.prefill_left -= take
            self._kv_prefilled += take
            if live.prefill_left > 0:
                continue
            # Prefill done: the forward that finished it also sampled the first token.
            if self._prefilling[0] is live:  # chunks are taken FIFO: normally the head
                self._prefilling.popleft()
            else:
                self._prefilling.remove(live)
            self._kv_prefilled -= live.prefill_total
            live.count = 1
            live.req.t_first_token = t
            done = live.max_new <= 1
            self._kv_decode += live.prompt_len + 1
            produced += 1
            if record:
                live.req.token_times.append(t)
            if done:
                finished.append(live)
            else:
                running.append(live)
            if not done and not live.req.stream:
                continue  # a non-streamed request's first token waits for the interval
            live.sent = 1  # a streamed request's first token is sent at once
            try:
                live.on_event(
                    TokenEvent(1, 1, done, {"type": "length", "length": 1} if done else None, t, 0)
                )
            except Exception:
                logger.exception("token callback failed for %s", live.req.rid)
        if finished:
            self._retire(finished, t)
        self._total_out += produced
        self._win_tokens += produced
        if self._decode_steps >= self._interval:
            self._log_decode(t)
        if self._plan_chunk and self.on_log is not None:
            self._log_prefill()

    def _retire(self, finished: list[_Live], t: float) -> None:
        gone = set()
        for live in finished:
            if live.aborted:
                continue
            gone.add(id(live))
            self._by_rid.pop(live.req.rid, None)
            self._kv_reserved -= live.reserved
            self._kv_decode -= live.prompt_len + live.count
            live.req.t_finish = t
            self._truth.append(
                (
                    live.req.rid,
                    live.prompt_len,
                    live.req.t_arrival or 0.0,
                    live.req.t_first_token,
                    t,
                    live.count,
                    "length",
                )
            )
        if gone:
            self._running = [x for x in self._running if id(x) not in gone]

    def _emit_abort(self, live: _Live, reason: dict[str, Any], record: bool = False) -> None:
        req = live.req
        req.t_finish = self.now
        if record:
            self._truth.append(
                (
                    req.rid,
                    live.prompt_len,
                    req.t_arrival or 0.0,
                    req.t_first_token,
                    req.t_finish,
                    live.count,
                    "abort",
                )
            )
        try:
            live.on_event(TokenEvent(0, live.count, True, reason, req.t_finish, live.verify_ct))
        except Exception:
            logger.exception("abort callback failed for %s", req.rid)

    # -- scheduler log lines -----------------------------------------------------------------
    def _usage(self) -> float:
        return (self._kv_decode + self._kv_prefilled) / max(1, self._budget)

    def _log_decode(self, t: float) -> None:
        gap = t - self._win_start
        if gap > 0:
            self._last_gen_tp = self._win_tokens / gap
        self._win_tokens = 0
        self._win_start = t
        self._decode_steps = 0
        if self.on_log is None:
            return
        spec_part = ""
        if self._spec is not None and self._spec_forwards:
            acc = self._spec_accepted / self._spec_forwards
            rate = (acc - 1) / max(1, self._spec.num_draft_tokens - 1)
            spec_part = f"accept len: {acc:.2f}, accept rate: {rate:.2f}, "
        graph = self.model.cuda_graph_enabled and len(self._running) <= self.model.cuda_graph_max_bs
        self.on_log(
            f"Decode batch, #running-req: {len(self._running)}, #token: {self._kv_decode}, "
            f"token usage: {self._usage():.2f}, {spec_part}cuda graph: {graph}, "
            f"gen throughput (token/s): {self._last_gen_tp:.2f}, #queue-req: {len(self._waiting)}"
        )

    def _log_prefill(self) -> None:
        assert self.on_log is not None
        new_tokens = sum(take for _, take in self._plan_chunk)
        self.on_log(
            f"Prefill batch, #new-seq: {len(self._plan_chunk)}, #new-token: {new_tokens}, "
            f"#cached-token: 0, token usage: {self._usage():.2f}, "
            f"#running-req: {len(self._running)}, #queue-req: {len(self._waiting)}"
        )


def create_engine(
    knobs: ServerKnobs, *, virtual: bool = False, on_log: Callable[[str], None] | None = None
) -> tuple[SimEngine, list[str]]:
    """Resolve ``knobs`` against their profile; return the engine and SGLang's startup lines."""
    model, logs = resolve(None, knobs)
    return SimEngine(model, virtual=virtual, on_log=on_log), logs
