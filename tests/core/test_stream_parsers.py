"""Stream parsers on the shapes real servers send: exact counts, and big events never decoded.

SGLang 0.5.23's default ``/generate`` stream repeats the cumulative text and ``output_ids`` in
every event, with ``meta_info`` last; vLLM and SGLang's OpenAI streams carry cumulative usage in
every chunk (``continuous_usage_stats``) and reasoning in its own delta field.
"""

from __future__ import annotations

import math
import random
from typing import Any

import orjson
import pytest

from pytest_llmperf.core import stream_parsers
from pytest_llmperf.core.records import RequestRecord
from pytest_llmperf.core.stream_parsers import (
    GenerateStreamParser,
    OpenAIStreamParser,
    meta_info_of,
)

PIECES = [" the", "\u2028", ' "q"', " model", "é", "data: ", "[DONE]", '"completion_tokens":7']


def sglang_stream(n: int, *, step: int = 1, sep: bytes = b"\n") -> bytes:
    """SGLang's non-incremental /generate stream: cumulative text and ids, meta_info last."""
    text, ids, body = "", [], b""
    for ct in range(step, n + 1, step):
        for k in range(ct - step, ct):
            text += PIECES[k % len(PIECES)]
            ids.append(100_000 + k)
        meta: dict[str, Any] = {
            "id": "rid",
            "finish_reason": {"type": "length", "length": n} if ct == n else None,
            "prompt_tokens": 17,
            "weight_version": "default",
            "num_retractions": 0,
            "reasoning_tokens": 0,
            "completion_tokens": ct,
            "cached_tokens": 5,
        }
        event = orjson.dumps({"text": text, "output_ids": ids, "meta_info": meta})
        body += b"data: " + event + sep + sep
    return body + b"data: [DONE]" + sep + sep


def feed_all(parser: Any, body: bytes, size: int) -> int:
    reads = [body[i : i + size] for i in range(0, len(body), size)]
    for k, chunk in enumerate(reads):
        if parser.t_done < 0 and parser.rec.ok:
            parser.feed(chunk, float(k + 1))
    parser.finish()
    return len(reads)


