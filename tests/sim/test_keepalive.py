"""llama-server-style keep-alive closing: reusing a connection the server closed fails.

The checks use raw sockets so they see what a pooled client sees: the bytes (or none) that
come back on a connection it believes is still open.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import pytest

from pytest_llmperf.sim.args import parse_args

REQUEST = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def _read_response(sock: socket.socket) -> tuple[int, dict[str, str]]:
    """One HTTP response with a Content-Length body: (status, lower-cased headers)."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(4096)
        assert chunk, f"connection closed before a full response head: {buf!r}"
        buf += chunk
    head, _, body = buf.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    need = int(headers.get("content-length", "0"))
    while len(body) < need:
        chunk = sock.recv(4096)
        assert chunk
        body += chunk
    return status, headers


def _wait_closed_by_server(sock: socket.socket, timeout_s: float = 10.0) -> None:
    """Block until the server closes its side (EOF); bounded by ``timeout_s``."""
    sock.settimeout(timeout_s)
    try:
        assert sock.recv(1) == b"", "server sent bytes on an idle connection"
    except ConnectionResetError:
        pass


def _reuse_fails(sock: socket.socket) -> bool:
    """Write a request into the connection and report whether no response came back."""
    sock.settimeout(5.0)
    try:
        sock.sendall(REQUEST)
        return sock.recv(4096) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5.0)


def test_max_requests_closes_after_nth_response_with_connection_close(
    make_server: Callable[..., Any],
) -> None:
    srv = make_server(sim_keepalive_max_requests=2)
    with _connect(srv.server.port) as sock:
        sock.sendall(REQUEST)
        status, headers = _read_response(sock)
        assert status == 200
        assert headers.get("keep-alive") == "timeout=5, max=2"
        assert "connection" not in headers
        sock.sendall(REQUEST)
        status, headers = _read_response(sock)
        assert status == 200
        assert headers.get("connection") == "close"
        _wait_closed_by_server(sock)
        assert _reuse_fails(sock)


def test_idle_timeout_closes_silently_and_reuse_fails(make_server: Callable[..., Any]) -> None:
    srv = make_server(sim_keepalive_timeout=0.2)
    with _connect(srv.server.port) as sock:
        sock.sendall(REQUEST)
        status, headers = _read_response(sock)
        assert status == 200
        # Nothing in the response warns of the close beyond httplib's Keep-Alive hint.
        assert "connection" not in headers
        assert headers.get("keep-alive") == "timeout=0.2, max=100"
        _wait_closed_by_server(sock)
        assert _reuse_fails(sock)


def test_error_responses_close_the_connection(make_server: Callable[..., Any]) -> None:
    srv = make_server(sim_keepalive_timeout=30.0)
    with _connect(srv.server.port) as sock:
        sock.sendall(b"GET /no_such_route HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        status, headers = _read_response(sock)
        assert status == 404
        assert headers.get("connection") == "close"
        _wait_closed_by_server(sock)


def test_default_keeps_connections_open(make_server: Callable[..., Any]) -> None:
    srv = make_server()
    with _connect(srv.server.port) as sock:
        for _ in range(3):
            sock.sendall(REQUEST)
            status, headers = _read_response(sock)
            assert status == 200
            assert "keep-alive" not in headers
            assert "connection" not in headers


@pytest.mark.parametrize(
    ("argv", "timeout", "max_requests"),
    [
        ([], None, None),
        (["--sim-keepalive-timeout", "5", "--sim-keepalive-max-requests", "100"], 5.0, 100),
    ],
)
def test_keepalive_flags_parse(argv: list[str], timeout: float | None, max_requests: int | None):
    knobs = parse_args(argv).knobs
    assert knobs.sim_keepalive_timeout == timeout
    assert knobs.sim_keepalive_max_requests == max_requests


@pytest.mark.parametrize(
    "bad", [["--sim-keepalive-timeout", "0"], ["--sim-keepalive-max-requests", "0"]]
)
def test_keepalive_flags_reject_non_positive(bad: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(bad)
