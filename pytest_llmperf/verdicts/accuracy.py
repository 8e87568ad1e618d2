"""The accuracy probe's verdict: is a server's score on the generated items lower than before?

A faster server that answers worse must not pass (a change once raised a server's throughput
by a third while its GSM8K score fell from 0.81 to 0.61). Both sides answer the same items
(same generator version, seed and count), greedily, so each item is a pair: the right test is
McNemar's, exact and one-sided, on the items only one side got right. It fails when the drop
is beyond the statistical error (p below ``ALPHA``) and at least ``drop`` (the smallest drop
that matters, the ``accuracy_drop`` setting); it is inconclusive when the items are too few to
ever show a drop of that size, when the sides answered different items, or when the reference
side answers at chance (random weights: the probe then measures nothing).
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, model_validator
from scipy.stats import binomtest

from pytest_llmperf.verdicts.stats import NoiseRule
from pytest_llmperf.verdicts.verdict import Verdict

__all__ = [
    "ALPHA",
    "CHANCE",
    "AccuracyComparison",
    "AccuracyRecord",
    "compare_accuracy",
    "min_items",
    "wilson",
]

ALPHA = NoiseRule().mw_alpha  # the one significance level of the project's verdicts
CHANCE = 0.05  # a reference score below this: the model answers at chance


class AccuracyRecord(BaseModel):
    """One side's answers to the generated items: which were right, and which items."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    items_version: int = Field(ge=1)
    seed: int
    n: int = Field(ge=1)
    correct: int = Field(ge=0)
    # "1" where item i was answered right, "0" where not, in item order
    bitmap: str = Field(pattern=r"^[01]+$")
    failed: int = Field(default=0, ge=0)  # requests with no answer (counted as wrong)

    @model_validator(mode="after")
    def _consistent(self) -> AccuracyRecord:
        if len(self.bitmap) != self.n:
            raise ValueError(f"bitmap has {len(self.bitmap)} items but n={self.n}")
        if self.bitmap.count("1") != self.correct:
            raise ValueError(
                f"bitmap has {self.bitmap.count('1')} right but correct={self.correct}"
            )
        return self

    @classmethod
    def of(
        cls, right: list[bool], *, items_version: int, seed: int, failed: int = 0
    ) -> AccuracyRecord:
        bitmap = "".join("1" if r else "0" for r in right)
        return cls(items_version=items_version, seed=seed, n=len(right),
                   correct=sum(right), bitmap=bitmap, failed=failed)  # fmt: skip

    @property
    def score(self) -> float:
        return self.correct / self.n

    def items(self) -> tuple[int, int, int]:
        return (self.items_version, self.seed, self.n)

    def describe(self, label: str) -> str:
        lo, hi = wilson(self.correct, self.n)
        return (
            f"{self.correct} of {self.n} on {label} ({self.score:.2f}, 95 % CI {lo:.2f}-{hi:.2f})"
        )


class AccuracyComparison(BaseModel):
    """The accuracy verdict of one side against the other, as results and ab.json keep it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    new: AccuracyRecord
    old: AccuracyRecord | None
    verdict: Verdict
    message: str
    drop: float | None = None  # old score - new score (positive: worse)
    p_value: float | None = None  # McNemar exact, one-sided (new worse)
    chance: bool = False  # the reference side answered at chance: the probe means nothing


def wilson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a proportion k/n."""
    if n <= 0:
        return (0.0, 1.0)
    z = _z(confidence)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def _z(confidence: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(0.5 + confidence / 2)


def min_items(drop: float, alpha: float = ALPHA) -> int:
    """The fewest items on which a drop of ``drop`` can ever be significant: even with every
    disagreement going one way, k items lost reach p = 0.5**k, which must be below ``alpha``."""
    k = math.ceil(math.log(1 / alpha, 2) + 1e-12)
    return math.ceil(k / drop - 1e-9)


def compare_accuracy(
    new: AccuracyRecord,
    old: AccuracyRecord | None,
    *,
    drop: float,
    new_label: str = "new",
    old_label: str = "old",
    alpha: float = ALPHA,
) -> AccuracyComparison:
    """``new`` against ``old`` on the same items (``old`` None: nothing to compare with)."""
    smallest = drop
    head = f"accuracy: {new.describe(new_label).replace(' on ', ' generated items right on ', 1)}"

    def out(
        verdict: Verdict,
        tail: str,
        drop: float | None = None,
        p_value: float | None = None,
        chance: bool = False,
    ) -> AccuracyComparison:
        return AccuracyComparison(new=new, old=old, verdict=verdict, message=f"{head}{tail}",
                                  drop=drop, p_value=p_value, chance=chance)  # fmt: skip

    if new.failed:
        return out(Verdict.INVALID, f": {new.failed} of its requests got no answer, so this is "
                   "not an accuracy verdict")  # fmt: skip
    if old is None:
        return out(Verdict.MISSING, f": no answers recorded for {old_label} to compare with")
    against = f" against {old.describe(old_label)}"
    if new.items() != old.items():
        return out(Verdict.INCONCLUSIVE, f"{against}: the sides answered different items "
                   f"(generator version, seed, count {new.items()} vs {old.items()}); "
                   "re-record the baseline")  # fmt: skip
    lost = sum(1 for a, b in zip(new.bitmap, old.bitmap, strict=True) if a == "0" and b == "1")
    won = sum(1 for a, b in zip(new.bitmap, old.bitmap, strict=True) if a == "1" and b == "0")
    p = binomtest(lost, lost + won, 0.5, alternative="greater").pvalue if lost + won else 1.0
    d = old.score - new.score
    points = f"{abs(d) * 100:.0f} points"
    if old.score < CHANCE:
        warning = (
            f"accuracy probe: {old_label} side scored {old.correct} of {old.n} \u2014 the model "
            "answers at chance (random weights?); the accuracy check is inconclusive"
        )
        return out(Verdict.INCONCLUSIVE, f"{against}; {warning}", drop=d, p_value=p, chance=True)
    test = f"(McNemar p={p:.2g})"
    if p < alpha and d >= smallest:
        return out(Verdict.FAIL, f"{against}: a drop of {points}, beyond the interval {test} "
                   "\u2192 fail", drop=d, p_value=p)  # fmt: skip
    if p < alpha:
        small = f"but below accuracy_drop {smallest * 100:g} points"
        return out(Verdict.PASS, f"{against}: a drop of {points}, beyond the interval {test} "
                   f"{small} \u2192 pass", drop=d, p_value=p)  # fmt: skip
    need = min_items(smallest, alpha)
    if new.n < need:
        return out(Verdict.INCONCLUSIVE, f"{against}: {new.n} items cannot show a drop of "
                   f"{smallest * 100:g} points at p<{alpha:g} (at least {need} needed: raise "
                   "accuracy_items) \u2192 inconclusive", drop=d, p_value=p)  # fmt: skip
    change = f"a drop of {points}" if d > 0 else f"a change of {d * -100:+.0f} points"
    return out(Verdict.PASS, f"{against}: {change}, within the interval {test} \u2192 pass",
               drop=d, p_value=p)  # fmt: skip
