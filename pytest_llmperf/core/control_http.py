"""Clients for control requests: health, discovery, ``/server_info``, ``/flush_cache``,
``/v1/models``, ``/metrics``. Every one is built here, so all share the same timeouts, headers,
TLS policy and secret handling (measured streams go through ``transport.py`` instead).

- The API key travels only in the ``Authorization`` header; it is never logged or put in a URL.
- Environment proxies are ignored: measured streams never go through one, so control requests
  must reach the server the same way (and a loopback benchmark must not detour).
- One TLS policy for streams and control requests: ``tls_context()``, Python's default context
  (the system's trust store, plus ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` where set).
- No cap on connections and no pool timeout: a control request never waits behind another.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

import httpx

CONNECT_TIMEOUT_S = 10.0
WRITE_TIMEOUT_S = 30.0


def tls_context() -> ssl.SSLContext:
    """How ``https://`` servers are verified, for streams and control requests alike."""
    return ssl.create_default_context()


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {api_key}"} if api_key else {}


def _timeout(read_timeout_s: float, connect_timeout_s: float) -> httpx.Timeout:
    return httpx.Timeout(
        connect=connect_timeout_s, read=read_timeout_s, write=WRITE_TIMEOUT_S, pool=None
    )


class BoundedClient(httpx.AsyncClient):
    """Control requests end within their read timeout in total: httpx's is per read, so a
    server that drips a byte now and then would hold one for ever."""

    async def send(self, request: httpx.Request, **kwargs: Any) -> httpx.Response:
        limit = (request.extensions.get("timeout") or {}).get("read")
        if limit is None or kwargs.get("stream"):
            return await super().send(request, **kwargs)
        try:
            async with asyncio.timeout(limit):
                return await super().send(request, **kwargs)
        except TimeoutError:
            raise httpx.ReadTimeout(
                f"no complete answer within {limit:g}s", request=request
            ) from None


def async_client(
    base_url: str = "",
    *,
    api_key: str | None = None,
    read_timeout_s: float = 600.0,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
    tls: ssl.SSLContext | None = None,
) -> httpx.AsyncClient:
    """The async control client (the load generator's, and the server probe's)."""
    return BoundedClient(
        base_url=base_url.rstrip("/"),
        headers=auth_headers(api_key),
        timeout=_timeout(read_timeout_s, connect_timeout_s),
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=8),
        verify=tls or tls_context(),
        trust_env=False,
        follow_redirects=False,
    )


def sync_client(
    base_url: str = "",
    *,
    api_key: str | None = None,
    read_timeout_s: float = 600.0,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
) -> httpx.Client:
    """The blocking control client: readiness polling and discovery, which run before any
    event loop exists (launch and attach are synchronous)."""
    return httpx.Client(
        base_url=base_url.rstrip("/"),
        headers=auth_headers(api_key),
        timeout=_timeout(read_timeout_s, connect_timeout_s),
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=8),
        verify=tls_context(),
        trust_env=False,
        follow_redirects=False,
    )
