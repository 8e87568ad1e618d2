"""The load generator against a real local SSE server: counting, failures, framing, auth."""

from __future__ import annotations

import asyncio
import math
import random
import re
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_llmperf.core.client import LoadGenerator, request_body
from pytest_llmperf.core.records import RequestRecord
from pytest_llmperf.core.sse import DONE, SSEDecoder
from pytest_llmperf.core.stream_parsers import GenerateStreamParser

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


@pytest.mark.parametrize("backend", ["sglang", "openai", "openai-chat"])
@pytest.mark.parametrize("per_event", [(1,), (1, 3)], ids=["1-token", "mixed"])
def test_a_cumulative_count_that_goes_down_fails_the_request(
    fake_server: FakeServer, backend: str, per_event: tuple[int, ...]
) -> None:
    """A server whose cumulative completion_tokens decreases mid-stream sends counts that are
    not a measurement: the request fails saying so, with the two counts, and is never a
    completed request (its tokens and timings reach no metric)."""
    fake_server.config.scenario = "count_down"
    fake_server.config.tokens_per_event = per_event
    rec = measure(fake_server, backend, n_out=20)
    assert not rec.ok
    assert re.search(r"completion_tokens went down from (\d+) to (\d+)", rec.error or ""), rec.error
    m = re.search(r"from (\d+) to (\d+)", rec.error or "")
    assert m is not None and int(m[2]) == int(m[1]) - 1 and int(m[1]) > 10


def test_api_key_sent_as_bearer_and_never_in_errors(fake_server: FakeServer) -> None:
    fake_server.config.api_key = "s3cret-key"
    ok = measure(fake_server, n_out=3, api_key="s3cret-key")
    assert ok.ok, ok.error
    assert fake_server.state.auth_headers[-1] == "Bearer s3cret-key"
    bad = measure(fake_server, n_out=3, api_key="wrong-key")
    assert not bad.ok and "401" in (bad.error or "")
    assert "wrong-key" not in (bad.error or "")


def test_generate_body_shape() -> None:
    body = orjson.loads(request_body("sglang", [5, 6], 100, temperature=0.0))
    assert body == {
        "input_ids": [5, 6],
        "sampling_params": {"max_new_tokens": 100, "ignore_eos": True, "temperature": 0.0},
        "stream": True,
    }


# --- per-read parsing against the plain per-event semantics ----------------------------------
_KEY = b'"completion_tokens":'


def _per_event_reference(chunks: list[tuple[float, bytes]]) -> RequestRecord:
    """What the per-read parser must reproduce, written the plain way: split every read into
    events, parse each count, stamp each event's new tokens at its read's arrival."""
    rec = RequestRecord(index=0, t_send=0.0)
    decoder = SSEDecoder()
    last = 0
    for t, chunk in chunks:
        for data in decoder.feed(chunk):
            if data == DONE:
                return rec
            j = data.rfind(_KEY)
            if j < 0:
                err = orjson.loads(data).get("error")
                if err:
                    return rec.fail(f"error in stream: {err['message']}")
                rec.events += 1
                continue
            m = re.match(rb"\s*(\d+)", data[j + len(_KEY) :])
            assert m is not None
            ct = int(m.group(1))
            if ct > last:
                rec.add_tokens(t, ct - last)
                last = ct
            else:
                rec.events += 1
    return rec


def _random_stream(rng: random.Random) -> bytes:
    """A /generate body with the shapes that trip per-read shortcuts: multi-token and repeated
    counts, JSON text holding U+2028, 'data: ', '[DONE]' and the count key itself, CRLF,
    comments, data split over two lines, other fields, 'data:' without a space, an error."""
    texts = ["a\u2028b", "data: x", "[DONE]", '"completion_tokens": 99', "\n", "ok "]
    events: list[bytes] = []
    ct, text = 0, ""
    for _ in range(rng.randint(1, 40)):
        ct += rng.choice([1, 1, 1, 2, 4, 0])
        text += rng.choice(texts)
        meta = {"finish_reason": None, "prompt_tokens": 3, "completion_tokens": ct}
        events.append(b"data: " + orjson.dumps({"text": text, "meta_info": meta}))
        roll = rng.random()
        if roll < 0.03:
            events.append(b": keep-alive")
        elif roll < 0.05:
            events.append(b'data: {"text":"x",\ndata: "meta_info":{"completion_tokens":%d}}' % ct)
        elif roll < 0.07:
            events.append(b'data: {"meta_info":{"completion_tokens":%d},\ndata: "text":"x"}' % ct)
        elif roll < 0.09:
            events.append(b'id: 7\ndata:{"meta_info":{"completion_tokens":%d}}' % ct)
        elif roll < 0.10:
            events.append(b'data:{"meta_info":{"completion_tokens":%d}}' % ct)
        elif roll < 0.11:
            events.append(b'data: {"error":{"message":"KV cache OOM"}}')
    meta = {"finish_reason": {"type": "length"}, "prompt_tokens": 3, "completion_tokens": ct + 1}
    final = b"data:" if rng.random() < 0.1 else b"data: "  # the space is optional in SSE
    events.append(final + orjson.dumps({"text": text + "!", "meta_info": meta}))
    events.append(b"data: [DONE]")
    sep = b"\r\n" if rng.random() < 0.2 else b"\n"
    return b"".join(e.replace(b"\n", sep) + sep + sep for e in events)


