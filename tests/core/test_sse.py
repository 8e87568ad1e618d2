"""SSE framing on bytes: every split point, CRLF, U+2028, comments, multi-line data, and the
per-read scan that spares the load generator a split per event."""

from __future__ import annotations

import orjson

from pytest_llmperf.core.sse import DONE, SSEDecoder, payloads, scan_data_lines, split_events

EVENTS = [
    orjson.dumps(
        {"text": "line\u2028sep\u2029para\u0085nel", "meta_info": {"completion_tokens": 1}}
    ),
    orjson.dumps({"text": "two", "meta_info": {"completion_tokens": 3}}),
    DONE,
]


def _body(sep: bytes = b"\n") -> bytes:
    return b"".join(b"data: " + e + sep + sep for e in EVENTS)


def _feed_split(body: bytes, cut: int) -> list[bytes]:
    dec = SSEDecoder()
    return dec.feed(body[:cut]) + dec.feed(body[cut:])


def test_u2028_stays_inside_the_json() -> None:
    out = split_events(_body())
    assert out == EVENTS
    assert orjson.loads(out[0])["text"] == "line\u2028sep\u2029para\u0085nel"


def test_every_split_point_gives_the_same_events() -> None:
    for sep in (b"\n", b"\r\n"):
        body = _body(sep)
        for cut in range(len(body) + 1):
            assert _feed_split(body, cut) == EVENTS, (sep, cut)


def test_byte_by_byte_crlf() -> None:
    dec = SSEDecoder()
    out: list[bytes] = []
    for b in _body(b"\r\n"):
        out += dec.feed(bytes([b]))
    assert out == EVENTS
    assert dec.pending == b""


def test_lone_cr_line_endings() -> None:
    # A trailing CR may be half a CRLF, so an event ending the buffer waits for the next byte.
    assert split_events(b"data: a\r\rdata: b\r\r:") == [b"a", b"b"]


def test_comments_fields_and_multiline_data() -> None:
    body = b": keep-alive\n\nevent: message\nid: 7\ndata: x\ndata:y\n\ndata: [DONE]\n\n"
    assert split_events(body) == [b"x\ny", DONE]


def test_incomplete_event_is_pending_not_emitted() -> None:
    dec = SSEDecoder()
    assert dec.feed(b'data: {"a":1}\n\ndata: {"b"') == [b'{"a":1}']
    assert dec.pending == b'data: {"b"'


KEY = b'"completion_tokens":'


def test_take_hands_back_complete_events_unsplit() -> None:
    dec = SSEDecoder()
    data, end = dec.take(b'data: {"a":1}\n\ndata: {"b":2}\n\ndata: {"c"')
    assert data[:end] == b'data: {"a":1}\n\ndata: {"b":2}'
    assert payloads(data, end) == [b'{"a":1}', b'{"b":2}']
    assert dec.pending == b'data: {"c"'
    assert dec.take(b":3}")[1] == -1  # nothing complete yet
    assert dec.pending == b'data: {"c":3}'
    data, end = dec.take(b"\n\n")
    assert data[:end] == b'data: {"c":3}'
    assert dec.pending == b""


def test_an_event_larger_than_its_reads_is_joined_once_when_it_ends() -> None:
    event = b'data: {"text":"' + b"x" * 5000 + b'"}'
    dec = SSEDecoder()
    for i in range(0, len(event), 700):
        assert dec.take(event[i : i + 700])[1] == -1
    dec.take(b"\n")  # the blank line itself split across reads
    data, end = dec.take(b"\ndata: {")
    assert payloads(data, end) == [event[6:]]
    assert dec.pending == b"data: {"


def test_scan_counts_plain_events_and_finds_the_key() -> None:
    events = [
        b'data: {"text":"\xe2\x80\xa8 \\"completion_tokens\\": 9","completion_tokens":%d}' % k
        for k in (1, 2, 5)
    ]
    data = b"\n\n".join(events) + b"\n\n"
    end = data.rfind(b"\n\n")
    scan = scan_data_lines(data, end, KEY)
    assert scan is not None
    n, first, last, start, stop = scan
    assert n == 3
    assert data[first + len(KEY) : first + len(KEY) + 1] == b"1"  # not the escaped one in text
    assert data[last + len(KEY) : last + len(KEY) + 1] == b"5"
    assert data[start:stop] == events[-1][6:]


def test_scan_declines_anything_but_one_data_line_with_the_key() -> None:
    for odd in (
        b": ping",  # a comment event
        b'event: x\ndata: {"completion_tokens":2}',  # another field
        b'data: {"completion_tokens":2,\ndata: "x":1}',  # data over two lines
        b'data:{"completion_tokens":2}',  # no space: payload offsets differ
        b'data: {"error":{"message":"boom"}}',  # no count
    ):
        data = b'data: {"completion_tokens":1}\n\n' + odd + b"\n\n"
        assert scan_data_lines(data, data.rfind(b"\n\n"), KEY) is None, odd
