"""Service-level objectives: goodput, "does this level meet the SLO", and SLO searches.

Two kinds of limit, usable together:

- per-request limits (``ttft_ms``, ``tpot_ms``, ``e2e_ms``), vLLM ``bench serve --goodput``'s
  definition (``vllm/benchmarks/serve.py``, ``calculate_metrics``): a completed request is good
  when its TTFT, its TPOT and its end-to-end latency are each *at most* the limit; a request
  with a single output token has no TPOT and counts as meeting the TPOT limit (vLLM takes its
  TPOT as 0). Failed requests are never good. Goodput = good requests / level duration, the
  same duration as ``request_throughput``;
- level targets in MLPerf's style (``p99_ttft_ms``, ``p99_tpot_ms``): the level's p99 TTFT
  and p99 TPOT must be within the limits (llama2-70b Server: 2000 ms / 200 ms).

A level meets the SLO when every level target holds and, if per-request limits are set, at
least ``min_attainment`` of *all* its requests (failed ones included) were good.

Pure and pytest-free; imports nothing above ``results`` in the data flow, so ``metrics`` can
use it.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from pytest_llmperf.base.errors import InputError
from pytest_llmperf.base.results import LevelResult, SweepResult
from pytest_llmperf.core.records import RequestRecord

__all__ = [
    "Slo",
    "SloError",
    "SloSearch",
    "goodput",
    "level_meets",
    "load_slo",
    "max_concurrency_within_slo",
    "request_meets",
    "search_max_level",
    "search_max_level_async",
]

_REQUEST_LIMITS = ("ttft_ms", "tpot_ms", "e2e_ms")
_LEVEL_TARGETS = ("p99_ttft_ms", "p99_tpot_ms")
_LABELS = {
    "ttft_ms": "TTFT",
    "tpot_ms": "TPOT",
    "e2e_ms": "E2E latency",
    "p99_ttft_ms": "p99 TTFT",
    "p99_tpot_ms": "p99 TPOT",
}


def _limit() -> Any:
    """An optional limit in ms: a finite number > 0."""
    return Field(default=None, gt=0, allow_inf_nan=False)


class SloError(InputError):
    """An SLO definition is wrong; the message names where it came from and the field."""


class Slo(BaseModel):
    """Latency limits in milliseconds; every limit is optional but at least one is required.

    ``Slo(ttft_ms=2000, tpot_ms=100)`` reads "a request is served well when its first token
    comes within 2 s and then a token every 100 ms at most".
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Per request (goodput), inclusive: a request at exactly the limit meets it.
    ttft_ms: float | None = _limit()
    tpot_ms: float | None = _limit()
    e2e_ms: float | None = _limit()
    # Per level, MLPerf LLM style.
    p99_ttft_ms: float | None = _limit()
    p99_tpot_ms: float | None = _limit()
    # Share of a level's requests that must be good when per-request limits are set.
    min_attainment: float = Field(default=0.99, gt=0.0, le=1.0)

    @model_validator(mode="after")
    def _at_least_one_limit(self) -> Slo:
        if not self.has_request_limits and not self.has_level_targets:
            names = ", ".join(_REQUEST_LIMITS + _LEVEL_TARGETS)
            raise ValueError(f"an SLO needs at least one limit; set one or more of {names}")
        return self

    @property
    def has_request_limits(self) -> bool:
        return any(getattr(self, n) is not None for n in _REQUEST_LIMITS)

    @property
    def has_level_targets(self) -> bool:
        return any(getattr(self, n) is not None for n in _LEVEL_TARGETS)

    def describe(self) -> str:
        """One line for report headers: ``TTFT ≤ 2000 ms, TPOT ≤ 100 ms per request (99 %)``."""
        parts: list[str] = []
        req = [f"{_LABELS[n]} ≤ {v:g} ms" for n in _REQUEST_LIMITS if (v := getattr(self, n))]
        if req:
            share = f"{100 * self.min_attainment:g} %"
            parts.append(", ".join(req) + f" per request ({share} of requests)")
        parts += [f"{_LABELS[n]} ≤ {v:g} ms" for n in _LEVEL_TARGETS if (v := getattr(self, n))]
        return "; ".join(parts)


