"""Chat prompts of exactly ``input_len`` tokens as the server counts them.

A chat endpoint wraps the message in its template (role markers, BOS, the assistant header),
so a message of N tokens is N + overhead prompt tokens, and the overhead depends on the model.
Two probe requests (one output token each) with messages of two filler lengths give the
server's count as ``overhead + per_unit * filler`` (``workload.chat_prompt`` keeps it linear);
solving for ``input_len`` gives the filler every measured chat prompt uses.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_llmperf.base.errors import LLMPerfError
from pytest_llmperf.core.client import LoadGenerator
from pytest_llmperf.core.workload import chat_prompt

PROBE_FILLERS = (8, 24)
# Probe ordinals far past any measured one, so no measured prompt shares their first digits.
PROBE_INDEX = 999_990


class ChatSizingError(LLMPerfError):
    """The server's prompt-token counts for the probes could not size the chat prompts."""


@dataclass(frozen=True)
class ChatSizing:
    """How chat messages map to server prompt tokens, and the filler for ``input_len``."""

    overhead: int  # tokens around the filler: template, the prompt's number
    per_unit: int  # tokens per filler unit
    filler: int  # filler units for the requested input_len
    exact: bool  # False when input_len cannot be hit exactly (too short, or per_unit > 1)

    def tokens(self, filler: int) -> int:
        return self.overhead + self.per_unit * filler


def solve(counts: tuple[int, int], input_len: int) -> ChatSizing:
    """Pure arithmetic over the two probes' prompt-token counts."""
    (f1, f2), (p1, p2) = PROBE_FILLERS, counts
    per_unit, rest = divmod(p2 - p1, f2 - f1)
    if per_unit < 1 or rest:
        raise ChatSizingError(
            f"prompt tokens did not grow linearly with the message ({p1} tokens for {f1} filler "
            f"words, {p2} for {f2}); the chat template or tokenizer is unusual"
        )
    overhead = p1 - per_unit * f1
    filler, short = divmod(max(input_len - overhead, 0), per_unit)
    return ChatSizing(overhead, per_unit, filler, exact=short == 0 and input_len > overhead)


async def size_chat_prompts(gen: LoadGenerator, input_len: int) -> ChatSizing:
    """Probe the server twice and size chat prompts to ``input_len`` prompt tokens."""
    counts = []
    for k, filler in enumerate(PROBE_FILLERS):
        rec = await gen.request(-2 - k, chat_prompt(PROBE_INDEX + k, filler), 1)
        if rec.prompt_tokens <= 0 and not rec.ok:  # EOS at once is fine: usage still came
            raise ChatSizingError(f"chat sizing probe to {gen.base_url} failed: {rec.error}")
        if rec.prompt_tokens <= 0:
            raise ChatSizingError(
                f"{gen.base_url} reported no usage.prompt_tokens for a chat request, so chat "
                "prompts cannot be sized to input_len"
            )
        counts.append(rec.prompt_tokens)
    return solve((counts[0], counts[1]), input_len)
