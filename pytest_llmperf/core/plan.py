"""What one level sends: each request's prompt, output length and expected prompt tokens.

One place decides this for every workload, so the sweep, the shards and validity see the same
per-request targets: fixed lengths (random, shared-prefix), a length mix (core/lengths.py), a
dataset file (core/dataset.py) or multi-turn conversations (core/conversations.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pytest_llmperf.base.results import Workload
from pytest_llmperf.core.conversations import conversation_requests
from pytest_llmperf.core.dataset import dataset_requests
from pytest_llmperf.core.lengths import request_lengths
from pytest_llmperf.core.records import RequestRecord
from pytest_llmperf.core.workload import build_prompts, chat_prompt, prompt_ids, prompt_text

Prompt = Sequence[int] | str


@dataclass(frozen=True)
class RequestPlan:
    """Requests in send order; multi-turn: requests k*turns .. k*turns+turns-1 are one
    conversation, request i waits ``think_s[i]`` after the previous turn's end."""

    prompts: list[Prompt]
    output_lens: list[int]
    input_lens: list[int | None]  # None: only the server can count it (dataset text)
    ordinals: int  # prompt ordinals used: the next level starts after them
    turns: int = 1
    think_s: list[float] = field(default_factory=list)

    @staticmethod
    def per_request_targets(workload: Workload) -> bool:
        """Whether requests have lengths of their own (else validity uses the workload's)."""
        return bool(workload.range_ratio is not None or workload.dataset or workload.turns)

    def expected_totals(self, records: Sequence[RequestRecord]) -> tuple[int | None, int]:
        """(prompt tokens, output tokens) the completed requests were meant to have."""
        done = [r.index for r in records if r.ok]
        ins = [self.input_lens[i] for i in done]
        total_in = None if any(n is None for n in ins) else sum(n or 0 for n in ins)
        return total_in, sum(self.output_lens[i] for i in done)


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
    if workload.kind == "multi-turn":
        prompts, outs, think = conversation_requests(workload, count, start)
        ins: list[int | None] = [len(p) for p in prompts]
        return RequestPlan(list(prompts), outs, ins, count, workload.turns or 1, think)
    if workload.dataset is not None:
        texts, outs = dataset_requests(workload, count, start)
        return RequestPlan(list(texts), outs, [None] * count, count)
    if workload.range_ratio is None:
        fixed = build_prompts(workload, count, start, chat_filler=chat_filler)
        return RequestPlan(
            list(fixed), [workload.output_len] * count, [workload.input_len] * count, count
        )
    lens = [request_lengths(workload, n) for n in range(start, start + count)]
    mixed: list[Prompt] = []
    for n, (li, _) in zip(range(start, start + count), lens, strict=True):
        if workload.backend != "openai-chat":
            mixed.append(prompt_ids(n, li, workload.seed))
        elif chat_filler is not None:
            mixed.append(
                chat_prompt(n, max(0, chat_filler + (li - workload.input_len) // chat_per_unit))
            )
        else:
            mixed.append(prompt_text(n, li, workload.seed))
    return RequestPlan(mixed, [lo for _, lo in lens], [li for li, _ in lens], count)
