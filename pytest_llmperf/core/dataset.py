"""Prompts from a ShareGPT file: the first human turn, sized by the reply.

Prompt ordinal n uses entry ``perm[n mod N]`` of a seeded permutation of the file's N entries
(bench_serving shuffles too), behind a tag of the ordinal's digits, least significant first,
so consecutive prompts differ at their first token and a re-used entry is not a cached prefix.

Output length, fixed per request with ignore_eos: ``dataset_output_len`` when set, else the
reply's whitespace-separated words x ``TOKENS_PER_WORD`` rounded up (bench_serving tokenizes
the reply instead; we have no tokenizer offline, and the server's tokenizer may differ from any
local one). The prompt's token count is not guessed: results take it from the server's usage
(``meta_info.prompt_tokens`` / ``usage.prompt_tokens``), and validity does not check it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from pytest_llmperf.base.results import Workload
from pytest_llmperf.base.sharegpt import DatasetEntry, load_sharegpt

# English text in BPE vocabularies (Llama, GPT): about 1.3 tokens per word.
TOKENS_PER_WORD = 1.3
_PERM_STREAM = 0xDA7A


def reply_output_len(entry: DatasetEntry, fixed: int | None) -> int:
    if fixed is not None:
        return fixed
    return max(1, math.ceil(len(entry.reply.split()) * TOKENS_PER_WORD))


@lru_cache(maxsize=8)
def _permutation(seed: int, entries: int) -> list[int]:
    rng = np.random.default_rng([seed & 0xFFFFFFFF, _PERM_STREAM])
    return list(rng.permutation(entries).tolist())


def dataset_request(
    workload: Workload, n: int, entries: Sequence[DatasetEntry] | None = None
) -> tuple[str, int]:
    """Prompt text and output length of ordinal ``n`` (``entries``: the file, when read)."""
    assert workload.dataset is not None
    entries = load_sharegpt(workload.dataset) if entries is None else entries
    entry = entries[_permutation(workload.seed, len(entries))[n % len(entries)]]
    prompt = f"{n % 10**6:06d}"[::-1] + " " + entry.prompt
    return prompt, reply_output_len(entry, workload.dataset_output_len)
