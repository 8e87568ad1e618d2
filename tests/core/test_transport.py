"""The stream transport (core/transport.py) against raw servers: body framings, cuts, reuse."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import orjson
import pytest

from pytest_llmperf.core.client import LoadGenerator
from pytest_llmperf.core.records import RequestRecord


def _events(n: int) -> list[bytes]:
    out = []
    for k in range(1, n + 1):
        meta = {"finish_reason": {"type": "length"} if k == n else None, "completion_tokens": k}
        out.append(b"data: " + orjson.dumps({"text": "a" * k, "meta_info": meta}) + b"\n\n")
    return [*out, b"data: [DONE]\n\n"]


def _run(
    respond: Callable[[asyncio.StreamWriter, int], bytes | None], n: int
) -> tuple[list[RequestRecord], int]:
    """``n`` sequential /generate requests; ``respond(writer, i)`` returns the i-th response's
    bytes (written at once) or None after handling the connection itself."""
    connections = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        try:
            for _ in range(n):  # bounded: one request per pass
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                out = respond(writer, handle.count)  # type: ignore[attr-defined]
                handle.count += 1  # type: ignore[attr-defined]
                if out is None:
                    writer.close()
                    return
                writer.write(out)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return

    handle.count = 0  # type: ignore[attr-defined]

    async def go() -> list[RequestRecord]:
        srv = await asyncio.start_server(handle, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}"
        try:
            async with LoadGenerator(url, "sglang", request_timeout_s=10) as gen:
                assert gen._pool is not None  # plain http: the stream transport
                return [await gen.request(i, [1, 2], 4) for i in range(n)]
        finally:
            srv.close()

    return asyncio.run(go()), connections


def _chunked(events: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"


HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"


@pytest.mark.parametrize("framing", ["chunked", "content-length"])
def test_keep_alive_connection_is_reused(framing: str) -> None:
    body = b"".join(_events(4))
    if framing == "chunked":
        resp = HEAD + b"transfer-encoding: chunked\r\n\r\n" + _chunked(_events(4))
    else:
        resp = HEAD + b"content-length: %d\r\n\r\n" % len(body) + body
    records, connections = _run(lambda w, i: resp, 5)
    assert [r.error for r in records] == [None] * 5
    assert [r.output_tokens for r in records] == [4] * 5
    assert connections == 1


def test_body_until_close_is_complete_at_the_close() -> None:
    resp = HEAD + b"connection: close\r\n\r\n" + b"".join(_events(4))

    def respond(w: asyncio.StreamWriter, i: int) -> None:
        w.write(resp)
        return None

    records, connections = _run(respond, 3)
    assert [(r.ok, r.output_tokens) for r in records] == [(True, 4)] * 3
    assert connections == 3


def test_chunked_stream_cut_mid_body_is_a_failed_request() -> None:
    cut = HEAD + b"transfer-encoding: chunked\r\n\r\n" + _chunked(_events(4))[:-40]

    def respond(w: asyncio.StreamWriter, i: int) -> None:
        w.write(cut)
        return None

    records, _ = _run(respond, 1)
    assert not records[0].ok
    assert "ConnectionLost: the server closed the connection before the response's end" in (
        records[0].error or ""
    )
    assert records[0].error.startswith("stream cut after")  # type: ignore[union-attr]


def test_error_status_with_content_length_body() -> None:
    body = b'{"error": {"message": "prompt too long"}}'
    resp = b"HTTP/1.1 400 Bad Request\r\ncontent-length: %d\r\n\r\n" % len(body) + body
    records, connections = _run(lambda w, i: resp, 2)
    assert [r.error for r in records] == ["HTTP 400: prompt too long"] * 2
    assert connections == 1  # a complete error response leaves the connection reusable


def test_unasked_compression_is_refused() -> None:
    resp = HEAD + b"content-encoding: gzip\r\ncontent-length: 4\r\n\r\nabcd"
    records, _ = _run(lambda w, i: resp, 1)
    assert not records[0].ok
    assert (records[0].error or "").startswith("ProtocolError: the server compressed the stream")


def test_malformed_http_is_a_protocol_error() -> None:
    records, _ = _run(lambda w, i: b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n", 1)
    assert (records[0].error or "").startswith("ProtocolError: the response is not valid HTTP")
