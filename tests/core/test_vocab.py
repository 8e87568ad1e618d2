"""Token-id prompts stay inside the served model's vocabulary."""

from __future__ import annotations

import json
from pathlib import Path

import orjson

from pytest_llmperf.base.results import Workload
from pytest_llmperf.core.client import LoadGenerator
from pytest_llmperf.core.server_probe import local_vocab_size
from pytest_llmperf.core.workload import MAX_PROMPT_ID, fold_ids, prompt_ids, warmup_prompt

# What SGLang 0.5.23's /server_info says of the model (captured from the real server): paths,
# no vocabulary size.
SERVER_INFO = {"model_path": "{dir}", "tokenizer_path": "{dir}", "tokenizer_mode": "auto"}


def _info(model_dir: Path) -> dict[str, str]:
    return {k: v.format(dir=model_dir) for k, v in SERVER_INFO.items()}


def test_vocab_size_from_a_local_model_directory(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 443}))
    assert local_vocab_size(_info(tmp_path)) == (443, str(tmp_path / "config.json"))
    nested = tmp_path / "vl"
    nested.mkdir()
    (nested / "config.json").write_text(json.dumps({"text_config": {"vocab_size": 151936}}))
    assert local_vocab_size(_info(nested))[0] == 151936


def test_vocab_size_unknown_says_why(tmp_path: Path) -> None:
    assert local_vocab_size(None)[0] is None
    size, why = local_vocab_size({"model_path": "Qwen/Qwen3-8B"})  # a hub name, not local
    assert size is None and "no model directory" in why


def test_folded_prompts_fit_a_tiny_vocabulary_and_stay_deterministic() -> None:
    for ids in (prompt_ids(5, 300), prompt_ids(40000, 50), warmup_prompt(Workload(input_len=64))):
        assert isinstance(ids, list)
        folded = fold_ids(ids, 443)
        assert len(folded) == len(ids)
        assert all(44 <= i < 443 for i in folded), max(folded)
        assert folded == fold_ids(ids, 443)
    ids = prompt_ids(7, 100)
    assert fold_ids(ids, MAX_PROMPT_ID + 1) == ids  # a vocabulary large enough: untouched


def test_the_load_generator_folds_every_body_it_builds() -> None:
    gen = LoadGenerator("http://127.0.0.1:1")
    prompt = prompt_ids(3, 64)
    assert max(orjson.loads(gen.body(prompt, 4))["input_ids"]) >= 1000
    gen.vocab_size = 443
    assert max(orjson.loads(gen.body(prompt, 4))["input_ids"]) < 443


def test_unknown_vocabulary_is_noted_for_a_real_server_not_for_the_simulator() -> None:
    from pytest_llmperf.core.sweep import _fit_vocab

    gen = LoadGenerator("http://127.0.0.1:9", "sglang")
    wl = Workload(input_len=8, output_len=4)
    note = _fit_vocab(gen, {"model_path": "Qwen/Qwen3-8B"}, wl)
    assert note is not None and note.startswith("vocabulary size unknown")
    assert _fit_vocab(gen, {"model_path": "sim/qwen-moe", "simulated": True}, wl) is None
    assert gen.vocab_size is None
