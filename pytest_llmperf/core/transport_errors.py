"""What can go wrong under a measured request, one type per decision the client makes.

``client.py`` decides by type, never by message: ``StaleConnection`` is the one failure it
re-sends (once, on a new connection), because it proves the server never read the request.
Every other type fails the request with its message. The messages are written for the person
reading a failed level ("stream cut after 40 tokens: ConnectionLost: ...").
"""

from __future__ import annotations

from pytest_llmperf.base.errors import LLMPerfError


class TransportError(LLMPerfError):
    """A measured request's connection or HTTP framing failed (not the server's answer)."""


class ConnectFailed(TransportError):
    """No connection: refused, unreachable, the TLS handshake failed, or the connect timed out."""


class StaleConnection(TransportError):
    """A pooled keep-alive connection the server had already closed: it was closing when the
    request was written, or the server's FIN came before any response byte. A server that
    drops idle connections unannounced (an idle timeout, or a close after every response
    without ``Connection: close``) does this; the request never reached it, so re-sending it
    once on a new connection is safe."""


class ServerDisconnected(TransportError):
    """The server closed a new connection before any response byte. It may have read the
    request (a crash, a proxy dropping it): never re-sent."""


class ConnectionLost(TransportError):
    """The connection was reset or failed, or closed before the response's end. A reset before
    any response byte may come after the server read the request: never re-sent."""


class ProtocolError(TransportError):
    """The response was not usable HTTP/1.1: malformed, or compressed though nobody asked."""
