"""ShareGPT dataset files: loading, bad files named, prompts and output lengths, the key."""

from __future__ import annotations

import math
from pathlib import Path

import orjson
import pytest

from pytest_llmperf.base.errors import InputError
from pytest_llmperf.base.results import Workload
from pytest_llmperf.base.sharegpt import content_hash, load_sharegpt
from pytest_llmperf.core.dataset import TOKENS_PER_WORD
from pytest_llmperf.core.plan import plan_level

SMALL = Path(__file__).resolve().parents[1] / "data" / "sharegpt_small.json"
DS = Workload(dataset=str(SMALL))


def test_the_shipped_file_loads_with_the_first_human_turn_as_prompt() -> None:
    entries = load_sharegpt(SMALL)
    assert len(entries) == 12
    assert entries[0].prompt == "What is the difference between a process and a thread?"
    assert entries[3].prompt.startswith("Why does ice float")  # a system turn comes first
    assert entries[1].reply.startswith("Build a blanket fort")  # the reply to that prompt


def test_jsonl_is_read_line_by_line(tmp_path: Path) -> None:
    rows = orjson.loads(SMALL.read_bytes())[:3]
    f = tmp_path / "three.jsonl"
    f.write_bytes(b"\n".join(orjson.dumps(r) for r in rows) + b"\n\n")
    assert load_sharegpt(f) == load_sharegpt(SMALL)[:3]


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b'{"conversations": []}', "a JSON list of entries"),
        (b"[1, 2", "not JSON"),
        (
            b'[{"conversations": [{"from": "human", "value": "hi"}]}]',
            "entry 0: field conversations has no 'gpt' turn",
        ),
        (b'[{"id": 1}]', "entry 0: field conversations: Field required"),
        (
            b'[{"conversations": [{"from": "human", "value": "a"}, {"from": "gpt", "value": "b"}]},'
            b' {"conversations": [{"from": "bot", "value": "b"}]}]',
            "entry 1: field conversations.0.from",
        ),
        (
            b'[{"conversations": [{"from": "human", "value": 3}, {"from": "gpt", "value": "b"}]}]',
            "entry 0: field conversations.0.value",
        ),
        (b"[]", "no entries"),
    ],
)
def test_bad_files_name_the_file_and_the_entry(tmp_path: Path, content: bytes, needle: str) -> None:
    f = tmp_path / "bad.json"
    f.write_bytes(content)
    with pytest.raises(InputError, match=needle) as info:
        load_sharegpt(f)
    assert str(f) in str(info.value)


def test_a_bad_jsonl_line_and_a_missing_file_are_named(tmp_path: Path) -> None:
    f = tmp_path / "bad.jsonl"
    f.write_text('{"conversations": []}\n{oops\n')
    with pytest.raises(InputError, match=r"bad.jsonl: line 2 is not JSON"):
        load_sharegpt(f)
    with pytest.raises(ValueError, match="dataset file .*missing.json"):
        Workload(dataset=str(tmp_path / "missing.json"))


def test_output_lengths_follow_the_reply_or_the_fixed_length() -> None:
    entries = load_sharegpt(SMALL)
    plan = plan_level(DS, 24)
    by_prompt = {e.prompt: e for e in entries}
    for prompt, out in zip(plan.prompts, plan.output_lens, strict=True):
        assert isinstance(prompt, str)
        tag, text = prompt.split(" ", 1)
        assert len(tag) == 6 and tag.isdigit()
        assert out == math.ceil(len(by_prompt[text].reply.split()) * TOKENS_PER_WORD)
    assert plan.input_lens == [None] * 24  # only the server can count the prompt's tokens
    # 24 prompts over 12 entries: every entry twice, each time behind another ordinal tag
    assert sorted(p.split(" ", 1)[1] for p in plan.prompts[:12]) == sorted(by_prompt)
    assert len({p[:6] for p in plan.prompts}) == 24
    assert plan_level(DS, 4, start=5).prompts == plan.prompts[5:9]
    fixed = plan_level(DS.model_copy(update={"dataset_output_len": 50}), 5)
    assert fixed.output_lens == [50] * 5


def test_key_records_the_file_name_and_content_hash(tmp_path: Path) -> None:
    digest = content_hash(SMALL)[:8]
    assert DS.key() == f"sglang-dssharegpt_small-{digest}"
    assert DS.model_copy(update={"dataset_output_len": 64}).key().endswith(f"{digest}-out64")
    copy = tmp_path / "sharegpt_small.json"
    copy.write_bytes(SMALL.read_bytes().replace(b"grey cat", b"black cat"))
    edited = Workload(dataset=str(copy))
    assert edited.key() != DS.key()  # same name, other content
    # a results file keeps the hash: its key is known where the dataset file is not
    saved = edited.model_dump_json()
    copy.unlink()
    assert Workload.model_validate_json(saved).key() == edited.key()


def test_dataset_settings_that_do_not_fit_are_rejected() -> None:
    with pytest.raises(ValueError, match="dataset_output_len needs a dataset"):
        Workload(dataset_output_len=5)
    with pytest.raises(ValueError, match="range_ratio needs workload = 'random' without"):
        Workload(dataset=str(SMALL), range_ratio=0.5)
