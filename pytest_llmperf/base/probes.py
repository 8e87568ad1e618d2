"""A launch's answers to the greedy probe prompts, as results files and baselines keep them.

``outputs[i]`` is probe ``i``'s greedy answer: its token ids where the server returns them
(SGLang's ``/generate`` ``output_ids``), else its text (the OpenAI API's completion text has no
ids), whose positions are then characters. ``deterministic`` is what the server declared
(SGLang's ``enable_deterministic_inference`` in ``/server_info``): with it, any difference
between two answers is a changed model, not batching.

In JSON (baseline files) a token answer is one string of space-separated ids, so a probe is one
line of a reviewable diff instead of one line per token; ``unit`` says how to read it back.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer, model_validator

ProbeUnit = Literal["token", "char"]


class ProbeSet(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int
    max_new_tokens: int = Field(ge=1)
    unit: ProbeUnit = "token"  # what a position counts: token ids, or characters of text
    deterministic: bool = False
    outputs: list[list[int] | str]

    @model_validator(mode="before")
    @classmethod
    def _token_strings(cls, data: Any) -> Any:
        """Token answers stored as id strings ("12 7 403") become id lists again."""
        if isinstance(data, dict) and data.get("unit", "token") == "token":
            outs = data.get("outputs")
            if isinstance(outs, list) and any(isinstance(o, str) for o in outs):
                try:
                    parsed = [
                        [int(t) for t in o.split()] if isinstance(o, str) else o for o in outs
                    ]
                except ValueError as exc:
                    raise ValueError(
                        f"outputs: a token answer is not space-separated ids: {exc}"
                    ) from None
                data = {**data, "outputs": parsed}
        return data

    @field_serializer("outputs", when_used="json")
    def _compact(self, outputs: list[list[int] | str]) -> list[str]:
        if self.unit == "token":
            return [" ".join(str(i) for i in o) for o in outputs]
        return [o if isinstance(o, str) else "" for o in outputs]

    def same_prompts(self, other: ProbeSet) -> bool:
        """Whether two sets answered the same prompts the same way (comparable at all)."""
        return (self.seed, self.max_new_tokens, self.unit, len(self.outputs)) == (
            other.seed,
            other.max_new_tokens,
            other.unit,
            len(other.outputs),
        )


class LaunchProbes(BaseModel):
    """One launch's answers as results.json keeps them, so that ``llmperf calibrate --record``
    (entries written from results files) stores them as a recording session would."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    config: str
    launch: str | None  # the launch id its levels carry (``LevelResult.launch``)
    backend: str  # the workload's backend it was asked through
    answers: ProbeSet
