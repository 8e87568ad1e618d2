"""Keep-alive closing as llama.cpp's llama-server (cpp-httplib) does it.

cpp-httplib (``vendor/cpp-httplib/httplib.cpp``: ``keep_alive``, ``process_server_socket_core``,
``Server::write_response_core``) serves at most ``CPPHTTPLIB_KEEPALIVE_MAX_COUNT`` (100)
requests per connection and closes a connection idle for ``CPPHTTPLIB_KEEPALIVE_TIMEOUT_SECOND``
(5 s). Every response but the last says ``Keep-Alive: timeout=5, max=100``; the last one of a
connection, and any response with status >= 400, says ``Connection: close``. The idle close is
silent: a pooled client that keeps connections longer than 5 s writes its next request into a
socket the server already closed and gets a reset or "Can not write request body". This module
reproduces that so clients can test their retry against the simulator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

_PRUNE_AT = 1024


@dataclass(frozen=True)
class KeepAlivePolicy:
    """``timeout_s``: close a connection idle this long; ``max_requests``: responses per one."""

    timeout_s: float | None = None
    max_requests: int | None = None

    @property
    def active(self) -> bool:
        return self.timeout_s is not None or self.max_requests is not None

    def runner_kwargs(self) -> dict[str, Any]:
        """aiohttp's own idle timer closes idle connections silently, as httplib does."""
        return {} if self.timeout_s is None else {"keepalive_timeout": self.timeout_s}

    def install(self, app: web.Application) -> None:
        """Count responses per connection and set httplib's Keep-Alive / Connection headers."""
        if not self.active:
            return
        # aiohttp's RequestHandler (one per connection) takes no weak references: prune the
        # closed ones (transport None) when the table grows instead.
        counts: dict[Any, int] = {}
        header = f"timeout={_fmt(self.timeout_s)}, max={self.max_requests or 100}"

        async def on_prepare(request: web.Request, response: web.StreamResponse) -> None:
            conn = request.protocol
            n = counts.get(conn, 0) + 1
            counts[conn] = n
            if len(counts) > _PRUNE_AT:
                for c in [c for c in counts if getattr(c, "transport", None) is None]:
                    del counts[c]
            last = self.max_requests is not None and n >= self.max_requests
            if last or response.status >= 400:
                # aiohttp has built the headers before this hook: set the one it would add
                response.force_close()
                response.headers["Connection"] = "close"
            else:
                response.headers["Keep-Alive"] = header

        app.on_response_prepare.append(on_prepare)


def _fmt(seconds: float | None) -> str:
    if seconds is None:
        return "5"
    return str(int(seconds)) if float(seconds).is_integer() else f"{seconds:g}"
