"""Measured streams over HTTP/1.1, plain or TLS: one ``asyncio.Protocol`` per connection.

With a server that writes event by event (a GPU server below the client's ceiling), every event
is a network read of its own, and what a read costs is the client's cost. Through aiohttp a read
went through its connection protocol, its HTTP parser's Python callbacks (three per chunk) and
its stream reader: ~15 µs a read. Here ``data_received`` stamps the read, runs llhttp (the C
parser, via ``httptools``; one Python callback per HTTP chunk) and hands the body bytes of the
whole read to the request's stream parser, synchronously: no task wake-up, no queue, no copy
beyond llhttp's. ``https://`` takes the same protocol over the event loop's TLS transport
(``create_connection(ssl=...)``): the protocol sees decrypted bytes, stamped as they come out.

A keep-alive pool grows to the concurrency (no cap); chunked, content-length and
read-until-close bodies; non-200 bodies handed back whole (``Exchange.body``). Failures are the
types of ``transport_errors.py``: the one ``client.py`` re-sends (``StaleConnection``) is raised
only for a pooled connection that closed before any response byte.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable
from urllib.parse import urlsplit

import httptools

from pytest_llmperf.core.transport_errors import (
    ConnectFailed,
    ConnectionLost,
    ProtocolError,
    ServerDisconnected,
    StaleConnection,
)

# (body bytes of one read, the read's arrival) -> False to stop the response (closes it); a
# ValueError it raises (orjson) ends the response with that error
Sink = Callable[[bytes, float], bool]
_now = time.perf_counter
IDLE_TIMEOUT_S = 60.0  # a pooled connection idle longer is dropped, not reused


class Exchange:
    """One request on one connection: what the caller learns, and when."""

    __slots__ = ("body", "closed", "end", "error", "fresh", "headers", "reused", "sink", "status")

    def __init__(self) -> None:
        self.reused = False  # the connection came from the keep-alive pool
        self.fresh = False  # a connection of its own, closed after it (a retry's)
        self.status = 0  # set when the response headers arrive
        self.sink: Sink | None = None  # 200 bodies go here once set; others collect in body
        self.body: list[tuple[bytes, float]] = []  # (bytes, arrival) before the sink was set
        self.headers: asyncio.Future[None] | None = None  # resolved when the headers are in
        self.end: asyncio.Future[None] | None = None  # made by ``finish``: the response's end
        self.closed = False  # the response ended (complete, stopped or failed)
        self.error: BaseException | None = None

    def _close(self, err: BaseException | None) -> None:
        self.closed = True
        self.error = err
        for fut in (self.end, self.headers):
            if fut is not None and not fut.done():
                if err is None:
                    fut.set_result(None)
                else:
                    fut.set_exception(err)
                return  # only the one the caller waits on: the other is never awaited


class _Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection; at most one exchange at a time."""

    def __init__(self, pool: StreamPool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.exchange: Exchange | None = None
        self.lost = False
        self.idle_since = 0.0
        self.headers_done = False
        self.complete = False
        self.keep_alive = False
        self.until_close = True  # no length and not chunked: the body ends with the connection
        self.bad_encoding = ""
        self.body: bytes | None = None  # the first HTTP chunk of the read being parsed
        self.more: list[bytes] = []  # its other chunks (a read that holds several events)

    # -- asyncio -----------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        t = _now()  # the read's arrival, before anything parses it
        ex = self.exchange
        if ex is None or ex.closed:  # bytes nobody asked for: this connection is unusable
            self._abort()
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as e:
            self._end(ProtocolError(f"the response is not valid HTTP/1.1: {e}"))
            return
        body = self.body
        if body is not None:
            self.body = None
            if self.more:
                body = b"".join([body, *self.more])
                self.more = []
            if ex.sink is not None and not ex.closed:
                try:
                    go_on = ex.sink(body, t)
                except ValueError as e:  # orjson: the request fails as if the read had raised
                    self._end(e)
                    return
                if not go_on:
                    self._end(None, reusable=False)
                    return
            elif not ex.closed:
                ex.body.append((body, t))
        if self.complete:
            self._end(None, reusable=self.keep_alive and not ex.fresh)

    def eof_received(self) -> bool:
        return False  # close our side too: HTTP/1.1 has no half-open exchanges

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.pool.forget(self)
        ex = self.exchange
        if ex is None or ex.closed:
            return
        err: Exception
        if not self.headers_done:
            if exc is None and ex.reused:  # the server's FIN before any answer
                err = StaleConnection(_STALE)
            elif exc is None:
                err = ServerDisconnected("the server closed the connection before answering")
            else:
                err = ConnectionLost(f"the connection failed before any response: {_why(exc)}")
        elif exc is None and self.until_close and not self.complete:
            self.complete = True  # the body was "until the connection closes": it did
            self._end(None, reusable=False)
            return
        elif exc is None:
            err = ConnectionLost("the server closed the connection before the response's end")
        else:
            err = ConnectionLost(f"the connection failed before the response's end: {_why(exc)}")
        self._end(err)

    # -- httptools callbacks (never raise: llhttp would wrap it) -----------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.lower()
        if key == b"content-length" or (key == b"transfer-encoding" and b"chunked" in value):
            self.until_close = False
        elif key == b"content-encoding" and value.strip().lower() != b"identity":
            self.bad_encoding = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.headers_done = True
        ex = self.exchange
        if ex is not None:
            ex.status = self.parser.get_status_code()
            if self.bad_encoding and ex.status == 200:
                err = f"the server compressed the stream ({self.bad_encoding}) unasked"
                self._end(ProtocolError(err))
            elif ex.headers is not None and not ex.headers.done():
                ex.headers.set_result(None)  # the caller sets the sink before the next read

    def on_body(self, body: bytes) -> None:
        if self.body is None:
            self.body = body
        else:
            self.more.append(body)

    def on_message_complete(self) -> None:
        self.complete = True
        # read here: llhttp resets its flags for the next message once this callback returns
        self.keep_alive = self.parser.should_keep_alive()

    # -- the exchange's end ------------------------------------------------------------------
    def _end(self, err: BaseException | None, reusable: bool = False) -> None:
        """The response is over: wake the caller, then pool or close the connection."""
        ex = self.exchange
        if ex is not None and not ex.closed:
            ex._close(err)
        self.exchange = None
        self.body = None
        self.more = []
        if reusable and self.complete and not self.lost:
            self.pool.release(self)
        else:
            self._abort()

    def _abort(self) -> None:
        self.exchange = None
        if self.transport is not None and not self.lost:
            if self.pool.ssl is None:
                self.transport.close()
            else:  # TLS's close waits for the server's close_notify: past the loop's end
                self.transport.abort()
        self.lost = True
        self.pool.forget(self)


_STALE = "the server had closed this pooled keep-alive connection before the request reached it"


def _why(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


class StreamPool:
    """Keep-alive connections to one ``http(s)://host:port``, as many as requests in flight.

    ``ssl_context`` verifies ``https://`` servers (the client's one TLS policy); None for https
    means Python's default context (the system's trust store; ``SSL_CERT_FILE`` and
    ``SSL_CERT_DIR`` add to it).
    """

    def __init__(
        self,
        url: str,
        headers: dict[str, str],
        connect_timeout_s: float,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"a server URL is http(s)://host[:port], not {url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.ssl: ssl.SSLContext | None = None
        if parts.scheme == "https":
            self.ssl = ssl_context or ssl.create_default_context()
        self.connect_timeout_s = connect_timeout_s
        self.loop = asyncio.get_running_loop()
        self._idle: list[_Connection] = []
        self._all: set[_Connection] = set()
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        authority = parts.netloc.rpartition("@")[2]  # never credentials in a header
        lines = [f"POST {target} HTTP/1.1", f"Host: {authority}", "Accept: */*"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        self._head = ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")

    async def send(self, ex: Exchange, payload: bytes, *, fresh: bool = False) -> None:
        """Send one request; return once its response headers are in (``ex.status``).

        Raises ``transport_errors`` types for what went wrong before that: ``StaleConnection``
        only when the connection came from the pool (``ex.reused``) and closed unanswered.
        """
        conn = None if fresh else self._take_idle()
        ex.reused = conn is not None
        ex.fresh = fresh
        if conn is None:
            conn = await self._connect()
        assert conn.transport is not None
        if conn.transport.is_closing():  # closed under us between the pool and the write
            conn._abort()
            if ex.reused:
                raise StaleConnection(_STALE)
            raise ServerDisconnected("the server closed the connection before the request")
        ex.headers = self.loop.create_future()
        conn.exchange = ex
        conn.headers_done = conn.complete = False
        conn.until_close = True
        conn.bad_encoding = ""
        conn.transport.write(self._head + b"%d\r\n\r\n" % len(payload) + payload)
        try:
            await ex.headers
        except BaseException:
            if not ex.closed:  # cancelled (deadline): close the connection, never pool it
                conn._end(None)
            raise

    async def finish(self, ex: Exchange, sink: Sink | None) -> None:
        """Stream the body to ``sink`` (200) or collect it in ``ex.body``; return at its end."""
        for data, t in ex.body if sink is not None else ():  # bytes that came with the headers
            try:
                go_on = sink(data, t)  # type: ignore[misc]
            except ValueError:
                self._close_exchange(ex)
                raise
            if not go_on:
                self._close_exchange(ex)
                return
        ex.sink = sink
        if not ex.closed:
            ex.end = self.loop.create_future()
            try:
                await ex.end
            finally:
                if not ex.closed:  # cancelled: close the unfinished response's connection
                    self._close_exchange(ex)
        elif ex.error is not None:
            raise ex.error

    def _close_exchange(self, ex: Exchange) -> None:
        for conn in list(self._all):  # bounded by the open connections
            if conn.exchange is ex:
                conn._end(None)

    def release(self, conn: _Connection) -> None:
        conn.idle_since = time.monotonic()
        self._idle.append(conn)

    def forget(self, conn: _Connection) -> None:
        self._all.discard(conn)
        if conn in self._idle:
            self._idle.remove(conn)

    def close(self) -> None:
        for conn in list(self._all):
            conn._abort()
        self._idle.clear()

    def _take_idle(self) -> _Connection | None:
        now = time.monotonic()
        while self._idle:  # bounded: each pass removes one
            conn = self._idle.pop()
            if not conn.lost and now - conn.idle_since < IDLE_TIMEOUT_S:
                return conn
            conn._abort()
        return None

    async def _connect(self) -> _Connection:
        where = f"{self.host}:{self.port}"
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, proto = await self.loop.create_connection(
                    lambda: _Connection(self),
                    self.host,
                    self.port,
                    ssl=self.ssl,
                    server_hostname=self.host if self.ssl is not None else None,
                )
        except TimeoutError as e:
            limit = f"{self.connect_timeout_s:g}s"
            raise ConnectFailed(f"connect to {where} timed out after {limit}") from e
        except ssl.SSLError as e:  # an OSError too: the handshake's own words are clearer
            raise ConnectFailed(f"TLS handshake with {where} failed: {e.reason or e}") from e
        except OSError as e:
            raise ConnectFailed(f"cannot connect to {where}: {e.strerror or e}") from e
        self._all.add(proto)
        return proto
