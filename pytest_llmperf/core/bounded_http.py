"""The httpx client of control requests, bounded in total."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

__all__ = ["BoundedClient"]


class BoundedClient(httpx.AsyncClient):
    """Control requests (``/server_info``, ``/flush_cache``, ``/metrics``) end within their
    read timeout in total: httpx's is per read, so a server that drips a byte now and then
    would hold one for ever."""

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
