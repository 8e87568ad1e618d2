"""Stale keep-alive connections: a request that never reached the server is re-sent once on a
new connection; one the server may have read is never re-sent. Over http and https alike: the
decision is the transport's error type (``StaleConnection``), not a message.

Raw asyncio servers (not aiohttp's) so the tests control exactly when a connection gets a FIN
or a reset, as llama.cpp's server does when it drops a keep-alive connection unannounced.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import orjson
import pytest

from pytest_llmperf.core.client import LoadGenerator
from pytest_llmperf.core.metrics import compute_level
from pytest_llmperf.core.records import RequestRecord
from pytest_llmperf.core.transport import Exchange
from pytest_llmperf.core.transport_errors import (
    ConnectionLost,
    ServerDisconnected,
    StaleConnection,
    TransportError,
)
from tests.tls_certs import self_signed, server_context

from .fake_server import FakeServer

Mode = Literal["fin_on_next", "reset_on_next", "fin_after", "connection_close", "read_then_fin"]
N_OUT = 5


def sse_body(n_out: int) -> bytes:
    events = []
    for k in range(1, n_out + 1):
        finish = "length" if k == n_out else None
        usage = {"prompt_tokens": 3, "completion_tokens": k, "total_tokens": 3 + k}
        chunk = {"choices": [{"index": 0, "text": "a", "finish_reason": finish}], "usage": usage}
        events.append(b"data: " + orjson.dumps(chunk) + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    return b"".join(events)


@dataclass
class RawServer:
    """A tiny HTTP/1.1 server whose connections misbehave after their first response.

    - ``fin_on_next``: once a connection has answered, the next request's bytes get a FIN
      (after ``fin_delay_s``) and are never processed: a keep-alive close that crossed the request.
    - ``reset_on_next``: the next request is read in full, then the connection is reset.
    - ``fin_after``: the connection is closed right after every response, unannounced.
    - ``connection_close``: every response says ``Connection: close`` and then closes.
    - ``read_then_fin``: every request is read in full, then its (new) connection closed unanswered.
    """

    mode: Mode
    fin_delay_s: float = 0.0
    tls: ssl.SSLContext | None = None
    url: str = ""
    processed: int = 0  # requests read in full (the server "saw" them)
    ignored: int = 0  # request bytes that arrived on a connection the server was closing
    connections: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        served = 0
        try:
            while True:  # bounded by the client: each pass reads one request or returns
                head = await reader.readuntil(b"\r\n\r\n")
                if served and self.mode == "fin_on_next":
                    self.ignored += 1
                    await asyncio.sleep(self.fin_delay_s)
                    if self.tls is not None:  # close_notify and FIN; TLS read the bytes
                        writer.close()
                        return
                    writer.transport.write_eof()  # FIN, the request unread
                    await reader.read()  # until the client closes: no reset from unread bytes
                    return
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                await reader.readexactly(length)
                self.processed += 1
                if self.mode == "read_then_fin":
                    writer.close()
                    return
                if served and self.mode == "reset_on_next":
                    sock = writer.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    writer.transport.abort()  # RST after the server read the whole request
                    return
                body = sse_body(N_OUT)
                extra = b"Connection: close\r\n" if self.mode == "connection_close" else b""
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    + extra
                    + b"Content-Length: %d\r\n\r\n" % len(body)
                    + body
                )
                await writer.drain()
                served += 1
                if self.mode in ("fin_after", "connection_close"):
                    writer.close()
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed(tmp_path_factory.mktemp("tls"))


@pytest.fixture(
    params=[("asyncio", "http"), ("uvloop", "http"), ("asyncio", "https"), ("uvloop", "https")],
    ids=lambda p: "-".join(p),
)
def run_raw(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, cert: tuple[Path, Path]
) -> Iterator[object]:
    """Run ``n`` requests, ``concurrency`` at a time, against a ``RawServer`` (both loops the
    sweep may run on, whose socket and TLS errors surface differently; plain and TLS)."""
    loop_name, scheme = request.param
    if loop_name == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        loop_factory = uvloop.new_event_loop
    else:
        loop_factory = asyncio.new_event_loop
    tls = server_context(*cert) if scheme == "https" else None
    if tls is not None:
        monkeypatch.setenv("SSL_CERT_FILE", str(cert[0]))

    def run(server: RawServer, n: int, concurrency: int = 1) -> list[RequestRecord]:
        server.tls = tls

        async def go() -> list[RequestRecord]:
            srv = await asyncio.start_server(server.handle, "127.0.0.1", 0, ssl=tls)
            port = srv.sockets[0].getsockname()[1]
            server.url = f"{scheme}://127.0.0.1:{port}"
            records: list[RequestRecord] = []
            try:
                async with LoadGenerator(server.url, "openai", model="m") as gen:
                    todo = iter(range(n))

                    async def worker() -> None:
                        for i in todo:
                            records.append(await gen.request(i, [1001, 1002, 1003], N_OUT))

                    async with asyncio.timeout(30):
                        await asyncio.gather(*(worker() for _ in range(concurrency)))
            finally:
                srv.close()
            return records

        with asyncio.Runner(loop_factory=loop_factory) as runner:
            return runner.run(go())

    yield run


def test_request_on_a_connection_closed_under_it_is_resent_once(run_raw) -> None:
    server = RawServer("fin_on_next")
    records = run_raw(server, 6)
    assert [r.error for r in records if not r.ok] == []
    assert all(r.output_tokens == N_OUT for r in records)
    # every second request reused the connection the previous one had opened
    assert sum(r.retries for r in records) == 3 == server.ignored
    assert server.processed == 6  # nothing was processed twice
    assert compute_level(records, max_concurrency=1).connection_retries == 3


def test_retry_times_the_attempt_that_succeeded(run_raw) -> None:
    server = RawServer("fin_on_next", fin_delay_s=0.2)

    t0 = time.perf_counter()
    records = run_raw(server, 2)
    retried = [r for r in records if r.retries]
    assert len(retried) == 1 and retried[0].ok
    # the dead attempt waited 0.2 s for its FIN; the record's clock starts after it
    assert retried[0].t_send - t0 >= 0.2
    assert retried[0].token_times[0] - retried[0].t_send == pytest.approx(retried[0].ttft)


def test_reset_after_the_server_read_the_request_is_not_resent(run_raw) -> None:
    server = RawServer("reset_on_next")
    records = run_raw(server, 4)
    failed = [r for r in records if not r.ok]
    assert len(failed) == 2  # requests 1 and 3 reused a connection that was then reset
    assert all(r.retries == 0 for r in records)
    assert server.processed == 4  # each request reached the server exactly once


def test_a_new_connection_closed_after_the_server_read_is_not_resent(run_raw) -> None:
    server = RawServer("read_then_fin")
    records = run_raw(server, 3)
    assert all(not r.ok and r.retries == 0 for r in records)
    assert all((r.error or "").startswith("ServerDisconnected: ") for r in records)
    assert server.processed == 3 == server.connections


@pytest.mark.parametrize("concurrency", [1, 4])
def test_server_closing_after_every_response_loses_nothing(run_raw, concurrency: int) -> None:
    server = RawServer("fin_after")
    records = run_raw(server, 12, concurrency)
    assert [r.error for r in records if not r.ok] == []
    assert sum(r.output_tokens for r in records) == 12 * N_OUT
    assert server.processed == 12
    assert sum(r.retries for r in records) <= server.connections


def test_connection_close_is_honoured(run_raw) -> None:
    server = RawServer("connection_close")
    records = run_raw(server, 4)
    assert all(r.ok and r.retries == 0 for r in records)
    assert server.connections == 4 == server.processed  # never reused, so never stale


@pytest.mark.parametrize(
    ("first", "resent"),
    [
        (StaleConnection("any words at all"), True),
        (ConnectionLost("Can not write request body; ServerDisconnectedError"), False),
        (ServerDisconnected("the server closed the connection before answering"), False),
    ],
)
def test_the_retry_decision_is_the_error_type(
    fake_server: FakeServer, first: TransportError, resent: bool
) -> None:
    """Only ``StaleConnection`` is re-sent, whatever any message says."""

    async def go() -> RequestRecord:
        async with LoadGenerator(fake_server.url, "sglang") as gen:
            assert gen._pool is not None
            send = gen._pool.send
            tries: list[bool] = []

            async def failing_once(ex: Exchange, payload: bytes, *, fresh: bool = False) -> None:
                tries.append(fresh)
                if len(tries) == 1:
                    raise first
                await send(ex, payload, fresh=fresh)

            gen._pool.send = failing_once  # type: ignore[method-assign]
            rec = await gen.request(0, [1001, 1002], N_OUT)
            assert tries == ([False, True] if resent else [False])
            return rec

    rec = asyncio.run(go())
    if resent:
        assert rec.ok and rec.retries == 1 and rec.output_tokens == N_OUT
        assert fake_server.state.requests == 1
    else:
        assert not rec.ok and rec.retries == 0
        assert rec.error == f"{type(first).__name__}: {first}"
        assert fake_server.state.requests == 0