@pytest.mark.parametrize("size", [1, 500, 4096, 65536, 1 << 22])
@pytest.mark.parametrize("step", [1, 3])
def test_cumulative_sglang_stream_is_counted_without_decoding_text_or_ids(
    monkeypatch: pytest.MonkeyPatch, size: int, step: int
) -> None:
    n = 300 if size > 1 else 60
    body = sglang_stream(n, step=step)
    parsed: list[int] = []
    real_loads = stream_parsers.orjson.loads

    def loads(data: Any) -> Any:
        parsed.append(len(data))
        return real_loads(data)

    monkeypatch.setattr(stream_parsers.orjson, "loads", loads)
    rec = RequestRecord(index=0, t_send=0.0)
    n_reads = feed_all(GenerateStreamParser(rec), body, size)
    assert rec.ok, rec.error
    assert (rec.output_tokens, rec.events, len(rec.token_times)) == (n, n // step, n)
    assert (rec.prompt_tokens, rec.cached_tokens) == (17, 5)
    assert rec.e2e == float(n_reads)
    # only the last event's meta_info was parsed: a few hundred bytes, not KB of text and ids
    assert parsed and max(parsed) < 400, parsed


def test_crlf_framing_of_the_cumulative_stream() -> None:
    rec = RequestRecord(index=0, t_send=0.0)
    feed_all(GenerateStreamParser(rec), sglang_stream(200, sep=b"\r\n"), 999)
    assert rec.ok, rec.error
    assert (rec.output_tokens, rec.events) == (200, 200)


def test_meta_info_of_parses_only_the_closing_object_else_the_whole_event() -> None:
    last = b'{"text":"\\"meta_info\\": {}","meta_info": {"prompt_tokens": 9, "cached_tokens": 2}}'
    assert meta_info_of((b"xx" + last, 2, 2 + len(last))) == {
        "prompt_tokens": 9,
        "cached_tokens": 2,
    }
    # something after meta_info (return_prompt_token_ids, a batch index): the whole event
    after = b'{"meta_info":{"prompt_tokens":9},"prompt_token_ids":[1,2],"index":0}'
    assert meta_info_of((after, 0, len(after))) == {"prompt_tokens": 9}
    nested = b'{"meta_info":{"prompt_tokens":9},"x":{"meta_info":{"prompt_tokens":1}}}'
    assert meta_info_of((nested, 0, len(nested))) == {"prompt_tokens": 9}
    spaced = b'{"text":"a", "meta_info" : {"prompt_tokens": 4}}'
    assert meta_info_of((spaced, 0, len(spaced))) == {"prompt_tokens": 4}


def test_keys_with_a_space_before_the_colon_are_still_counted() -> None:
    body = b"".join(
        b'data: {"text":"x", "meta_info" : {"finish_reason" : %s, "completion_tokens" : %d}}\n\n'
        % (b'{"type":"length"}' if k == 4 else b"null", k)
        for k in range(1, 5)
    )
    rec = RequestRecord(index=0, t_send=0.0)
    feed_all(GenerateStreamParser(rec), body + b"data: [DONE]\n\n", 64)
    assert rec.ok, rec.error
    assert (rec.output_tokens, rec.events) == (4, 4)


@pytest.mark.parametrize(
    ("tail", "error"),
    [
        (b'data: {"error":{"message":"KV cache OOM"}}\n\n', "error in stream: KV cache OOM"),
        (b"", "stream ended before [DONE] after 100 tokens"),
    ],
)
def test_errors_and_cuts_in_a_cumulative_stream(tail: bytes, error: str) -> None:
    body = sglang_stream(150).split(b"\n\n")
    rec = RequestRecord(index=0, t_send=0.0)
    feed_all(GenerateStreamParser(rec), b"\n\n".join(body[:100]) + b"\n\n" + tail, 7000)
    assert not rec.ok
    assert rec.error == error
    assert rec.output_tokens == 100


def _with_dip(body: bytes, at: int) -> bytes:
    """The stream with event ``at`` (0-based) followed by a copy of it whose count is one
    lower; the next event then rises past both, so a read holding all three nets a rise."""
    events = body.split(b"\n\n")
    key = b'"completion_tokens":'
    j = events[at].rfind(key) + len(key)
    ct = int(events[at][j:].split(b",")[0].split(b"}")[0])
    lower = events[at][:j] + str(ct - 1).encode() + events[at][j + len(str(ct)) :]
    return b"\n\n".join([*events[: at + 1], lower, *events[at + 1 :]])


@pytest.mark.parametrize("size", [1, 500, 7000, 1 << 22])
@pytest.mark.parametrize("kind", ["generate", "chat-usage"])
def test_a_cumulative_count_that_goes_down_fails_the_request(kind: str, size: int) -> None:
    """Whether the dip arrives alone, at a read's edge, or between two rising counts of one
    coalesced read (1 << 22: the whole body in one read), the request fails naming the counts
    and none of its tokens is kept as a completed request's."""
    if kind == "generate":
        body = _with_dip(sglang_stream(60), 40)
        rec = RequestRecord(index=0, t_send=0.0)
        parser: Any = GenerateStreamParser(rec)
    else:
        body = _with_dip(chat_stream(random.Random(3), 60, usage=True), 41)  # 41: role chunk
        rec = RequestRecord(index=0, t_send=0.0)
        parser = OpenAIStreamParser(rec, chat=True)
    feed_all(parser, body, size)
    assert not rec.ok
    assert rec.error is not None
    assert "completion_tokens went down from" in rec.error
    went = rec.error.split("went down from ")[1].split(";")[0]
    hi, lo = (int(x) for x in went.split(" to "))
    assert hi - lo == 1 and hi >= 40


def test_a_count_that_stays_the_same_is_no_failure() -> None:
    """An event repeating the last count (no new token) is legal: not a dip."""
    events = sglang_stream(30).split(b"\n\n")
    body = b"\n\n".join([*events[:10], events[9], *events[10:]])
    for size in (1, 700, 1 << 22):
        rec = RequestRecord(index=0, t_send=0.0)
        feed_all(GenerateStreamParser(rec), body, size)
        assert rec.ok, rec.error
        assert rec.output_tokens == 30


# --- OpenAI streams ---------------------------------------------------------------------------
def chat_stream(
    rng: random.Random, n: int, *, usage: bool, field: str = "content", finish: str = "length"
) -> bytes:
    """A vLLM-style chat stream: a role chunk, content or reasoning deltas (sometimes two tokens
    a chunk), a finish chunk, the closing usage chunk, [DONE]; keys sometimes spaced."""
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}

    def chunk(delta: dict[str, Any], fin: str | None, ct: int) -> bytes:
        ev: dict[str, Any] = {
            **head,
            "choices": [{"index": 0, "delta": delta, "finish_reason": fin}],
        }
        if usage:
            ev["usage"] = {"prompt_tokens": 8, "total_tokens": 8 + ct, "completion_tokens": ct}
        raw = orjson.dumps(ev)
        if rng.random() < 0.1:
            raw = raw.replace(b'":', b'": ')  # Python json.dumps spacing
        return b"data: " + raw + b"\n\n"

    out = [chunk({"role": "assistant", "content": ""}, None, 0)]
    ct = 0
    while ct < n:
        step = min(n - ct, rng.choice([1, 1, 1, 2]))
        ct += step
        out.append(chunk({field: "".join(rng.choice(PIECES) for _ in range(step))}, None, ct))
    out.append(chunk({}, finish, n))
    final = {**head, "choices": [], "usage": {"prompt_tokens": 8, "completion_tokens": n}}
    out.append(b"data: " + orjson.dumps(final) + b"\n\n")
    return b"".join(out) + b"data: [DONE]\n\n"


