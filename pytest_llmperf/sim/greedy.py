"""What a whole (non-streamed) answer says: greedy output tokens drawn from the prompt.

Real greedy decoding maps a prompt to one output; the simulator does the same with a stream
seeded by the prompt's tokens, so two launches (or two versions) give byte-identical ids for
byte-identical requests, and consistency probes have something to compare. Two knobs break
that on purpose: ``--sim-diverge-share`` makes a seeded share of prompts answer differently
from a seeded position on (a "new" version that changed the model's outputs), and
``--sim-nondeterminism`` makes a request diverge with that probability at random, as batching
and the radix cache make SGLang's temperature 0 drift unless ``--enable-deterministic-inference``
(which turns the second knob off, as it does on the real server).

Streamed answers keep the cyclic vocabulary of ``wire.py``: their hot path is prebuilt bytes,
and nothing compares streamed content.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence

from pytest_llmperf.sim.knobs import ServerKnobs
from pytest_llmperf.sim.wire import VOCAB_IDS, VOCAB_TEXT

_V = len(VOCAB_IDS)
_INDEX = {tid: i for i, tid in enumerate(VOCAB_IDS)}
# Request-level nondeterminism draws from one process-wide stream (like a scheduler's timing).
_NOISE = random.Random()


def _rng(key: str, purpose: str) -> random.Random:
    digest = hashlib.sha256(f"{purpose}\0{key}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def greedy_ids(prompt: Sequence[int | str], n: int, knobs: ServerKnobs) -> list[int]:
    """The ``n`` output token ids of a greedy answer to ``prompt``."""
    key = " ".join(str(t) for t in prompt)
    draw = _rng(key, "out")
    ids = [VOCAB_IDS[draw.randrange(_V)] for _ in range(n)]
    if n == 0:
        return ids
    pos: int | None = None
    if knobs.sim_diverge_share > 0 and _rng(key, "share").random() < knobs.sim_diverge_share:
        pos = _rng(key, "pos").randrange(n)
        alt = _rng(key, "alt")
    elif (
        knobs.sim_nondeterminism > 0
        and not knobs.enable_deterministic_inference
        and _NOISE.random() < knobs.sim_nondeterminism
    ):
        pos = _NOISE.randrange(n)
        alt = random.Random(_NOISE.random())
    if pos is not None:
        # The first changed token is another token for sure; the rest follow another stream.
        ids[pos] = VOCAB_IDS[(_INDEX[ids[pos]] + 1 + alt.randrange(_V - 1)) % _V]
        ids[pos + 1 :] = [VOCAB_IDS[alt.randrange(_V)] for _ in range(n - pos - 1)]
    return ids


def ids_text(ids: Sequence[int]) -> str:
    return "".join(VOCAB_TEXT[_INDEX[i]] for i in ids)
