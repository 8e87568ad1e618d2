"""What the check kinds (``plugin/kinds/``) share to parametrize a perf test: its marker
keywords, and a placeholder test when there is nothing to parametrize over."""

from __future__ import annotations

from typing import Any

import pytest


def marker_kwargs(node: Any) -> dict[str, Any]:
    """All ``llmperf`` markers merged, the closest one winning (as pytest-httpx does)."""
    merged: dict[str, Any] = {}
    for mark in node.iter_markers("llmperf"):
        merged = {**mark.kwargs, **merged}
    return merged


def parametrize(
    metafunc: pytest.Metafunc, fixture: str, params: list[Any], ids: list[str], empty: str
) -> None:
    """Parametrize a perf fixture; with nothing to parametrize over, one skipped test that
    says why (pytest's own empty-set item carries no parameter the plugin could read)."""
    if params:
        metafunc.parametrize(fixture, params, ids=ids, indirect=True)
        return
    skipped = pytest.param(None, marks=pytest.mark.skip(reason=f"{fixture}: {empty}"))
    metafunc.parametrize(fixture, [skipped], ids=["none"], indirect=True)
