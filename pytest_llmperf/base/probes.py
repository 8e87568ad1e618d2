"""A launch's answers to the greedy probe prompts, as results files and baselines keep them.

``outputs[i]`` is probe ``i``'s greedy answer: its token ids where the server returns them
(SGLang's ``/generate`` ``output_ids``), else its text (the OpenAI API's completion text has no
ids), whose positions are then characters. ``deterministic`` is what the server declared
(SGLang's ``enable_deterministic_inference`` in ``/server_info``): with it, any difference
between two answers is a changed model, not batching.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

ProbeUnit = Literal["token", "char"]


class ProbeSet(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int
    max_new_tokens: int = Field(ge=1)
    unit: ProbeUnit = "token"  # what a position counts: token ids, or characters of text
    deterministic: bool = False
    outputs: list[list[int] | str]

    def same_prompts(self, other: ProbeSet) -> bool:
        """Whether two sets answered the same prompts the same way (comparable at all)."""
        return (self.seed, self.max_new_tokens, self.unit, len(self.outputs)) == (
            other.seed,
            other.max_new_tokens,
            other.unit,
            len(other.outputs),
        )
