"""The load generator against a real local SSE server: counting, failures, framing, auth."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pytest_llmperf.client import LoadGenerator, request_body
from pytest_llmperf.records import RequestRecord

from .fake_server import FakeServer


def measure(
    server: FakeServer, backend: Any = "sglang", n_out: int = 20, **kw: Any
) -> RequestRecord:
    async def go() -> RequestRecord:
        async with LoadGenerator(server.url, backend, **kw) as gen:
            return await gen.request(0, [1001, 1002, 1003], n_out)

    return asyncio.run(go())


@pytest.mark.parametrize("pattern", [(1,), (1, 3), (4,), (2, 5, 1)])
def test_multi_token_events_counted_exactly(
    fake_server: FakeServer, pattern: tuple[int, ...]
) -> None:
    fake_server.config.tokens_per_event = pattern
    rec = measure(fake_server, n_out=37)
    assert rec.ok, rec.error
    assert rec.output_tokens == 37 == len(rec.token_times)
    expected_events = 0
    left, i = 37, 0
    while left > 0:
        left -= min(pattern[i % len(pattern)], left)
        i += 1
        expected_events += 1
    assert rec.events == expected_events
    assert rec.prompt_tokens == 3
    assert rec.ttft > 0 and rec.e2e >= rec.ttft


def test_split_tokens_are_evenly_spaced_within_an_event(fake_server: FakeServer) -> None:
    fake_server.config.tokens_per_event = (1, 4)
    rec = measure(fake_server, n_out=21)
    t = list(rec.token_times)
    # tokens 1..4 came in one event after token 0: their gaps must be equal (a split, not stamps)
    gaps = [t[k + 1] - t[k] for k in range(0, 4)]
    assert max(gaps) - min(gaps) < 1e-9
    assert len(rec.itls()) == 20


@pytest.mark.parametrize(
    ("scenario", "needle"),
    [
        ("error_in_stream", "KV cache OOM"),
        ("cut", "stream cut after 10 tokens"),
        ("clean_cut", "before [DONE]"),
        ("http_500", "HTTP 500"),
        ("no_finish", "finish_reason"),
        ("abort", "aborted"),
    ],
)
def test_broken_streams_are_failed_requests(
    fake_server: FakeServer, scenario: str, needle: str
) -> None:
    fake_server.config.scenario = scenario
    rec = measure(fake_server, n_out=20)
    assert not rec.ok
    assert needle in (rec.error or "")


def test_crlf_and_split_writes_and_u2028(fake_server: FakeServer) -> None:
    fake_server.config.crlf = True
    fake_server.config.split_writes = True
    fake_server.config.tokens_per_event = (1, 2)
    rec = measure(fake_server, n_out=15)
    assert rec.ok, rec.error
    assert rec.output_tokens == 15


def test_request_deadline_fails_the_request(fake_server: FakeServer) -> None:
    fake_server.config.step_s = 0.2
    rec = measure(fake_server, n_out=50, request_timeout_s=0.3)
    assert not rec.ok and "deadline" in (rec.error or "")


@pytest.mark.parametrize("backend", ["openai", "openai-chat"])
@pytest.mark.parametrize("continuous", [True, False])
def test_openai_backends(fake_server: FakeServer, backend: str, continuous: bool) -> None:
    fake_server.config.continuous_usage = continuous
    fake_server.config.tokens_per_event = (1, 2)
    rec = measure(fake_server, backend, n_out=17)
    assert rec.ok, rec.error
    assert rec.output_tokens == 17
    if continuous:
        assert len(rec.token_times) == 17  # per-chunk counts from usage: multi-token chunks split
    else:
        assert len(rec.token_times) == 12  # one stamp per content chunk, total from final usage
    body = fake_server.state.bodies[-1]
    assert body["model"] == "fake/model" and body["ignore_eos"] is True
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    key = "max_completion_tokens" if backend == "openai-chat" else "max_tokens"
    assert body[key] == 17


def test_openai_error_in_stream(fake_server: FakeServer) -> None:
    fake_server.config.scenario = "error_in_stream"
    rec = measure(fake_server, "openai", n_out=20)
    assert not rec.ok and "boom" in (rec.error or "")


def test_api_key_sent_as_bearer_and_never_in_errors(fake_server: FakeServer) -> None:
    fake_server.config.api_key = "s3cret-key"
    ok = measure(fake_server, n_out=3, api_key="s3cret-key")
    assert ok.ok, ok.error
    assert fake_server.state.auth_headers[-1] == "Bearer s3cret-key"
    bad = measure(fake_server, n_out=3, api_key="wrong-key")
    assert not bad.ok and "401" in (bad.error or "")
    assert "wrong-key" not in (bad.error or "")


def test_generate_body_shape() -> None:
    import orjson

    body = orjson.loads(request_body("sglang", [5, 6], 100, temperature=0.0))
    assert body == {
        "input_ids": [5, 6],
        "sampling_params": {"max_new_tokens": 100, "ignore_eos": True, "temperature": 0.0},
        "stream": True,
    }
