"""A prefix cache for the engine model: shared prompt prefixes skip prefill, as in a real engine.

SGLang's radix cache and vLLM's prefix caching keep the KV of earlier prompts; a new prompt
that starts with the same tokens computes only the rest. Here a prompt is cut into blocks of
``BLOCK`` tokens, each keyed by a hash chained over all earlier blocks, so a key stands for the
whole prefix up to it. Capacity is the KV budget in tokens; the least recently used blocks go
first, deepest (leaf) blocks before their prefixes, like radix-tree LRU eviction.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

BLOCK = 16


class PrefixCache:
    """Matched-prefix lookup plus insert, LRU-bounded by ``capacity_tokens``."""

    def __init__(self, capacity_tokens: int) -> None:
        self.capacity_blocks = max(0, capacity_tokens // BLOCK)
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self.hits = 0  # cached tokens handed out since start (Prometheus counters read these)
        self.queries = 0  # prompt tokens looked up

    def __len__(self) -> int:
        return len(self._blocks) * BLOCK

    def clear(self) -> None:
        self._blocks.clear()

    def match_and_insert(self, tokens: Sequence[int | str]) -> int:
        """Cached tokens for this prompt (never all of it: the last token is always computed),
        then remember the prompt's full blocks for later prompts."""
        n_full = len(tokens) // BLOCK
        keys: list[int] = []
        h = 0
        for b in range(n_full):
            h = hash((h, tuple(tokens[b * BLOCK : (b + 1) * BLOCK])))
            keys.append(h)
        matched = 0
        for key in keys:
            if key not in self._blocks:
                break
            matched += 1
        blocks = self._blocks
        # Touch deepest first so the shared prefix is the most recently used.
        for key in reversed(keys):
            if key in blocks:
                blocks.move_to_end(key)
            else:
                blocks[key] = None
        while len(blocks) > self.capacity_blocks:
            blocks.popitem(last=False)
        cached = min(matched * BLOCK, len(tokens) - 1)
        cached = max(0, cached)
        self.queries += len(tokens)
        self.hits += cached
        return cached
