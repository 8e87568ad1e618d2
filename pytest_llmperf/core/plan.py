"""What one level sends: each request's prompt, output length and expected prompt tokens.

One place decides this for every workload, so the sweep, the shards and validity see the same
per-request targets: fixed lengths (random, shared-prefix), a length mix (core/lengths.py), a
dataset file (core/dataset.py) or multi-turn conversations (core/conversations.py).

A plan is a recipe, not the prompts: request ``i``'s prompt is built from (workload, ordinal)
when asked for, so a level of a million requests costs nothing until it runs. Every prompt is
the same as the one an eager build of the whole level would give (it depends on its ordinal
only). ``LevelBodies`` builds the request bodies a level starts with before its clock starts,
up to a token budget, and the rest as they are sent.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from pytest_llmperf.base.results import Workload
from pytest_llmperf.base.sharegpt import DatasetEntry, load_sharegpt
from pytest_llmperf.core.conversations import conversation_prompts, think_times
from pytest_llmperf.core.dataset import dataset_request
from pytest_llmperf.core.lengths import request_lengths
from pytest_llmperf.core.records import RequestRecord
from pytest_llmperf.core.workload import (
    chat_prompt,
    prompt_ids,
    prompt_text,
    shared_prefix_ids,
)

Prompt = Sequence[int] | str

# Prompt tokens whose bodies are built before a level's clock starts (~7 bytes of JSON each):
# every level a benchmark runs fits, so building costs the measured window nothing; a larger
# level starts at once and builds the rest as it sends (a note says so).
PREBUILD_TOKENS = 8 << 20
# Multi-turn: conversations whose prompts are kept while their turns are sent (C workers each
# hold one; a conversation evicted early is rebuilt, the same).
_CONVERSATIONS_KEPT = 4096


class _View(Sequence[Any]):
    """A read-only sequence computed per item (``plan.prompts`` and friends)."""

    def __init__(self, n: int, item: Callable[[int], Any]) -> None:
        self._n, self._item = n, item

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> Any: ...
    @overload
    def __getitem__(self, i: slice) -> list[Any]: ...
    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return [self._item(j) for j in range(*i.indices(self._n))]
        if not -self._n <= i < self._n:
            raise IndexError(i)
        return self._item(i % self._n)

    def __iter__(self) -> Iterator[Any]:
        return (self._item(j) for j in range(self._n))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(other) == self._n and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True)
class RequestPlan:
    """Requests in send order; multi-turn: requests k*turns .. k*turns+turns-1 are one
    conversation, request i waits ``think_s[i]`` after the previous turn's end.

    Picklable (a client process rebuilds its share of the prompts from it)."""

    workload: Workload
    count: int  # prompts (multi-turn: conversations)
    start: int = 0
    chat_filler: int | None = None
    chat_per_unit: int = 1
    _kept: OrderedDict[int, list[list[int]]] = field(
        default_factory=OrderedDict, repr=False, compare=False
    )
    _entries: list[DatasetEntry] = field(default_factory=list, repr=False, compare=False)

    @property
    def turns(self) -> int:
        return self.workload.turns or 1

    @property
    def ordinals(self) -> int:
        """Prompt ordinals used: the next level starts after them."""
        return self.count

    def __len__(self) -> int:
        return self.count * self.turns

    def prompt(self, i: int) -> Prompt:
        w, n = self.workload, self.start + i // self.turns
        if w.kind == "multi-turn":
            return self._conversation(n)[i % self.turns]
        if w.dataset is not None:
            return self._dataset(n)[0]
        if w.kind == "shared-prefix":
            return shared_prefix_ids(w, n)
        li = request_lengths(w, n)[0]
        if w.backend != "openai-chat":
            return prompt_ids(n, li, w.seed)
        if self.chat_filler is not None:
            return chat_prompt(
                n, max(0, self.chat_filler + (li - w.input_len) // self.chat_per_unit)
            )
        return prompt_text(n, li, w.seed)

    def output_len(self, i: int) -> int:
        w, n = self.workload, self.start + i // self.turns
        if w.dataset is not None:
            return self._dataset(n)[1]
        return request_lengths(w, n)[1]

    def input_len(self, i: int) -> int | None:
        """Prompt tokens of request ``i``; None: only the server can count it (dataset text)."""
        w = self.workload
        if w.kind == "multi-turn":
            t = i % self.turns
            return (t + 1) * w.input_len + t * w.output_len
        if w.dataset is not None:
            return None
        return request_lengths(w, self.start + i)[0]

    def think(self, i: int) -> float:
        w = self.workload
        if w.kind != "multi-turn" or w.think_time_s <= 0:
            return 0.0
        return think_times(w, self.start + i // self.turns)[i % self.turns]

    def _dataset(self, n: int) -> tuple[str, int]:
        assert self.workload.dataset is not None
        if not self._entries:  # read once per plan, not per request
            self._entries.extend(load_sharegpt(self.workload.dataset))
        return dataset_request(self.workload, n, self._entries)

    def _conversation(self, conv: int) -> list[list[int]]:
        kept = self._kept
        if conv in kept:
            kept.move_to_end(conv)
        else:
            kept[conv] = conversation_prompts(self.workload, conv)
            if len(kept) > _CONVERSATIONS_KEPT:
                kept.popitem(last=False)
        return kept[conv]

    @property
    def prompts(self) -> _View:
        return _View(len(self), self.prompt)

    @property
    def output_lens(self) -> _View:
        return _View(len(self), self.output_len)

    @property
    def input_lens(self) -> _View:
        return _View(len(self), self.input_len)

    @property
    def think_s(self) -> _View:
        return _View(len(self), self.think)

    @staticmethod
    def per_request_targets(workload: Workload) -> bool:
        """Whether requests have lengths of their own (else validity uses the workload's)."""
        return bool(workload.range_ratio is not None or workload.dataset or workload.turns)

    def expected_totals(self, records: Sequence[RequestRecord]) -> tuple[int | None, int]:
        """(prompt tokens, output tokens) the completed requests were meant to have."""
        done = [r.index for r in records if r.ok]
        ins = [self.input_len(i) for i in done]
        total_in = None if any(n is None for n in ins) else sum(n or 0 for n in ins)
        return total_in, sum(self.output_len(i) for i in done)


def plan_level(
    workload: Workload,
    count: int,
    start: int = 0,
    *,
    chat_filler: int | None = None,
    chat_per_unit: int = 1,
) -> RequestPlan:
    """The requests of a level of ``count`` prompts (multi-turn: conversations) from ``start``.

    ``chat_filler`` sizes chat prompts to ``input_len`` (core/chat_sizing.py); a length mix
    moves it by the request's difference in tokens over ``chat_per_unit`` per filler unit.
    """
    if start < 0:
        raise ValueError(f"the first prompt ordinal must be >= 0, got {start}")
    return RequestPlan(workload, count, start, chat_filler, chat_per_unit)


class LevelBodies:
    """The request bodies of a level (or of one client process's share of it).

    Bodies of the first requests, up to ``PREBUILD_TOKENS`` prompt tokens, are built here,
    before the level's clock starts; ``take(i)`` hands one over and forgets it (memory stays
    bounded by the budget), building any past the budget on the spot.
    """

    def __init__(
        self,
        plan: RequestPlan,
        body: Callable[[Prompt, int], bytes],
        indices: Sequence[int] | None = None,
        budget_tokens: int | None = None,
    ) -> None:
        self.plan, self._body = plan, body
        self.budget_tokens = PREBUILD_TOKENS if budget_tokens is None else budget_tokens
        self.indices = range(len(plan)) if indices is None else indices
        self._ready: dict[int, tuple[bytes, int | None]] = {}
        self.built_late = 0  # bodies built while the level ran
        tokens = 0
        for i in self.indices:  # bounded by the budget (and the level's size)
            if tokens >= self.budget_tokens:
                break
            self._ready[i] = self._build(i)
            tokens += self.plan.input_len(i) or self.plan.workload.input_len

    def _build(self, i: int) -> tuple[bytes, int | None]:
        p = self.plan.prompt(i)
        return self._body(p, self.plan.output_len(i)), None if isinstance(p, str) else len(p)

    def __len__(self) -> int:
        return len(self.indices)

    @property
    def prebuilt(self) -> int:
        """Bodies built and not yet taken."""
        return len(self._ready)

    def take(self, i: int) -> tuple[bytes, int | None]:
        """Request ``i``'s body and prompt tokens (None for text prompts)."""
        got = self._ready.pop(i, None)
        if got is None:
            self.built_late += 1
            got = self._build(i)
        return got
