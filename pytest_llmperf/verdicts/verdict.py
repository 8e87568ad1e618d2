"""The one verdict vocabulary: what a judgement of a measurement concluded.

Every judge uses it: per-metric and per-point comparisons against a baseline
(``stats.decide``, ``compare.py``), gates, crossovers and SLOs, and the paired A/B rounds
(``paired.py``). Files (``results.json``, ``ab.json``) and tables write the member's value,
lower case, and nothing else. What pytest then does with a test (pass, fail, skip, warn) is a
separate thing, ``run/checks.py``'s ``Outcome``: it follows from the verdict and the invalid
policy (``--llmperf-invalid``), and ``--llmperf-update`` turns a judgement into ``RECORDED``.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

__all__ = ["Verdict", "parse_verdict", "worst"]


class Verdict(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    # the measurement cannot tell pass from fail at this noise: measure again / add rounds
    INCONCLUSIVE = "inconclusive"
    # the measurement is not a sample of speed (errors, a stalled or oversized level)
    INVALID = "invalid"
    MISSING = "missing"  # no baseline entry (fails like a missing syrupy snapshot)
    RECORDED = "recorded"  # --llmperf-update wrote this point's baseline (it passes)


_SEVERITY = {
    Verdict.PASS: 0,
    Verdict.RECORDED: 0,
    Verdict.INCONCLUSIVE: 1,
    Verdict.MISSING: 2,
    Verdict.FAIL: 3,
    Verdict.INVALID: 4,
}


def worst(verdicts: Iterable[Verdict]) -> Verdict:
    return max(verdicts, key=_SEVERITY.__getitem__, default=Verdict.PASS)


def parse_verdict(value: object) -> object:
    """A verdict as files of any schema version wrote it: older ``ab.json`` files (schema 1)
    spelled them in upper case. Anything else is returned as-is for the caller's validation."""
    if isinstance(value, str) and not isinstance(value, Verdict) and value.lower() in _VALUES:
        return Verdict(value.lower())
    return value


_VALUES = frozenset(v.value for v in Verdict)
