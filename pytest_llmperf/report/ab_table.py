"""A/B results: the ``ab.json`` file next to ``results.json``, and its tables.

One row per (A/B, level): rounds, both servers' mean, the paired change with its CI, the A/A
band (the same rounds split, each server against itself: what "no change" looks like on this
runner) and the verdict; the Markdown table goes to ``$GITHUB_STEP_SUMMARY`` like the run's
other tables.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator, model_validator
from tabulate import tabulate

from pytest_llmperf.verdicts.accuracy import AccuracyComparison
from pytest_llmperf.verdicts.verdict import Verdict, parse_verdict

# 2: verdicts in the one lower-case vocabulary (``Verdict``) and a point's A/B named ``ab``;
# 1 wrote upper-case verdicts and ``compare``, and is still read.
AB_SCHEMA_VERSION: Literal[2] = 2
AB_FILE_NAME = "ab.json"


class ABPoint(BaseModel):
    """One judged A/B point as written to ``ab.json``: the verdict and every round's values."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ab: str  # the [[ab]] entry's label
    candidate: str
    reference: str
    metric: str
    concurrency: int
    rounds: int
    order: list[list[str]]
    # per round; None where that round's level was invalid (left out of the pairs)
    candidate_values: list[float | None]
    reference_values: list[float | None]
    change: float
    ci_low: float
    ci_high: float
    confidence: float
    tolerance: float
    adjust: str
    verdict: Verdict
    message: str
    # The A/A band: the same rounds split, each server against itself (verdicts/paired.aa_band):
    # the interval of a change that is no change, and how many self-pairs it rests on.
    aa_low: float | None = None
    aa_high: float | None = None
    aa_pairs: int = 0
    # the accuracy probe (``accuracy_items``): candidate against reference on the same items
    accuracy: AccuracyComparison | None = None
    # The greedy consistency probes (absent with probes off, and in older files): their
    # verdict, the probes candidate answered differently from every reference launch of those
    # compared, and the A/A: the probes the reference's own launches answered differently.
    consistency: Verdict | None = None
    probes_differing: int | None = None
    probes_compared: int | None = None
    probes_aa_differing: int | None = None
    probes_aa_compared: int | None = None
    # Sequential rounds (absent with fixed rounds, and in older files): the most rounds, the
    # rounds run, and those of the look that decided this level (None: undecided).
    budget: int | None = None
    rounds_run: int | None = None
    decided_after: int | None = None
    adjusted: bool = False  # judged launch-adjusted (adjust = "launch", or chosen by "auto")
    # what the verdict vouches for (verdicts/green.py), and the largest regression not ruled out
    green_means: str | None = None
    missable: float | None = None
    # With more than one pass a launch (``[[ab]] passes``): the passes, and each round's pass
    # values per side (the round values above are their medians); absent with one pass.
    passes: int | None = None
    candidate_passes: list[list[float | None]] | None = None
    reference_passes: list[list[float | None]] | None = None

    _verdict = field_validator("verdict", "consistency", mode="before")(parse_verdict)

    def rounds_cell(self) -> str:
        """ "3 of 6" (decided after 3 rounds of a budget of 6), "6 of 6 (undecided)", or "4"."""
        if self.budget is None:
            return str(self.rounds)
        if self.decided_after is None:
            return f"{self.rounds_run} of {self.budget} (undecided)"
        return f"{self.decided_after} of {self.budget}"

    def outputs_cell(self) -> str:
        if self.consistency is None:
            return "-"
        if self.probes_compared is None or not self.probes_compared:
            return str(self.consistency)
        aa = f" (A/A {self.probes_aa_differing}/{self.probes_aa_compared})"
        return f"{self.probes_differing}/{self.probes_compared} differ{aa} {self.consistency}"

    @model_validator(mode="before")
    @classmethod
    def _schema_1(cls, data: Any) -> Any:
        if isinstance(data, dict) and "compare" in data and "ab" not in data:
            data = {("ab" if k == "compare" else k): v for k, v in data.items()}
        return data


class ABFile(BaseModel):
    """``ab.json``: a session's A/B points, next to ``results.json``."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1, 2] = AB_SCHEMA_VERSION
    points: list[ABPoint]


def _pct(x: float) -> str:
    return f"{x * 100:+.1f} %"


def _mean(values: Sequence[float | None]) -> str:
    valid = [v for v in values if v is not None]
    return f"{statistics.fmean(valid):.1f}" if valid else "-"


def _band(p: ABPoint) -> str:
    if p.aa_low is None or p.aa_high is None:
        return "-"
    return f"{_pct(p.aa_low)} \u2026 {_pct(p.aa_high)} ({p.aa_pairs} pairs)"


def _accuracy(p: ABPoint) -> str:
    a = p.accuracy
    if a is None or a.old is None:
        return "-"
    return f"{a.old.score:.2f} \u2192 {a.new.score:.2f} {a.verdict}"


def ab_rows(points: Sequence[ABPoint]) -> list[list[str]]:
    rows = []
    probed = any(p.consistency is not None for p in points)
    for p in sorted(points, key=lambda p: (p.ab, p.concurrency)):
        rows.append(
            [
                p.ab,
                str(p.concurrency),
                p.rounds_cell(),
                _mean(p.reference_values),
                _mean(p.candidate_values),
                _pct(p.change),
                f"{_pct(p.ci_low)} \u2026 {_pct(p.ci_high)}",
                _band(p),
                f"{p.verdict}{' (launch-adjusted)' if p.adjusted or p.adjust == 'launch' else ''}",
            ]
            + ([_accuracy(p)] if any(q.accuracy for q in points) else [])
            + ([p.outputs_cell()] if probed else [])
        )
    return rows


def ab_table(points: Sequence[ABPoint], *, tablefmt: str = "simple") -> str:
    """The A/B table; ``tablefmt="github"`` for Markdown."""
    if not points:
        return ""
    metric = points[0].metric if len({p.metric for p in points}) == 1 else "metric"
    headers = ["ab", "C", "rounds", f"reference {metric}", f"candidate {metric}"]
    ci = f"{points[0].confidence * 100:g} % CI"
    ci += " (any stop)" if any(p.budget is not None for p in points) else ""  # sequential
    headers += ["change", ci, "A/A band", "verdict"]
    headers += ["accuracy"] if any(p.accuracy for p in points) else []
    if any(p.consistency is not None for p in points):
        headers.append("greedy outputs")
    return tabulate(ab_rows(points), headers=headers, tablefmt=tablefmt, disable_numparse=True)


def green_lines(points: Sequence[ABPoint]) -> list[str]:
    """What each A/B verdict vouches for, one line a point ("- new-vs-old: pass: no ...")."""
    return [
        f"- {p.ab}: {p.green_means}"
        for p in sorted(points, key=lambda p: (p.ab, p.concurrency))
        if p.green_means
    ]


def ab_markdown(points: Sequence[ABPoint]) -> str:
    if not points:
        return ""
    out = "### llmperf A/B (paired rounds)\n\n" + ab_table(points, tablefmt="github") + "\n"
    green = green_lines(points)
    if green:
        out += "\n#### what green means\n\n" + "\n".join(green) + "\n"
    return out


def save_ab(points: Sequence[ABPoint], path: str | os.PathLike[str]) -> None:
    """Write ``ab.json`` atomically (a reader never sees half a file)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(ABFile(points=list(points)).model_dump_json(indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, target)


def load_ab(path: str | os.PathLike[str]) -> ABFile:
    return ABFile.model_validate_json(Path(path).read_text(encoding="utf-8"))
