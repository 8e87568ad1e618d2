"""How many tokens one request may hold (prompt + output) on the server, and where that came from.

A request whose prompt plus output does not fit is cut short (llama-server stops at its slot's
context; SGLang with ``--allow-auto-truncate`` lowers ``max_new_tokens``), and the delivered
lengths then say so. The sources, first found wins:

- llama.cpp's ``GET /props``: ``default_generation_settings.n_ctx`` is one slot's context,
  ``-c`` divided over the ``-np`` slots (``total_slots``), which is what one request gets;
- ``GET /v1/models``: ``data[0].max_model_len`` (SGLang 0.5.23 sets it to the model config's
  ``context_len``, ``--context-length`` when given; vLLM to its ``max_model_len``).
"""

from __future__ import annotations

from typing import Any

import httpx

__all__ = ["context_from_models", "context_from_props", "request_context"]

CONTEXT_PROBE_TIMEOUT_S = 10.0


def _positive(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def context_from_props(props: Any) -> tuple[int | None, str | None]:
    """llama.cpp ``/props`` -> (tokens per slot, where from), (None, None) if it says nothing."""
    if not isinstance(props, dict):
        return None, None
    settings = props.get("default_generation_settings")
    n_ctx = _positive(settings.get("n_ctx")) if isinstance(settings, dict) else None
    if n_ctx is None:
        return None, None
    slots = _positive(props.get("total_slots"))
    of = f" of {slots} slots" if slots else ""
    return n_ctx, f"/props n_ctx per slot{of}"


def context_from_models(models: Any) -> tuple[int | None, str | None]:
    """``/v1/models`` -> (the first model's ``max_model_len``, where from)."""
    data = models.get("data") if isinstance(models, dict) else None
    first = data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else {}
    n = _positive(first.get("max_model_len"))
    return (n, "/v1/models max_model_len") if n is not None else (None, None)


async def _get_json(http: httpx.AsyncClient, path: str) -> Any:
    try:
        r = await http.get(path, timeout=CONTEXT_PROBE_TIMEOUT_S)
        return r.json() if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


async def request_context(http: httpx.AsyncClient) -> tuple[int | None, str | None]:
    """The context one request gets and where that came from; (None, None) when unknown."""
    for path, parse in (("/props", context_from_props), ("/v1/models", context_from_models)):
        n, where = parse(await _get_json(http, path))
        if n is not None:
            return n, where
    return None, None