def _random_reads(rng: random.Random, body: bytes) -> list[tuple[float, bytes]]:
    reads, pos, k = [], 0, 0
    while pos < len(body):
        size = rng.choice([1, 3, 17, 100, 700, 5000, 100_000])
        reads.append((0.001 * (k + 1), body[pos : pos + size]))
        pos += size
        k += 1
    return reads


# One property over generated streams and read boundaries: hypothesis draws the choices
# through ``rng`` and, on a failure, shrinks them to a short stream and prints it.
@settings(max_examples=300, deadline=None)  # no deadline: a shared 2-core box stalls at times
@given(rng=st.randoms(use_true_random=False))
def test_per_read_parser_matches_per_event_semantics(rng: random.Random) -> None:
    reads = _random_reads(rng, _random_stream(rng))
    rec = RequestRecord(index=0, t_send=0.0)
    parser = GenerateStreamParser(rec)
    for t, chunk in reads:
        if parser.t_done < 0 and rec.ok:
            parser.feed(chunk, t)
    want = _per_event_reference(reads)
    assert rec.error == want.error
    assert rec.output_tokens == want.output_tokens
    assert rec.events == want.events
    assert list(rec.token_times) == list(want.token_times)  # exact, not approximately
    assert rec.first_event_tokens == want.first_event_tokens
    assert rec.ttft == want.ttft or (math.isnan(rec.ttft) and math.isnan(want.ttft))
    if rec.ok:
        parser.finish()
        assert rec.ok, rec.error
        assert rec.e2e == reads[-1][0]


def test_plain_sglang_reads_never_split_into_events(monkeypatch: pytest.MonkeyPatch) -> None:
    """SGLang's own stream shape stays on the per-read path, whatever the read boundaries."""

    def per_event(self: GenerateStreamParser, events: list[bytes], t: float) -> bool:
        raise AssertionError(f"fell back to per-event parsing for {events[:1]!r}")

    monkeypatch.setattr(GenerateStreamParser, "_feed_events", per_event)
    text, body = "", b""
    for ct in range(1, 301):
        text += " tok\u2028"
        meta = {"finish_reason": {"type": "length"} if ct == 300 else None, "completion_tokens": ct}
        body += b"data: " + orjson.dumps({"text": text, "meta_info": meta}) + b"\n\n"
    body += b"data: [DONE]\n\n"
    for size in (7, 64, 1000, 65536):
        rec = RequestRecord(index=0, t_send=0.0)
        parser = GenerateStreamParser(rec)
        reads = [body[i : i + size] for i in range(0, len(body), size)]
        for k, chunk in enumerate(reads):
            parser.feed(chunk, float(k + 1))
        parser.finish()
        assert rec.ok, rec.error
        assert (rec.output_tokens, rec.events, len(rec.token_times)) == (300, 300, 300)
        assert rec.e2e == float(len(reads))


def test_openai_extension_fields_can_be_left_out() -> None:
    on = orjson.loads(request_body("openai", [1, 2], 8, model="m"))
    off = orjson.loads(request_body("openai", [1, 2], 8, model="m", extensions=False))
    assert on["ignore_eos"] is True and on["stream_options"]["continuous_usage_stats"] is True
    assert "ignore_eos" not in off and off["stream_options"] == {"include_usage": True}
    assert off["max_tokens"] == 8 and off["prompt"] == [1, 2]


def test_a_4xx_naming_an_extension_says_how_to_turn_them_off() -> None:
    from pytest_llmperf.core.client import extension_hint

    hint = extension_hint(422, '{"detail":[{"loc":["body","ignore_eos"],"msg":"extra"}]}')
    assert "ignore_eos" in hint and "openai_extensions = false in [sweep]" in hint
    assert extension_hint(400, '{"error":"max_tokens too large"}') == ""
    assert extension_hint(500, "ignore_eos") == ""
