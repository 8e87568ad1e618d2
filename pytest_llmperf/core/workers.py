"""C workers pulling items from one shared list: the closed loop's shape.

Exactly ``concurrency`` items are in progress until the list runs dry (the seed scripts' and
bench_serving's ``--max-concurrency`` behaviour). A single request or a whole multi-turn
conversation is an item alike.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

__all__ = ["pull_workers"]


async def pull_workers(
    concurrency: int, items: int, handle: Callable[[int], Awaitable[None]]
) -> None:
    """Run ``handle(i)`` for every ``i < items`` with at most ``concurrency`` at a time."""
    next_item = 0

    async def worker() -> None:
        nonlocal next_item
        while next_item < items:  # bounded: each pass consumes one item
            i = next_item
            next_item += 1
            await handle(i)

    await asyncio.gather(*(worker() for _ in range(min(concurrency, items))))