def load_slo(data: Mapping[str, Any], source: str = "slo") -> Slo:
    """An ``Slo`` from a suite's ``[slo]`` table; errors name ``source`` and every bad field."""
    try:
        return Slo.model_validate(dict(data))
    except ValidationError as exc:
        problems = []
        for e in exc.errors(include_url=False, include_input=False):
            loc = ".".join(str(p) for p in e["loc"])
            where = f"{source}.{loc}" if loc else source
            msg = str(e["msg"]).removeprefix("Value error, ")
            if e["type"] == "extra_forbidden":
                msg = f"unknown field; known fields: {', '.join(Slo.model_fields)}"
            elif loc.endswith("_ms"):
                msg += " (limits are milliseconds, finite and > 0)"
            problems.append(f"  - {where}: {msg}")
        raise SloError(f"{source}: invalid SLO:\n" + "\n".join(problems)) from None


def _within(value_s: float, limit_ms: float | None) -> bool:
    # NaN (never measured) is not within any limit: a request cannot prove it met it.
    return limit_ms is None or value_s * 1e3 <= limit_ms


def request_meets(record: RequestRecord, slo: Slo) -> bool:
    """Whether one request met every per-request limit (vLLM's goodput rule)."""
    if not record.ok:
        return False
    tpot = record.tpot()
    return (
        _within(record.ttft, slo.ttft_ms)
        and _within(0.0 if tpot is None else tpot, slo.tpot_ms)
        and _within(record.e2e, slo.e2e_ms)
    )


def goodput(records: Sequence[RequestRecord], slo: Slo, duration: float) -> float:
    """Completed requests per second that met every per-request limit of ``slo``.

    ``duration`` is the level's (first send to last completion), so goodput ≤
    request_throughput. Raises ValueError for an SLO without per-request limits: its goodput
    would just be the request throughput under another name.
    """
    if not slo.has_request_limits:
        raise ValueError(
            f"goodput needs a per-request limit (ttft_ms, tpot_ms or e2e_ms); SLO is "
            f"{slo.describe()}"
        )
    if duration <= 0:
        return 0.0
    return sum(1 for r in records if request_meets(r, slo)) / duration


def level_meets(level: LevelResult, slo: Slo) -> tuple[bool, list[str]]:
    """Whether a level meets ``slo``, and one reason per limit it misses.

    Per-request limits are judged from ``level.goodput``, which must have been computed with
    this same SLO (``compute_level(..., slo=slo)`` or a sweep run with ``slo=``).
    """
    reasons: list[str] = []
    for name in _LEVEL_TARGETS:
        limit = getattr(slo, name)
        if limit is None:
            continue
        value = getattr(level, name)
        if value is None:
            reasons.append(f"{_LABELS[name]} not measured (no completed request)")
        elif value > limit:
            reasons.append(f"{_LABELS[name]} {value:.1f} ms > {limit:g} ms")
    if slo.has_request_limits:
        reasons += _attainment_reasons(level, slo)
    return not reasons, reasons


def _attainment_reasons(level: LevelResult, slo: Slo) -> list[str]:
    if level.goodput is None:
        return ["goodput not measured; run the level with this SLO (slo=...) to judge it"]
    if level.num_requests == 0:
        return ["no requests were sent"]
    # goodput = good / duration exactly, so this recovers the integer count.
    good = round(level.goodput * level.duration)
    share = good / level.num_requests
    if share + 1e-12 >= slo.min_attainment:
        return []
    limits = ", ".join(
        f"{_LABELS[n]} ≤ {v:g} ms" for n in _REQUEST_LIMITS if (v := getattr(slo, n))
    )
    return [
        f"{good} of {level.num_requests} requests ({100 * share:.1f} %) met {limits}; "
        f"needs {100 * slo.min_attainment:g} %"
    ]


