"""Per-request lengths of a length mix: drawn around ``input_len`` / ``output_len``.

Two conventions for ``range_ratio`` r and a nominal length L, both uniform over integers:

- ``sglang``: [max(1, int(r*L)), L], as SGLang's ``python/sglang/bench_serving.py``
  ``sample_random_requests`` draws ``np.random.randint(int(input_len * range_ratio),
  input_len + 1)`` (``--random-range-ratio``; r = 1 is fixed lengths, r = 0 spans [1, L]).
- ``vllm``: [max(1, floor((1-r)*L)), ceil((1+r)*L)], as vLLM's ``vllm/benchmarks/datasets.py``
  ``RandomDataset.get_text_sampling_params`` (r = 0 is fixed lengths; it requires r < 1).

Unlike both tools, which draw a whole array from the global seed, a request's lengths here
depend only on (seed, ordinal): the same prompt ordinal has the same lengths in every level,
repeat and re-run, whatever was sent before it.
"""

from __future__ import annotations

import math

import numpy as np

from pytest_llmperf.base.results import RangeConvention, Workload

_LENGTH_STREAM = 0x1E7


def length_bounds(length: int, ratio: float, convention: RangeConvention) -> tuple[int, int]:
    """Inclusive [low, high] of lengths drawn around ``length``."""
    if convention == "sglang":
        return max(1, int(length * ratio)), length
    return max(1, math.floor(length * (1 - ratio))), math.ceil(length * (1 + ratio))


def request_lengths(workload: Workload, ordinal: int) -> tuple[int, int]:
    """(input_len, output_len) of prompt ``ordinal``: the workload's own without a range."""
    r = workload.range_ratio
    if r is None:
        return workload.input_len, workload.output_len
    rng = np.random.default_rng([workload.seed & 0xFFFFFFFF, ordinal & 0xFFFFFFFF, _LENGTH_STREAM])
    lo_in, hi_in = length_bounds(workload.input_len, r, workload.range_convention)
    lo_out, hi_out = length_bounds(workload.output_len, r, workload.range_convention)
    return int(rng.integers(lo_in, hi_in + 1)), int(rng.integers(lo_out, hi_out + 1))
