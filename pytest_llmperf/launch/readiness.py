"""When a server is ready, and what it is: health polling and route discovery over HTTP.

SGLang says it can generate on ``/health_generate``; vLLM and llama-server answer ``/health``
(503 while loading); any OpenAI-compatible server lists ``/v1/models``. Polling takes the first
of the candidate routes that *exists* (not 404) as the authority: a 503 there means "not yet",
so a server whose ``/health`` answers before its ``/health_generate`` is not declared ready early.
Every wait is bounded by the deadline.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Sequence
from typing import Any, Protocol

import httpx
import psutil

from pytest_llmperf.core import control_http
from pytest_llmperf.core.server_probe import (
    CACHE_RESET_ROUTES,
    HEALTH_ROUTES,
    ServerKind,
    classify_server,
)
from pytest_llmperf.launch.reaper import descendants

__all__ = ["HEALTH_ROUTES", "discover", "http_client", "listens_on", "poll_ready"]

POLL_INTERVAL_S = 0.3


class Process(Protocol):
    """What polling needs of a launched server: ``pid`` (the root of its process tree) and
    the command's exit status (``subprocess.Popen`` or a ``keeper.Kept``)."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


_PROBE_TIMEOUT_S = 10.0


def http_client(url: str, api_key: str | None) -> httpx.Client:
    """A client for health and discovery requests: the control client's settings (no proxy,
    the API key in its header only, the streams' TLS policy); every request sets its own
    timeout."""
    return control_http.sync_client(api_key=api_key, read_timeout_s=_PROBE_TIMEOUT_S)


def listens_on(proc: Process, port: int | None) -> bool:
    """Whether the server's own process tree listens on ``port`` (True if we cannot tell)."""
    if port is None:
        return True
    for p in descendants(proc.pid):
        try:
            # psutil >= 6 names it net_connections; connections() is the older spelling.
            conns = getattr(p, "net_connections", p.connections)(kind="tcp")
        except psutil.AccessDenied:
            return True
        except psutil.Error:
            continue
        if any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in conns):
            return True
    return False


def _probe_round(
    client: httpx.Client, url: str, routes: Sequence[str], deadline: float
) -> tuple[str | None, str]:
    """One pass over ``routes``: (the route that answered 200, or None; what was seen)."""
    seen: list[str] = []
    for route in routes:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            resp = client.get(f"{url}{route}", timeout=max(0.05, min(2.0, left)))
        except httpx.HTTPError as exc:
            return None, f"{route}: {type(exc).__name__}"
        if resp.status_code == 200:
            return route, f"{route}: HTTP 200"
        seen.append(f"{route}: HTTP {resp.status_code}")
        if resp.status_code != 404:
            break  # the route exists and says "not yet": it decides, not a later one
    return None, ", ".join(seen) or "no answer yet"


def poll_ready(
    client: httpx.Client,
    url: str,
    deadline: float,
    proc: Process | None,
    routes: Sequence[str] = HEALTH_ROUTES,
) -> tuple[str | None, str]:
    """Poll until one of ``routes`` answers 200, the process exits, or the deadline.

    Returns (the route that answered, or None; the last observation, for error messages).
    """
    last = "no answer yet"
    max_rounds = int((deadline - time.monotonic()) / 0.05) + 2  # a hard bound on the loop
    for _ in range(max_rounds):
        if proc is not None and proc.poll() is not None:
            return None, last
        if time.monotonic() >= deadline:
            return None, last
        route, last = _probe_round(client, url, routes, deadline)
        if route is not None:
            if proc is None:
                return route, last
            if proc.poll() is not None:
                return None, last
            if listens_on(proc, httpx.URL(url).port):
                return route, last
            # Someone else took the port between our check and the server's bind (another
            # run's server answers): wait for ours to fail its bind and retry elsewhere.
            last = "HTTP 200 from another process listening on the port"
        pause = min(POLL_INTERVAL_S, max(0.0, deadline - time.monotonic()))
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=pause)  # returns at once if the server exits meanwhile
        else:
            time.sleep(pause)
    return None, last


def _get_json(client: httpx.Client, url: str) -> Any:
    try:
        resp = client.get(url, timeout=_PROBE_TIMEOUT_S)
        return resp.json() if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


def _cache_reset_route(client: httpx.Client, url: str) -> str | None:
    """The first cache-reset route that exists. The probe is a real reset, harmless while the
    server is idle (the sweep resets before every level anyway)."""
    for route in CACHE_RESET_ROUTES:
        try:
            resp = client.post(f"{url}{route}", timeout=_PROBE_TIMEOUT_S)
        except httpx.HTTPError:
            return None
        # 200 (reset) or 400 (SGLang: busy) mean the route exists; 404/405/501 that it does not.
        if resp.status_code in (200, 400):
            return route
    return None


def discover(client: httpx.Client, url: str, health_route: str) -> ServerKind:
    """What the ready server at ``url`` is: its served model, cache-reset route, server info."""
    models = _get_json(client, f"{url}/v1/models")
    info = _get_json(client, f"{url}/server_info") or _get_json(client, f"{url}/get_server_info")
    # SGLang always has /flush_cache; only other servers need the (resetting) probe.
    reset = "/flush_cache" if health_route == "/health_generate" else None
    if reset is None:
        reset = _cache_reset_route(client, url)
    return classify_server(
        health_route=health_route, models=models, server_info=info, cache_reset_route=reset
    )
