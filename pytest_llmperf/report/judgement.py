"""What a results file says each test judged (``Judgement``) and what each config took.

A ``Judgement`` carries the settings the test resolved for itself (marker > CLI > env > ini >
suite > default), so ``llmperf compare`` judges the same point of the same workload the same
way, and for a point what its verdict can vouch for (``verdicts/green.py``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from pytest_llmperf.verdicts.accuracy import AccuracyComparison
from pytest_llmperf.verdicts.consistency import Consistency
from pytest_llmperf.verdicts.gates import Gate
from pytest_llmperf.verdicts.validity import ValidityPolicy
from pytest_llmperf.verdicts.verdict import Verdict

__all__ = ["Judgement", "Took"]


class Judgement(BaseModel):
    """One check a test of the pytest run made, with the settings that test resolved for itself
    (marker > CLI > env > ini > suite > default) and the verdict it reached, so ``llmperf
    compare`` judges the same point of the same workload the same way."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["point", "gate", "crossover"]
    nodeid: str
    config: str
    workload: str  # Workload.key() of the sweep it judged
    concurrency: int | None = None  # None for a whole-sweep check (crossover)
    verdict: Verdict
    metrics: list[str] | None = None
    tolerances: dict[str, float] = Field(default_factory=dict)
    policy: ValidityPolicy = Field(default_factory=ValidityPolicy)
    adjust: str = "none"
    # point: the sequential rule's launch budget it was judged at (None: the plain rule)
    looks: int | None = None
    gate: Gate | None = None
    reference: str | None = None  # crossover: the other config
    metric: str | None = None  # crossover: the metric compared
    name: str | None = None  # crossover: its name in the suite
    green_means: str | None = None  # point: the regression its verdict could have missed
    accuracy: AccuracyComparison | None = None  # point: the accuracy probe's verdict
    # point: the greedy probes against the entry's answers (None: off, or none to judge)
    consistency: Consistency | None = None
    missable: dict[str, float] = Field(default_factory=dict)  # point: per metric, relative

    @property
    def label(self) -> str:
        return self.nodeid or f"{self.kind} {self.config} {self.workload} C={self.concurrency}"


class Took(BaseModel):
    """What reaching a config's verdicts took: server launches and seconds spent launching and
    measuring it (the header predicted a range for them before the first launch)."""

    model_config = ConfigDict(extra="forbid")

    launches: int
    seconds: float
