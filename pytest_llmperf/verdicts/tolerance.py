"""A metric's tolerance: the relative change a comparison lets through, resolved from the most
specific place that sets one, and checked as a fraction wherever it is written."""

from __future__ import annotations

import math
from collections.abc import Mapping

from pytest_llmperf.base.errors import InputError
from pytest_llmperf.base.metric_defs import metric
from pytest_llmperf.verdicts.baseline_file import BaselineEntry

__all__ = ["ToleranceError", "default_tolerance", "resolve_tolerance", "validate_tolerance"]

# Start-up is one sample per launch and moves with disk and page cache; doubling must fail.
_STARTUP_TOLERANCE = 0.5


class ToleranceError(InputError):
    """A tolerance that is not a fraction in (0, 1); the message names where it came from."""


def validate_tolerance(value: object, source: str = "tolerance") -> float:
    """``0 < tol < 1`` as a float, or a ``ToleranceError`` that says what to write instead."""
    try:
        tol = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ToleranceError(
            f"{source}: {value!r} is not a number; write a fraction such as 0.05"
        ) from None
    if not math.isfinite(tol) or not 0 < tol < 1:
        hint = f" (did you mean {tol / 100:g} for {tol:g} %?)" if 1 <= tol < 100 else ""
        raise ToleranceError(
            f"{source}: tolerance must be a fraction with 0 < tol < 1, got {value!r}{hint}"
        )
    return tol


def default_tolerance(name: str) -> float:
    """5 % for throughputs and accept length, 10 % for mean/median latency, 15 % for tails."""
    d = metric(name)
    if name in ("startup_s", "first_request_ms"):
        return _STARTUP_TOLERANCE
    if d.direction == "higher":
        return 0.05
    if name.startswith(("p90_", "p99_")):
        return 0.15
    return 0.10


def resolve_tolerance(
    name: str,
    *,
    test: Mapping[str, float] | float | None = None,
    entry: BaselineEntry | None = None,
) -> float:
    """Most specific wins: test override (its metric, then its ``*``) > entry metric > entry >
    default. ``*`` is what ``tolerance = {"*" = "10%"}`` sets for every other metric."""
    if isinstance(test, Mapping):
        if name in test:
            return validate_tolerance(test[name], f"tolerance for {name}")
        if "*" in test:
            return validate_tolerance(test["*"], f"tolerance for {name} (from '*')")
    elif test is not None:
        return validate_tolerance(test, f"tolerance for {name}")
    if entry is not None:
        summary = entry.metrics.get(name)
        if summary is not None and summary.tolerance is not None:
            return summary.tolerance
        if entry.tolerance is not None:
            return entry.tolerance
    return default_tolerance(name)