def max_concurrency_within_slo(sweep: SweepResult, slo: Slo) -> int | None:
    """The largest C of the leading run of levels that meet ``slo``.

    Scanning the swept levels upward, it is the last C before the first miss, as
    ``gates.crossover_concurrency``: a later level that meets the SLO again after a miss does
    not count, so the number means "within the SLO up to here". None when the smallest level
    already misses.
    """
    last: int | None = None
    for lv in sorted(sweep.levels, key=lambda lv: lv.max_concurrency):
        if not level_meets(lv, slo)[0]:
            break
        last = lv.max_concurrency
    return last


Level = TypeVar("Level", int, float)


@dataclass
class SloSearch(Generic[Level]):
    """Result of an SLO search: the best level found and every measurement it took."""

    slo: Slo
    best: Level | None = None  # largest candidate that met the SLO (None: not even the first)
    measured: dict[Level, LevelResult] = field(default_factory=dict)  # in measurement order
    misses: dict[Level, list[str]] = field(default_factory=dict)  # why each miss missed

    @property
    def level(self) -> LevelResult | None:
        return None if self.best is None else self.measured[self.best]

    @property
    def measurements(self) -> int:
        return len(self.measured)


def _sorted_candidates(candidates: Sequence[Level]) -> list[Level]:
    xs = sorted(set(candidates))
    if not xs:
        raise ValueError("no candidate levels to search; pass at least one, e.g. [1, 4, 16]")
    for x in xs:
        if isinstance(x, bool) or not math.isfinite(x) or x <= 0:
            raise ValueError(f"candidate levels must be finite numbers > 0, got {x!r}")
    return xs


class _Bisection(Generic[Level]):
    """Binary search for the last candidate that meets the SLO, one measurement at a time.

    At most floor(log2(n)) + 1 = ceil(log2(n + 1)) measurements.
    """

    def __init__(self, candidates: Sequence[Level], slo: Slo) -> None:
        self.xs: list[Level] = _sorted_candidates(candidates)
        self.search: SloSearch[Level] = SloSearch(slo)
        self._lo, self._hi, self._mid = 0, len(self.xs) - 1, -1

    def next_level(self) -> Level | None:
        """The candidate to measure next; None when the search is over."""
        if self._lo > self._hi:
            return None
        self._mid = (self._lo + self._hi) // 2
        return self.xs[self._mid]

    def record(self, level: LevelResult) -> None:
        """The measurement of ``next_level()``'s candidate."""
        x = self.xs[self._mid]
        ok, reasons = level_meets(level, self.search.slo)
        self.search.measured[x] = level
        if ok:
            self.search.best, self._lo = x, self._mid + 1
        else:
            self.search.misses[x] = reasons
            self._hi = self._mid - 1


def search_max_level(
    measure: Callable[[Level], LevelResult], candidates: Sequence[Level], slo: Slo
) -> SloSearch[Level]:
    """The largest candidate (concurrency or request rate) whose measured level meets ``slo``.

    Binary search over the sorted candidates, so at most ceil(log2(n)) + 1 calls of
    ``measure``. It assumes degradation is monotonic: if a level misses the SLO, every larger
    one misses too. When that does not hold (a noisy miss, a lucky pass) the answer is *a*
    level that met the SLO with a miss just above it, not necessarily the largest; sweep the
    candidates with ``max_concurrency_within_slo`` when that matters.

    ``measure`` must compute goodput with ``slo`` when it has per-request limits, e.g.
    ``lambda c: run_level(url, c, workload, slo=slo)``, or for open-loop rates
    ``lambda r: run_level(url, 256, workload.model_copy(update={"request_rate": r}), slo=slo)``.
    """
    bisection: _Bisection[Level] = _Bisection(candidates, slo)
    while (x := bisection.next_level()) is not None:
        bisection.record(measure(x))
    return bisection.search


async def search_max_level_async(
    measure: Callable[[Level], Awaitable[LevelResult]], candidates: Sequence[Level], slo: Slo
) -> SloSearch[Level]:
    """``search_max_level`` with an async ``measure`` (e.g. ``run_level_async``)."""
    bisection: _Bisection[Level] = _Bisection(candidates, slo)
    while (x := bisection.next_level()) is not None:
        bisection.record(await measure(x))
    return bisection.search