def per_event(body: bytes, size: int) -> RequestRecord:
    """The same parser forced onto its event-by-event path: the reference for exactness."""
    rec = RequestRecord(index=0, t_send=0.0)
    parser = OpenAIStreamParser(rec, chat=True)
    reads = [body[i : i + size] for i in range(0, len(body), size)]
    for k, chunk in enumerate(reads):
        if parser.t_done < 0 and rec.ok:
            data, end = parser._decoder.take(chunk)
            if end >= 0:
                parser._feed_events(stream_parsers.payloads(data, end), float(k + 1))
    parser.finish()
    return rec


@pytest.mark.parametrize("seed", range(40))
def test_openai_usage_stream_per_read_matches_event_by_event(seed: int) -> None:
    rng = random.Random(seed)
    body = chat_stream(rng, rng.randint(1, 300), usage=True)
    size = rng.choice([1, 50, 333, 4096, 65536])
    rec = RequestRecord(index=0, t_send=0.0)
    feed_all(OpenAIStreamParser(rec, chat=True), body, size)
    want = per_event(body, size)
    assert rec.ok and want.ok, (rec.error, want.error)
    assert (rec.output_tokens, rec.events, rec.prompt_tokens) == (
        want.output_tokens,
        want.events,
        want.prompt_tokens,
    )
    assert list(rec.token_times) == list(want.token_times)
    assert rec.first_event_tokens == want.first_event_tokens
    assert rec.ttft == want.ttft or (math.isnan(rec.ttft) and math.isnan(want.ttft))


def test_openai_usage_stream_stays_on_the_per_read_path(monkeypatch: pytest.MonkeyPatch) -> None:
    body = chat_stream(random.Random(1), 1000, usage=True)
    calls: list[int] = []
    real = OpenAIStreamParser._feed_events

    def spy(self: OpenAIStreamParser, events: list[bytes], t: float) -> None:
        calls.append(len(events))
        real(self, events, t)

    monkeypatch.setattr(OpenAIStreamParser, "_feed_events", spy)
    rec = RequestRecord(index=0, t_send=0.0)
    feed_all(OpenAIStreamParser(rec, chat=True), body, 65536)
    assert rec.ok, rec.error
    assert rec.output_tokens == 1000
    # only the read with the role chunk (count 0) and the one with the closing chunks
    assert len(calls) <= 2, calls


@pytest.mark.parametrize("field", ["content", "reasoning_content", "reasoning"])
@pytest.mark.parametrize("usage", [True, False])
def test_reasoning_tokens_count_as_output(field: str, usage: bool) -> None:
    rng = random.Random(7)
    body = chat_stream(rng, 50, usage=usage, field=field)
    rec = RequestRecord(index=0, t_send=0.0)
    feed_all(OpenAIStreamParser(rec, chat=True), body, 300)
    assert rec.ok, rec.error
    assert rec.output_tokens == 50


def test_openai_abort_and_error_inside_a_200_stream() -> None:
    rng = random.Random(3)
    rec = RequestRecord(index=0, t_send=0.0)
    feed_all(
        OpenAIStreamParser(rec, chat=True), chat_stream(rng, 40, usage=True, finish="abort"), 65536
    )
    assert rec.error == "request aborted by server (finish_reason abort)"
    body = chat_stream(rng, 40, usage=True).split(b"\n\n")
    err = b'data: {"object":"error","message":"engine died","code":500}'
    rec = RequestRecord(index=0, t_send=0.0)
    feed_all(OpenAIStreamParser(rec, chat=True), b"\n\n".join([*body[:20], err, *body[20:]]), 65536)
    assert rec.error == "error in stream: engine died"
    rec = RequestRecord(index=0, t_send=0.0)
    feed_all(OpenAIStreamParser(rec, chat=True), b"\n\n".join(body[:20]) + b"\n\n", 65536)
    assert rec.error is not None and rec.error.startswith("stream ended before [DONE]")


