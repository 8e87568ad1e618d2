"""A/B results: the ``ab.json`` file next to ``results.json``, and its tables.

One row per (compare, level): rounds, both servers' mean, the paired change with its CI, and
the verdict; the Markdown table goes to ``$GITHUB_STEP_SUMMARY`` like the run's other tables.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict
from tabulate import tabulate

AB_SCHEMA_VERSION = 1
AB_FILE_NAME = "ab.json"


class ABPoint(BaseModel):
    """One judged A/B point as written to ``ab.json``: the verdict and every round's values."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    compare: str
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
    verdict: str
    message: str


class ABFile(BaseModel):
    """``ab.json``: a session's A/B points, next to ``results.json``."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = AB_SCHEMA_VERSION
    points: list[ABPoint]


def _pct(x: float) -> str:
    return f"{x * 100:+.1f} %"


def _mean(values: Sequence[float | None]) -> str:
    valid = [v for v in values if v is not None]
    return f"{statistics.fmean(valid):.1f}" if valid else "-"


def ab_rows(points: Sequence[ABPoint]) -> list[list[str]]:
    rows = []
    for p in sorted(points, key=lambda p: (p.compare, p.concurrency)):
        rows.append(
            [
                p.compare,
                str(p.concurrency),
                str(p.rounds),
                _mean(p.reference_values),
                _mean(p.candidate_values),
                _pct(p.change),
                f"{_pct(p.ci_low)} \u2026 {_pct(p.ci_high)}",
                f"{p.verdict}{' (launch-adjusted)' if p.adjust == 'launch' else ''}",
            ]
        )
    return rows


def ab_table(points: Sequence[ABPoint], *, tablefmt: str = "simple") -> str:
    """The A/B table; ``tablefmt="github"`` for Markdown."""
    if not points:
        return ""
    metric = points[0].metric if len({p.metric for p in points}) == 1 else "metric"
    headers = ["compare", "C", "rounds", f"reference {metric}", f"candidate {metric}"]
    headers += ["change", f"{points[0].confidence * 100:g} % CI", "verdict"]
    return tabulate(ab_rows(points), headers=headers, tablefmt=tablefmt, disable_numparse=True)


def ab_markdown(points: Sequence[ABPoint]) -> str:
    if not points:
        return ""
    return "### llmperf A/B (paired rounds)\n\n" + ab_table(points, tablefmt="github") + "\n"


def save_ab(points: Sequence[ABPoint], path: str | os.PathLike[str]) -> None:
    """Write ``ab.json`` atomically (a reader never sees half a file)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(ABFile(points=list(points)).model_dump_json(indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, target)


def load_ab(path: str | os.PathLike[str]) -> ABFile:
    return ABFile.model_validate_json(Path(path).read_text(encoding="utf-8"))
