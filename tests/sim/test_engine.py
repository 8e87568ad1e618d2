"""The continuous-batching engine: events, caps, KV queueing, abort, spec, real-time clock."""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field

import pytest

from pytest_llmperf.sim.engine import SimEngine, create_engine
from pytest_llmperf.sim.engine_api import SimRequest, TokenEvent
from pytest_llmperf.sim.knobs import ServerKnobs
from pytest_llmperf.sim.perf_model import resolve, step_time
from pytest_llmperf.sim.virtual import run_virtual_sweep


@dataclass
class Sink:
    """Collects one request's events."""

    events: list[TokenEvent] = field(default_factory=list)

    def __call__(self, ev: TokenEvent) -> None:
        self.events.append(ev)


def _engine(**kw: object) -> SimEngine:
    model, _ = resolve(None, ServerKnobs(**kw))  # type: ignore[arg-type]
    return SimEngine(model, virtual=True)


def _submit(engine: SimEngine, rid: str, prompt: int = 100, out: int = 10) -> Sink:
    sink = Sink()
    engine.submit(SimRequest(rid=rid, prompt_len=prompt, max_new_tokens=out, on_event=sink))
    return sink


def test_single_request_follows_the_model_schedule() -> None:
    engine = _engine()
    sink = _submit(engine, "a", prompt=300, out=5)
    engine.run_until_idle()
    evs = sink.events
    assert [e.n_new for e in evs] == [1] * 5
    assert [e.completion_tokens for e in evs] == [1, 2, 3, 4, 5]
    assert [e.finished for e in evs] == [False] * 4 + [True]
    assert evs[-1].finish_reason == {"type": "length", "length": 5}
    m = engine.model
    expected = [step_time(m, 0, 0, prefill_tokens=300)]
    for count in range(1, 5):
        expected.append(expected[-1] + step_time(m, 1, 300 + count))
    assert [e.t for e in evs] == pytest.approx(expected, rel=1e-12)
    truth = engine.ground_truth()["requests"]
    assert truth == [["a", 300, 0.0, expected[0], expected[-1], 5, "length"]]
    assert engine.is_idle() and engine.stats().used_kv_tokens == 0


@pytest.mark.parametrize("out", [1, 2, 3, 7, 100, 1000])
def test_spec_events_sum_exactly_to_max_new_tokens(out: int) -> None:
    engine = _engine(speculative_algorithm="NEXTN", sim_seed=out)
    sinks = [_submit(engine, f"r{i}", out=out) for i in range(6)]
    engine.run_until_idle()
    for sink in sinks:
        evs = sink.events
        assert sum(e.n_new for e in evs) == out
        assert evs[-1].completion_tokens == out and evs[-1].finished
        assert evs[-1].finish_reason == {"type": "length", "length": out}
        assert all(1 <= e.n_new <= 4 for e in evs)
        # One event per request per step: timestamps strictly increase; verify count per step.
        assert all(a.t < b.t for a, b in zip(evs, evs[1:], strict=False))
        assert [e.spec_verify_ct for e in evs[1:]] == list(range(1, len(evs)))


def test_spec_accept_length_counter_and_reset() -> None:
    engine = _engine(speculative_algorithm="EAGLE")
    for i in range(8):
        _submit(engine, f"r{i}", out=2000)
    engine.run_until_idle()
    accept = engine.stats().avg_spec_accept_length
    assert engine.model.spec is not None
    # Capped final steps pull it slightly under the model mean.
    assert accept == pytest.approx(engine.model.spec.accept_length_mean, rel=0.03)
    engine.reset_metrics()
    assert engine.stats().avg_spec_accept_length is None
    assert _engine().stats().avg_spec_accept_length is None  # no spec: never reported


def test_running_cap_queues_fifo() -> None:
    engine = _engine(max_running_requests=4)
    sinks = [_submit(engine, f"r{i}", out=50) for i in range(10)]
    peak = 0
    while engine.step():
        s = engine.stats()
        peak = max(peak, s.num_running)
        assert s.num_running <= 4
    assert peak == 4
    firsts = [s.events[0].t for s in sinks]
    assert firsts == sorted(firsts)
    assert firsts[4] >= sinks[0].events[-1].t  # the 5th starts only after a slot frees


def test_kv_budget_queues_beyond_pool() -> None:
    # 5000 KV tokens fit two requests of 1000 + 1000 reserved; the third waits for one to end.
    engine = _engine(max_total_tokens=5000)
    sinks = [_submit(engine, f"r{i}", prompt=1000, out=1000) for i in range(3)]
    engine.step()
    s = engine.stats()
    assert (s.num_running, s.num_queued) == (2, 1)
    engine.run_until_idle()
    assert sinks[2].events[0].t > sinks[0].events[-1].t
    assert all(sum(e.n_new for e in sink.events) == 1000 for sink in sinks)


def test_request_larger_than_kv_pool_is_rejected() -> None:
    engine = _engine(max_total_tokens=1500)
    sink = _submit(engine, "big", prompt=1000, out=1000)
    assert len(sink.events) == 1 and sink.events[0].finished and sink.events[0].n_new == 0
    assert sink.events[0].finish_reason is not None
    assert sink.events[0].finish_reason["type"] == "abort"
    assert engine.is_idle()


def test_abort_frees_slot_and_kv() -> None:
    engine = _engine(max_running_requests=1)
    a = _submit(engine, "a", out=1000)
    b = _submit(engine, "b", out=3)
    for _ in range(5):
        engine.step()
    engine.abort("a")
    assert a.events[-1].finished and a.events[-1].n_new == 0
    assert a.events[-1].finish_reason is not None
    assert a.events[-1].finish_reason["type"] == "abort"
    assert a.events[-1].completion_tokens == 5
    engine.run_until_idle()
    assert sum(e.n_new for e in b.events) == 3
    assert engine.stats().used_kv_tokens == 0
    engine.abort("a")  # unknown now: ignored
    rows = engine.ground_truth()["requests"]
    assert [r[0] for r in rows] == ["a", "b"] and rows[0][-1] == "abort"


