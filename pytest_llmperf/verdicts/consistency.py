"""Output consistency: do two servers give the same greedy answers to the same probes?

A faster release that answers differently is not a speed-up. Each launch answers the seeded
probes (``core/probes.py``); old and new are compared probe by probe (the share that differ,
where each first differs), and judged against the A/A spread measured the same way between two
launches of the old side (across A/B rounds, or a baseline's recording launches): SGLang's
temperature 0 is not deterministic under dynamic batching and the radix cache, so some
difference between two launches of one server is normal and must not be called a regression.

The rule: the new-vs-old difference share fails when a one-sided exact test rejects "the new
side differs no more often than A/A" at ``alpha`` (Fisher's exact test on the two counts; with
no A/A measured, an exact binomial test against ``NO_AA_ALLOWANCE``). At ``alpha`` = 1 % an
unchanged pair fails about once in a hundred runs at most, whatever its batching noise. With
deterministic inference declared by both servers, batching cannot explain a difference, so any
difference fails.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats

from pytest_llmperf.base.probes import ProbeSet
from pytest_llmperf.verdicts.verdict import Verdict

__all__ = [
    "NO_AA_ALLOWANCE",
    "Consistency",
    "Difference",
    "differences",
    "first_difference",
    "judge_consistency",
]

# The difference share tolerated when no A/A was measured (one launch of the old side): a
# few drifting probes pass, a changed model (a quarter of the probes) fails.
NO_AA_ALLOWANCE = 0.10
ALPHA = 0.01


@dataclass(frozen=True)
class Difference:
    probe: int
    position: int  # the first token (or character) that differs
    old: int | str | None  # None: that answer ended there
    new: int | str | None


def first_difference(old: Sequence[int] | str, new: Sequence[int] | str) -> int | None:
    """The first position where two answers differ (a prefix differs at its end), else None."""
    for i, (a, b) in enumerate(zip(old, new, strict=False)):
        if a != b:
            return i
    return None if len(old) == len(new) else min(len(old), len(new))


def differences(old: ProbeSet, new: ProbeSet) -> list[Difference]:
    out = []
    for i, (a, b) in enumerate(zip(old.outputs, new.outputs, strict=True)):
        pos = first_difference(a, b)
        if pos is not None:
            out.append(
                Difference(
                    i, pos, a[pos] if pos < len(a) else None, b[pos] if pos < len(b) else None
                )
            )
    return out


@dataclass(frozen=True)
class Consistency:
    verdict: Verdict
    message: str
    differing: int  # new-vs-old answers that differ
    compared: int
    aa_differing: int
    aa_compared: int
    mean_position: float | None  # mean first-difference position of the differing answers
    aa_mean_position: float | None
    first: Difference | None


def _mean(diffs: Sequence[Difference]) -> float | None:
    return statistics.fmean(d.position for d in diffs) if diffs else None


def _share(k: int, n: int) -> str:
    return f"{k} of {n}"


def _p_value(k: int, n: int, k_aa: int, n_aa: int) -> float:
    """One-sided: how likely ``k`` of ``n`` differing answers are if new differs no more
    often than A/A does."""
    if k == 0:
        return 1.0
    if n_aa == 0:
        return float(stats.binom.sf(k - 1, n, NO_AA_ALLOWANCE))
    table = [[k, n - k], [k_aa, n_aa - k_aa]]
    return float(stats.fisher_exact(table, alternative="greater").pvalue)


def judge_consistency(
    old: Sequence[ProbeSet],
    new: Sequence[ProbeSet],
    *,
    old_label: str,
    new_label: str,
    deterministic: bool | None = None,
    alpha: float = ALPHA,
) -> Consistency:
    """Judge ``new[r]`` against ``old[r]`` (pairs by position: one per A/B round, or each new
    launch against the one recorded set), with the A/A spread from consecutive ``old`` sets.
    ``deterministic`` None: both sides' declarations decide."""
    if not old or not new:
        return Consistency(
            Verdict.MISSING, "consistency: no probe answers", 0, 0, 0, 0, *[None] * 3
        )
    pairs = (
        list(zip(old, new, strict=False)) if len(old) == len(new) else [(old[0], n) for n in new]
    )
    bad = [(a, b) for a, b in pairs if not a.same_prompts(b)]
    if bad:
        a, b = bad[0]
        return Consistency(
            Verdict.INVALID,
            f"consistency: {old_label} and {new_label} answered different probe sets (seed "
            f"{a.seed} vs {b.seed}, {len(a.outputs)} vs {len(b.outputs)} probes, max_new_tokens "
            f"{a.max_new_tokens} vs {b.max_new_tokens}, {a.unit} vs {b.unit}): not comparable",
            0,
            0,
            0,
            0,
            None,
            None,
            None,
        )
    diffs = [d for a, b in pairs for d in differences(a, b)]
    aa_sets = [s for s in old if s.same_prompts(old[0])]
    aa = [d for a, b in zip(aa_sets, aa_sets[1:], strict=False) for d in differences(a, b)]
    n = sum(len(a.outputs) for a, _ in pairs)
    n_aa = sum(len(a.outputs) for a in aa_sets[1:])
    if deterministic is None:
        deterministic = all(s.deterministic for s in (*old, *new))
    unit = pairs[0][0].unit
    probes = len(pairs[0][0].outputs)
    what = "greedy probes" if len(pairs) == 1 else f"greedy probe answers ({probes} x {len(pairs)})"
    msg = f"consistency: {_share(len(diffs), n)} {what} differ between {old_label} and {new_label}"
    if deterministic:
        msg += " (deterministic inference declared: any difference fails)"
        verdict = Verdict.FAIL if diffs else Verdict.PASS
    else:
        msg += f" (A/A: {_share(len(aa), n_aa)})" if n_aa else " (no A/A measured)"
        p = _p_value(len(diffs), n, len(aa), n_aa)
        verdict = Verdict.FAIL if p < alpha else Verdict.PASS
        if verdict == Verdict.FAIL:
            base = "A/A" if n_aa else f"the {NO_AA_ALLOWANCE:.0%} allowed without A/A"
            msg += f"; more often than {base} (one-sided exact p={p:.2g})"
    first = diffs[0] if diffs else None
    if first is not None:
        msg += (
            f"; first difference: probe {first.probe} at {unit} {first.position} "
            f"({_show(first.old)} vs {_show(first.new)}); mean first difference at "
            f"{unit} {_mean(diffs):.1f}"
        )
    return Consistency(verdict, msg, len(diffs), n, len(aa), n_aa, _mean(diffs), _mean(aa), first)


def _show(x: int | str | None) -> str:
    return "end" if x is None else repr(x) if isinstance(x, str) else str(x)
