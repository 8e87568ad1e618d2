"""multi-turn: conversations of T turns that re-send their history, with think time.

Conversation k (a prompt ordinal) has T turns. Turn t's prompt is the history, i.e. every
earlier turn's user message followed by that turn's reply, then a new user message of
``input_len`` tokens. The reply in the history is a seeded filler of ``output_len`` token ids,
not the text the server returned: the prompts are then known before the level starts
(deterministic per seed, and the same for every engine), and the history a prefix cache can
serve is exactly turn t-1's prompt (an engine that also cached its own generated tokens cannot
match the filler). The first user message starts like ``prompt_ids(k)``, so conversations share
no prefix with each other.

In the closed loop C workers each take a conversation and run its turns in order; between two
turns a worker waits a think time drawn uniformly from [0, think_time_s], seeded per
(seed, conversation, turn), while other conversations' requests keep the server busy. So C is
the number of open conversations, and a turn's hit rate says whether its history survived the
other conversations' traffic (cache retention under load).
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Callable, Sequence

import numpy as np

from pytest_llmperf.base.results import Workload
from pytest_llmperf.core.client import LoadGenerator
from pytest_llmperf.core.records import RequestRecord
from pytest_llmperf.core.workers import pull_workers
from pytest_llmperf.core.workload import TOKEN_ID_HIGH, TOKEN_ID_LOW, prompt_ids

_USER_STREAM, _REPLY_STREAM, _THINK_STREAM = 0x3E1, 0x3E2, 0x3E3


def _ids(seed: int, conv: int, turn: int, stream: int, n: int) -> list[int]:
    rng = np.random.default_rng([seed & 0xFFFFFFFF, conv & 0xFFFFFFFF, turn, stream])
    return rng.integers(TOKEN_ID_LOW, TOKEN_ID_HIGH, size=n).tolist()


def conversation_prompts(workload: Workload, conv: int) -> list[list[int]]:
    """The T prompts of conversation ``conv``; prompt t starts with prompt t-1."""
    turns = workload.turns or 1
    prompts: list[list[int]] = []
    history: list[int] = []
    for t in range(turns):
        user = (
            prompt_ids(conv, workload.input_len, workload.seed)
            if t == 0
            else _ids(workload.seed, conv, t, _USER_STREAM, workload.input_len)
        )
        prompts.append(history + user)
        history = prompts[-1] + _ids(workload.seed, conv, t, _REPLY_STREAM, workload.output_len)
    return prompts


def think_times(workload: Workload, conv: int) -> list[float]:
    """Seconds to wait before each turn (0 before the first), bounded by think_time_s."""
    turns = workload.turns or 1
    if workload.think_time_s <= 0:
        return [0.0] * turns
    rng = np.random.default_rng([workload.seed & 0xFFFFFFFF, conv & 0xFFFFFFFF, _THINK_STREAM])
    draws = rng.uniform(0.0, workload.think_time_s, size=turns).tolist()
    return [0.0, *draws[1:]]


def conversation_requests(
    workload: Workload, count: int, start: int
) -> tuple[list[list[int]], list[int], list[float]]:
    """Prompts, output lengths and think times of conversations ``start .. start+count-1``."""
    prompts: list[list[int]] = []
    think: list[float] = []
    for conv in range(start, start + count):
        prompts.extend(conversation_prompts(workload, conv))
        think.extend(think_times(workload, conv))
    return prompts, [workload.output_len] * len(prompts), think


async def conversation_loop(
    gen: LoadGenerator,
    concurrency: int,
    take: Callable[[int], tuple[bytes, int | None]],
    n: int,
    turns: int,
    think_s: Callable[[int], float],
    on_record: Callable[[RequestRecord], None],
) -> list[RequestRecord | None]:
    """C workers, each running whole conversations turn by turn (think time between turns);
    ``take(i)`` gives request i's body and prompt tokens."""
    records: list[RequestRecord | None] = [None] * n

    async def conversation(k: int) -> None:
        for i in range(k * turns, (k + 1) * turns):
            think = think_s(i)
            if think > 0:
                await asyncio.sleep(think)
            body, tokens = take(i)
            rec = await gen.request(i, "", 0, body=body, prompt_tokens=tokens)
            records[i] = rec
            on_record(rec)

    await pull_workers(concurrency, n // turns, conversation)
    return records


def ttft_by_turn_ms(records: Sequence[RequestRecord], turns: int) -> list[float | None]:
    """Median TTFT (ms) of each turn over the completed requests (None: none completed)."""
    out: list[float | None] = []
    for t in range(turns):
        ttfts = [r.ttft for r in records if r.ok and r.index % turns == t]
        out.append(1e3 * statistics.median(ttfts) if ttfts else None)
    return out