def test_chunked_prefill_spans_steps() -> None:
    engine = _engine(chunked_prefill_size=8192)
    sink = _submit(engine, "long", prompt=20_000, out=2)
    durations = [engine.step() for _ in range(3)]
    m = engine.model
    assert durations == pytest.approx(
        [step_time(m, 0, 0, 8192), step_time(m, 0, 0, 8192), step_time(m, 0, 0, 3616)]
    )
    assert len(sink.events) == 1 and sink.events[0].t == pytest.approx(sum(durations))


def test_jitter_changes_speed_per_seed_only() -> None:
    kw = {"concurrencies": (4,), "input_len": 100, "output_len": 100}
    base = run_virtual_sweep(ServerKnobs(), **kw).levels[0].output_throughput  # type: ignore[arg-type]
    runs = {
        seed: run_virtual_sweep(ServerKnobs(sim_jitter=0.05, sim_seed=seed), **kw)  # type: ignore[arg-type]
        .levels[0]
        .output_throughput
        for seed in (1, 2, 3)
    }
    again = run_virtual_sweep(ServerKnobs(sim_jitter=0.05, sim_seed=1), **kw)  # type: ignore[arg-type]
    assert again.levels[0].output_throughput == runs[1]
    assert len(set(runs.values())) == 3
    assert all(abs(v / base - 1) <= 0.055 for v in runs.values())


def test_slowdown_drops_one_level_only() -> None:
    kw = {"concurrencies": (1, 4, 16), "input_len": 200, "output_len": 200}
    base = run_virtual_sweep(ServerKnobs(), **kw).throughput()  # type: ignore[arg-type]
    slow = run_virtual_sweep(ServerKnobs(sim_slowdown=((4, 4, 1.1),)), **kw).throughput()  # type: ignore[arg-type]
    assert slow[1] == pytest.approx(base[1])
    assert slow[16] == pytest.approx(base[16])
    assert 0.87 < slow[4] / base[4] < 0.93


def test_create_engine_returns_startup_lines() -> None:
    engine, lines = create_engine(ServerKnobs(speculative_algorithm="NEXTN"), virtual=True)
    assert engine.stats().effective_max_running_requests == 48
    assert any(line.startswith("max_total_num_tokens=") for line in lines)
    logs: list[str] = []
    engine.on_log = logs.append
    _submit(engine, "x", out=200)
    engine.run_until_idle()
    assert any(line.startswith("Prefill batch, #new-seq: 1, #new-token: 100,") for line in logs)
    assert any("Decode batch, #running-req: 1," in x and "accept len: " in x for x in logs)


def _best_step_s(batch: int, steps: int = 100) -> float:
    """The quickest of three timings of ``steps`` decode steps at ``batch`` running requests."""
    engine = _engine(max_running_requests=batch)
    for i in range(batch):
        _submit(engine, f"r{i}", prompt=10, out=500)  # 500 > the 301 steps taken: all stay
    engine.step()  # one prefill step admits them all (< one chunk of prompt tokens)
    assert engine.stats().num_running == batch and engine.stats().num_queued == 0
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(steps):
            engine.step()
        best = min(best, (time.perf_counter() - t0) / steps)
    return best


def test_step_cost_grows_linearly_with_the_batch() -> None:
    """Guard against O(n^2) in the hot loop: 8x the batch costs about 8x per step (64x if
    quadratic). A ratio on one machine, not a time: a shared CPU slows both sides alike, and
    the best of three timings leaves out the stalls."""
    ratio = _best_step_s(256) / _best_step_s(32)
    assert ratio < 24, f"a step at batch 256 costs {ratio:.1f}x one at batch 32"


def test_real_time_events_follow_the_engine_schedule() -> None:
    """Token timestamps are the model's schedule; the loop never emits a step early."""
    knobs = ServerKnobs(sim_time_scale=2.0)
    engine, _ = create_engine(knobs)
    m = engine.model
    seen: list[tuple[str, TokenEvent, float]] = []

    def sink(rid: str):
        return lambda ev: seen.append((rid, ev, time.monotonic()))

    async def main() -> None:
        task = asyncio.create_task(engine.run())
        await asyncio.sleep(0)
        for i in range(3):
            engine.submit(
                SimRequest(rid=f"r{i}", prompt_len=1000, max_new_tokens=8, on_event=sink(f"r{i}"))
            )
        deadline = time.monotonic() + 10
        while not engine.is_idle() or not seen:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert len(seen) == 24
    assert all(wall >= ev.t for _, ev, wall in seen)  # never before its scheduled time
    by_rid: dict[str, list[TokenEvent]] = {}
    for rid, ev, _ in seen:
        by_rid.setdefault(rid, []).append(ev)
    times = [ev.t for ev in by_rid["r0"]]
    # All three were queued before the first step: one prefill of 3000 tokens, then 7 decode
    # steps of batch 3. Consecutive timestamps are exactly those step times (no drift), up to
    # the rounding of absolute clock readings: a few ulps of the clock's value, which grows with
    # the machine's uptime (2e-10 s after a week), not a share of the gap.
    assert [ev.t for ev in by_rid["r1"]] == times == [ev.t for ev in by_rid["r2"]]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    expected = [step_time(m, 3, 3 * (1000 + c)) for c in range(1, 8)]
    assert gaps == pytest.approx(expected, rel=0, abs=8 * math.ulp(max(times)))
    assert engine.stats().lag_ms_p99 >= 0.0
