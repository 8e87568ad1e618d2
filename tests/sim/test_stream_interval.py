"""``--stream-interval`` and ``sampling_params.stream_interval``, as SGLang's scheduler sends.

SGLang 0.5.23 (managers/scheduler_components/output_streamer.py) sends a streamed request's
output at its first token, then whenever at least ``stream_interval`` tokens are unsent, and at
finish; each send carries every unsent token. A non-streamed request leaves the scheduler every
SGLANG_FORCE_STREAM_INTERVAL (50) tokens and at finish.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from pytest_llmperf.sim.args import parse_args
from pytest_llmperf.sim.engine import SimEngine, create_engine
from pytest_llmperf.sim.engine_api import SimRequest, TokenEvent
from pytest_llmperf.sim.knobs import ServerKnobs
from pytest_llmperf.sim.perf_model import resolve

from .conftest import ServerThread, profile_args, sse_json


def _engine(**kw: Any) -> SimEngine:
    model, _ = resolve(None, ServerKnobs(**kw))
    return SimEngine(model, virtual=True, record_token_times=True)


def _run(engine: SimEngine, out: int, **req: Any) -> tuple[list[TokenEvent], SimRequest]:
    events: list[TokenEvent] = []
    r = SimRequest(rid="a", prompt_len=100, max_new_tokens=out, on_event=events.append, **req)
    engine.submit(r)
    engine.run_until_idle()
    return events, r


def test_interval_sends_first_token_then_every_interval_tokens_and_the_finish() -> None:
    events, req = _run(_engine(stream_interval=4), out=10)
    assert [e.completion_tokens for e in events] == [1, 5, 9, 10]
    assert [e.n_new for e in events] == [1, 4, 4, 1]
    assert [e.finished for e in events] == [False, False, False, True]
    # An event leaves at the end of the step that made its last token; the tokens themselves
    # were made at the engine's own pace (ground truth is unchanged by the interval).
    times = req.token_times
    assert [e.t for e in events] == [times[0], times[4], times[8], times[9]]
    plain, plain_req = _run(_engine(stream_interval=1), out=10)
    assert len(plain) == 10 and plain_req.token_times == times


def test_interval_with_speculative_steps_sends_once_the_interval_is_passed() -> None:
    engine = _engine(speculative_algorithm="NEXTN", stream_interval=5, sim_seed=3)
    events, req = _run(engine, out=200)
    assert sum(e.n_new for e in events) == 200 and events[-1].completion_tokens == 200
    assert events[0].n_new == 1
    middle = events[1:-1]
    assert middle and all(5 <= e.n_new < 5 + 4 for e in middle)  # passed by < one step (<= 4)
    assert any(e.n_new > 5 for e in middle)  # steps pass the interval without landing on it
    # the verify count is cumulative over every step, sent or not
    assert events[-1].spec_verify_ct == engine._spec_forwards
    assert [e.completion_tokens for e in events] == sorted({e.completion_tokens for e in events})
    assert len(req.token_times) == 200


def test_a_requests_own_interval_overrides_the_servers() -> None:
    events, _ = _run(_engine(stream_interval=4), out=10, stream_interval=3)
    assert [e.completion_tokens for e in events] == [1, 4, 7, 10]


def test_a_non_streamed_request_leaves_the_scheduler_every_50_tokens() -> None:
    events, _ = _run(_engine(stream_interval=1), out=120, stream=False)
    assert [e.completion_tokens for e in events] == [50, 100, 120]
    assert [e.n_new for e in events] == [50, 50, 20]


@pytest.fixture
def real_server(make_server: Any) -> Any:
    def start(*flags: str) -> ServerThread:
        knobs = parse_args([*profile_args(), *flags]).knobs
        engine, _ = create_engine(knobs)
        return make_server(
            engine=engine, sim_profile=knobs.sim_profile, stream_interval=knobs.stream_interval
        )

    return start


def _counts(url: str, sampling: dict[str, Any]) -> list[int]:
    body = {"input_ids": [1] * 16, "sampling_params": sampling, "stream": True}
    events, done = sse_json(httpx.post(url + "/generate", json=body, timeout=30).content)
    assert done
    return [e["meta_info"]["completion_tokens"] for e in events]


def test_server_streams_by_its_interval_and_a_requests_own(real_server: Any) -> None:
    s = real_server("--stream-interval", "4")
    assert _counts(s.url, {"max_new_tokens": 12}) == [1, 5, 9, 12]
    assert _counts(s.url, {"max_new_tokens": 12, "stream_interval": 8}) == [1, 9, 12]
    info = httpx.get(s.url + "/server_info").json()
    assert info["stream_interval"] == 4
    bad = {"input_ids": [1], "sampling_params": {"stream_interval": "2"}}
    r = httpx.post(s.url + "/generate", json=bad, timeout=10)
    assert r.status_code == 400 and "stream_interval" in r.json()["error"]["message"]
