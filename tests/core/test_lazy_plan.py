"""A level's plan builds each prompt when asked: the same prompts, bodies and lengths as the
eager build of the whole level it replaced (the same command sends the same requests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_llmperf.base.results import Workload
from pytest_llmperf.base.sharegpt import load_sharegpt
from pytest_llmperf.core.client import request_body
from pytest_llmperf.core.conversations import conversation_requests
from pytest_llmperf.core.dataset import reply_output_len
from pytest_llmperf.core.lengths import request_lengths
from pytest_llmperf.core.plan import LevelBodies, plan_level
from pytest_llmperf.core.workload import build_prompts, chat_prompt, prompt_ids, prompt_text

SMALL = Path(__file__).resolve().parents[1] / "data" / "sharegpt_small.json"


def eager_plan(
    workload: Workload, count: int, start: int, chat_filler: int | None = None, per_unit: int = 1
) -> tuple[list[Any], list[int], list[int | None], list[float]]:
    """The whole level at once, as plan_level built it before it became lazy (kept verbatim,
    the dataset's shuffle inlined): prompts, output lengths, input lengths, think times."""
    think: list[float] = []
    if workload.kind == "multi-turn":
        prompts, outs, think = conversation_requests(workload, count, start)
        return list(prompts), outs, [len(p) for p in prompts], think
    if workload.dataset is not None:
        entries = load_sharegpt(workload.dataset)
        rng = np.random.default_rng([workload.seed & 0xFFFFFFFF, 0xDA7A])
        perm = rng.permutation(len(entries)).tolist()
        texts, douts = [], []
        for n in range(start, start + count):
            entry = entries[perm[n % len(entries)]]
            texts.append(f"{n % 10**6:06d}"[::-1] + " " + entry.prompt)
            douts.append(reply_output_len(entry, workload.dataset_output_len))
        return texts, douts, [None] * count, [0.0] * count
    if workload.range_ratio is None:
        fixed = build_prompts(workload, count, start, chat_filler=chat_filler)
        return (
            list(fixed),
            [workload.output_len] * count,
            [workload.input_len] * count,
            [0.0] * count,
        )
    lens = [request_lengths(workload, n) for n in range(start, start + count)]
    mixed: list[Any] = []
    for n, (li, _) in zip(range(start, start + count), lens, strict=True):
        if workload.backend != "openai-chat":
            mixed.append(prompt_ids(n, li, workload.seed))
        elif chat_filler is not None:
            mixed.append(
                chat_prompt(n, max(0, chat_filler + (li - workload.input_len) // per_unit))
            )
        else:
            mixed.append(prompt_text(n, li, workload.seed))
    return mixed, [lo for _, lo in lens], [li for li, _ in lens], [0.0] * count


WORKLOADS = {
    "random": (Workload(input_len=50, output_len=7, seed=3), None),
    "chat-text": (Workload(backend="openai-chat", input_len=30), None),
    "chat-sized": (Workload(backend="openai-chat", input_len=30), 11),
    "shared-prefix": (
        Workload(input_len=40, kind="shared-prefix", prefix_len=30, prefix_groups=3),
        None,
    ),
    "length-mix": (Workload(input_len=60, output_len=20, range_ratio=0.5), None),
    "length-mix-vllm-chat": (
        Workload(
            backend="openai-chat", input_len=60, range_ratio=0.5, range_convention="vllm", seed=9
        ),
        7,
    ),
    "multi-turn": (
        Workload(input_len=20, output_len=10, kind="multi-turn", turns=3, think_time_s=0.5),
        None,
    ),
    "dataset": (Workload(dataset=str(SMALL), seed=5), None),
    "dataset-fixed-output": (Workload(dataset=str(SMALL), dataset_output_len=33), None),
}


@pytest.mark.parametrize("name", list(WORKLOADS))
@pytest.mark.parametrize("start", [0, 29_990])  # past the first-token range of ordinals too
def test_lazy_plan_equals_the_eager_level(name: str, start: int) -> None:
    workload, filler = WORKLOADS[name]
    count = 24
    plan = plan_level(workload, count, start, chat_filler=filler, chat_per_unit=2 if filler else 1)
    prompts, outs, ins, think = eager_plan(workload, count, start, filler, 2 if filler else 1)
    n = len(prompts)
    assert len(plan) == n and plan.ordinals == count
    # Out of order, and twice: a prompt depends on its ordinal only, never on what was built.
    order = list(range(n))[::-1] + list(range(n))
    assert [plan.prompt(i) for i in order] == [prompts[i] for i in order]
    assert [plan.output_len(i) for i in range(n)] == outs
    assert [plan.input_len(i) for i in range(n)] == ins
    assert [plan.think(i) for i in range(n)] == think
    assert list(plan.prompts) == prompts and plan.prompts[3:7] == prompts[3:7]


@pytest.mark.parametrize("name", ["random", "multi-turn", "dataset", "length-mix"])
@pytest.mark.parametrize("budget", [0, 100, 1 << 30])
def test_bodies_are_the_eager_bodies_whenever_they_are_built(name: str, budget: int) -> None:
    """Built before the level (within the budget) or while it runs: the same bytes."""
    workload, _ = WORKLOADS[name]
    plan = plan_level(workload, 12, 4)
    prompts, outs, _, _ = eager_plan(workload, 12, 4)

    def body(p: Any, o: int) -> bytes:
        return request_body(workload.backend, p, o)

    eager = [body(p, o) for p, o in zip(prompts, outs, strict=True)]
    bodies = LevelBodies(plan, body, budget_tokens=budget)
    prebuilt = bodies.prebuilt
    taken = [bodies.take(i) for i in range(len(plan))]
    assert [b for b, _ in taken] == eager
    assert [t for _, t in taken] == [None if isinstance(p, str) else len(p) for p in prompts]
    assert bodies.built_late == len(plan) - prebuilt
    assert bodies.prebuilt == 0  # handed over and forgotten: nothing is kept for the level
    if budget == 0:
        assert prebuilt == 0
    if budget >= 1 << 30:
        assert prebuilt == len(plan)


def test_a_million_requests_plan_nothing_up_front() -> None:
    """The largest level allowed: the plan holds no prompt, and the bodies built before the
    level are bounded by the token budget, not by the level's size."""
    workload = Workload(input_len=1000, requests_per_level=1_000_000)
    plan = plan_level(workload, 1_000_000)
    bodies = LevelBodies(plan, lambda p, o: request_body("sglang", p, o), budget_tokens=50_000)
    assert len(plan) == len(bodies) == 1_000_000
    assert bodies.prebuilt == 50
    assert plan.prompt(999_999) == prompt_ids(999_999, 1000)
    body, tokens = bodies.take(999_999)
    assert tokens == 1000 and body == request_body("sglang", prompt_ids(999_999, 1000), 1000)
