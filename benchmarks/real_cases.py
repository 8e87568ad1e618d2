"""The real-SGLang cases the sequential benches share: a cap on running requests, and its level.

``capK`` launches the judged server with ``--max-running-requests K`` and slows level K+1, where
one request queues; ``capK@L`` slows level L instead (L-K requests queue). The sweep holds
levels 1, 2, 4 and every case's level, recording included, so the levels a cap leaves alone are
there to be wrongly failed. What a cap costs its level is whatever the CPU gives: on a 2-core
box one queued request cost C=K+1 about 15-30 % (cap3, cap7), and cap9@12 6-25 %, a drop near
10 % (docs/gates-and-ab.md, "Passes").
"""

from __future__ import annotations

import re

BASE_LEVELS = (1, 2, 4)
_CAP = re.compile(r"cap(\d+)(?:@(\d+))?")


def cap(name: str) -> tuple[int, int] | None:
    """``(K, L)`` of a cap case, None for ``unchanged``; bad names end the bench, naming them."""
    if name == "unchanged":
        return None
    m = _CAP.fullmatch(name)
    if m is None:
        raise SystemExit(f"--cases: {name!r} is neither unchanged nor capK or capK@L")
    k = int(m[1])
    level = int(m[2]) if m[2] else k + 1
    if not 0 < k < level:
        raise SystemExit(f"--cases: {name!r} needs 0 < K < L (a request must queue at L)")
    return k, level


def levels(names: list[str]) -> tuple[int, ...]:
    """The sweep's levels: 1, 2, 4 and every cap case's slowed level."""
    slowed = {c[1] for c in map(cap, names) if c is not None}
    return tuple(sorted(set(BASE_LEVELS) | slowed))


def flags(name: str) -> str:
    """The server args a case adds, as TOML list items to append ('' for unchanged)."""
    c = cap(name)
    return "" if c is None else f', "--max-running-requests", "{c[0]}"'


def slow_at(name: str) -> int:
    """The level a cap case slows (caught exactly: only it failed)."""
    c = cap(name)
    if c is None:
        raise ValueError("unchanged slows no level")
    return c[1]