def one_read_per_event(body: bytes) -> list[bytes]:
    return [e + b"\n\n" for e in body.split(b"\n\n") if e]


def test_one_read_per_event_is_exact_for_both_parsers() -> None:
    """A client that keeps up reads one event at a time: the single-event shortcut."""
    body = sglang_stream(120, step=2)
    rec = RequestRecord(index=0, t_send=0.0)
    parser = GenerateStreamParser(rec)
    for k, read in enumerate(one_read_per_event(body)):
        parser.feed(read, float(k + 1))
    parser.finish()
    assert rec.ok, rec.error
    assert (rec.output_tokens, rec.events, rec.prompt_tokens) == (120, 60, 17)
    assert list(rec.token_times)[:4] == [1.0, 1.0, 1.5, 2.0]  # 2-token events split the gap
    for seed in range(10):
        body = chat_stream(random.Random(seed), 80, usage=True)
        reads = one_read_per_event(body)
        rec = RequestRecord(index=0, t_send=0.0)
        oai = OpenAIStreamParser(rec, chat=True)
        for k, read in enumerate(reads):
            oai.feed(read, float(k + 1))
        oai.finish()
        want = per_event(body, len(body))  # one read, event by event: same tokens and events
        assert rec.ok, rec.error
        assert (rec.output_tokens, rec.events) == (want.output_tokens, want.events)
        assert rec.output_tokens == 80 and rec.events == len(reads) - 1  # all but [DONE]
        assert rec.e2e == float(len(reads))


@pytest.mark.parametrize(
    ("reads", "error", "tokens"),
    [
        ([b'data: {"error":{"message":"OOM"}}\n\n'], "error in stream: OOM", 0),
        ([b'data: {"meta_info":{"completion_tokens":1}}\r\n\n'], None, 1),  # CR: general path
        ([b'data: {"meta_info":{"completion_tokens":2}}\n\n', b"data: [DONE]\n\n"], None, 2),
        ([b'data: {"meta_info":{"completion_tokens":3}}\n\n', b"data: {}\n\n"], None, 3),
    ],
)
def test_single_event_reads_that_are_not_plain_counts(
    reads: list[bytes], error: str | None, tokens: int
) -> None:
    rec = RequestRecord(index=0, t_send=0.0)
    parser = GenerateStreamParser(rec)
    for k, read in enumerate(reads):
        parser.feed(read, float(k + 1))
    assert rec.error == error
    assert rec.output_tokens == tokens
    assert rec.events == (0 if error else len([r for r in reads if b"DONE" not in r]))
    assert (parser.t_done > 0) == any(b"DONE" in r for r in reads)


def _usage_chunk(ct: int, *finishes: str | None) -> bytes:
    choices = [
        {"index": i, "delta": {"content": "a"}, "finish_reason": f} for i, f in enumerate(finishes)
    ]
    usage = {"prompt_tokens": 3, "completion_tokens": ct, "total_tokens": 3 + ct}
    return b"data: " + orjson.dumps({"choices": choices, "usage": usage}) + b"\n\n"


@pytest.mark.parametrize(
    ("last", "error", "finished"),
    [
        (_usage_chunk(3, "length"), None, True),
        (_usage_chunk(3, None, "abort"), "request aborted by server (finish_reason abort)", False),
        (_usage_chunk(3, "stop", None), None, True),  # a set finish_reason before a null one
        (_usage_chunk(3, None), None, False),  # never finished: judged at the end
    ],
)
def test_one_more_token_shortcut_sees_every_finish_reason(
    last: bytes, error: str | None, finished: bool
) -> None:
    rec = RequestRecord(index=0, t_send=0.0)
    oai = OpenAIStreamParser(rec, chat=True)
    for k, read in enumerate([_usage_chunk(1, None), _usage_chunk(2, None), last]):
        oai.feed(read, float(k + 1))
    oai.feed(b"data: [DONE]\n\n", 4.0)
    oai.finish()
    if error is not None:
        assert rec.error == error
        return
    assert rec.output_tokens == 3 and list(rec.token_times) == [1.0, 2.0, 3.0]
    assert rec.ok is finished
    if not finished:
        assert "finish_reason" in (rec.error or "")
