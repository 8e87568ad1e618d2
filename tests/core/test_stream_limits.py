"""Streams that never end an event, through the real client and transport."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from unittest import mock

import httpx
import pytest

from pytest_llmperf.core import server_probe
from pytest_llmperf.core.client import LoadGenerator
from pytest_llmperf.core.records import RequestRecord
from pytest_llmperf.core.server_probe import flush_cache, get_server_info
from pytest_llmperf.core.sse import SSEDecoder

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def _serving(handle: Handler) -> AsyncIterator[str]:
    """A loopback server running ``handle`` per connection; its URL while in the block."""
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()


@contextlib.asynccontextmanager
async def endless_event_server(total: int, piece: int = 1 << 16) -> AsyncIterator[str]:
    """Answers every request with one event that never ends: ``total`` bytes, then silence
    with the connection open (until the client closes it)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(HEAD + _chunk(b'data: {"text": "'))
            sent = 0
            while sent < total:  # bounded by total
                writer.write(_chunk(b"x" * piece))
                sent += piece
                await writer.drain()
            await reader.read()  # the client's close
        writer.close()

    async with _serving(handle) as url:
        yield url


def test_decoder_refuses_an_event_past_its_cap() -> None:
    dec = SSEDecoder(max_event_bytes=1000)
    assert dec.feed(b"data: 1\n\ndata: " + b"x" * 500) == [b"1"]
    with pytest.raises(ValueError, match="grew past"):
        dec.feed(b"x" * 600)
    assert dec.idle  # nothing held after the refusal
    assert dec.feed(b"data: 2\n\n") == [b"2"]


def test_decoder_counts_only_the_unfinished_event() -> None:
    dec = SSEDecoder(max_event_bytes=1000)
    event = b"data: " + b"y" * 592 + b"\n\n"
    for _ in range(50):  # 30 kB in all, each 600-byte event split across two reads
        assert dec.feed(event[:300]) == []
        assert dec.feed(event[300:]) == [b"y" * 592]
    assert dec.idle


def test_endless_event_fails_the_request_not_the_process() -> None:
    async def main() -> str | None:
        async with endless_event_server(total=40 << 20) as url:
            async with LoadGenerator(url, "sglang", request_timeout_s=60) as gen:
                rec = await gen.request(0, [1, 2, 3], 4)
        return rec.error

    error = asyncio.run(main())
    assert error is not None and "grew past 16 MiB" in error


@contextlib.asynccontextmanager
async def stalling_server(events: int) -> AsyncIterator[str]:
    """Sends ``events`` token events, then nothing, with the connection held open."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(HEAD)
            for ct in range(1, events + 1):
                writer.write(_chunk(b'data: {"meta_info": {"completion_tokens": %d}}\n\n' % ct))
            await writer.drain()
            await reader.read()  # the client's close
        writer.close()

    async with _serving(handle) as url:
        yield url


@pytest.mark.parametrize("events", [0, 3])
def test_a_stalled_stream_fails_at_the_idle_timeout_not_the_deadline(events: int) -> None:
    async def main() -> RequestRecord:
        async with stalling_server(events) as url:
            async with LoadGenerator(
                url, "sglang", request_timeout_s=600, idle_timeout_s=0.4
            ) as gen:
                return await gen.request(0, [1, 2, 3], 8)

    rec = asyncio.run(main())
    assert rec.error == (
        f"the stream stalled: no event for 0.4s after {events} tokens (idle-read timeout)"
    )
    assert rec.e2e < 60  # far from the 600 s deadline


def test_the_idle_timeout_never_exceeds_the_request_deadline() -> None:
    gen = LoadGenerator("http://127.0.0.1:1", request_timeout_s=5)
    assert gen.idle_timeout_s == 5


def test_a_control_request_that_drips_ends_at_its_timeout() -> None:
    """/server_info and /flush_cache answered with a byte now and then: httpx's read timeout
    restarts on every byte, so only a total bound ends them."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(HEAD.replace(b"text/event-stream", b"application/json"))
            for _ in range(200):  # bounded: 60 s of drips, far past the timeout
                writer.write(_chunk(b" "))
                await writer.drain()
                await asyncio.sleep(0.3)
        writer.close()

    async def main() -> None:
        async with _serving(handle) as url:
            async with LoadGenerator(url, "sglang", request_timeout_s=600) as gen:
                await gen.http.get("/server_info", timeout=1.0)

    with pytest.raises(httpx.ReadTimeout, match="no complete answer within 1s"):
        asyncio.run(main())

    async def probes() -> tuple[object, tuple[bool, str | None]]:
        async with _serving(handle) as url:
            async with LoadGenerator(url, "sglang", request_timeout_s=600) as gen:
                with mock.patch.object(server_probe, "PROBE_TIMEOUT_S", 1.0):
                    return await get_server_info(gen.http), await flush_cache(gen.http)

    assert asyncio.run(probes()) == (None, (False, "flush_cache failed: ReadTimeout"))
