"""Output consistency: do two servers give the same greedy answers to the same probes?

A faster release that answers differently is not a speed-up. Each launch answers the seeded
probes (``core/probes.py``); the old side's launches (A/B rounds of the reference, or a
baseline's recording launches) and the new side's are compared probe by probe. SGLang's
temperature 0 is not deterministic under dynamic batching and the radix cache, so two launches
of one unchanged server can answer a probe differently now and then: that A/A spread must not
be called a regression.

The rule (with several launches in all): an exact permutation test per probe. If nothing
changed, a probe's answers from all launches are exchangeable: which of them came from the new
side is an arbitrary labelling. The statistic is the number of (old launch, new launch) answer
pairs that differ, summed over probes; its null distribution is that of every relabelling of
each probe's answers (exact, probe by probe, then convolved over probes). Batching drift
changes one launch's answer to a probe now and then, which relabelling explains; a changed
model changes the probe's answer in every new launch while the old launches keep theirs, which
only a few relabellings reproduce (2 of 70 per probe with 4 rounds each). So a probe whose old
answers agree and whose new answers all differ is strong evidence, and a handful of such probes
fails, while the false-alarm rate stays at most ``alpha`` whatever the drift rate. The
assumption is that drift hits probes independently (they are short, distinct prompts).

With one launch on each side nothing can be relabelled: the share of probes answered
differently then fails when an exact binomial test rejects "at most ``NO_AA_ALLOWANCE``" at
``alpha`` (record baselines with ``baseline_repeat`` >= 2 to have an A/A). With deterministic
inference declared by both sides, batching cannot explain a difference, so any probe answered
differently fails.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats

from pytest_llmperf.base.probes import ProbeSet
from pytest_llmperf.verdicts.verdict import Verdict

__all__ = [
    "ALPHA",
    "NO_AA_ALLOWANCE",
    "Consistency",
    "Difference",
    "first_difference",
    "judge_consistency",
    "permutation_p",
]

# The share of probes tolerated to differ when each side has one launch (no A/A): a few
# drifting probes pass, a changed model (a quarter of the probes) fails.
NO_AA_ALLOWANCE = 0.10
ALPHA = 0.01

Answer = Sequence[int] | str


@dataclass(frozen=True)
class Difference:
    probe: int
    position: int  # the first token (or character) that differs
    old: int | str | None  # None: that answer ended there
    new: int | str | None


def first_difference(old: Answer, new: Answer) -> int | None:
    """The first position where two answers differ (a prefix differs at its end), else None."""
    for i, (a, b) in enumerate(zip(old, new, strict=False)):
        if a != b:
            return i
    return None if len(old) == len(new) else min(len(old), len(new))


def _difference(probe: int, old: Answer, new: Answer) -> Difference | None:
    pos = first_difference(old, new)
    if pos is None:
        return None
    return Difference(
        probe, pos, old[pos] if pos < len(old) else None, new[pos] if pos < len(new) else None
    )


@dataclass(frozen=True)
class Consistency:
    verdict: Verdict
    message: str
    differing: int  # probes the new side answered differently from every old launch
    compared: int  # probes compared
    aa_differing: int  # probes the old side's own launches answered differently
    aa_compared: int  # probes whose A/A was measured (0: one old launch)
    mean_position: float | None  # mean first-difference position of the differing probes
    aa_mean_position: float | None
    first: Difference | None
    p_value: float | None = None


def _key(answer: Answer) -> tuple[int | str, ...] | str:
    return answer if isinstance(answer, str) else tuple(answer)


def _probe_null(answers: Sequence[Answer], n_new: int) -> dict[int, float]:
    """The distribution of the number of differing (old, new) pairs of one probe over every
    choice of which ``n_new`` of its ``answers`` are the new side's (each equally likely)."""
    counts = list(Counter(_key(a) for a in answers).values())
    n_old = len(answers) - n_new
    # ways[(chosen, same)]: choices of ``chosen`` new answers from the classes so far, with
    # ``same`` (old, new) pairs that agree; a class of m answers with j chosen adds j*(m-j).
    ways: dict[tuple[int, int], int] = {(0, 0): 1}
    for m in counts:
        nxt: dict[tuple[int, int], int] = {}
        for (chosen, same), w in ways.items():
            for j in range(min(m, n_new - chosen) + 1):
                k = (chosen + j, same + j * (m - j))
                nxt[k] = nxt.get(k, 0) + w * math.comb(m, j)
        ways = nxt
    total = math.comb(len(answers), n_new)
    return {
        n_old * n_new - same: w / total for (chosen, same), w in ways.items() if chosen == n_new
    }


def permutation_p(old: Sequence[ProbeSet], new: Sequence[ProbeSet]) -> float | None:
    """One-sided p-value of the per-probe permutation test (module docstring); None when no
    relabelling is possible (one launch on each side)."""
    n_old, n_new = len(old), len(new)
    if n_old + n_new < 3:
        return None
    observed = 0
    dist: dict[int, float] = {0: 1.0}
    for i in range(len(old[0].outputs)):
        o = [s.outputs[i] for s in old]
        n = [s.outputs[i] for s in new]
        null = _probe_null([*o, *n], n_new)
        if len(null) == 1:
            continue  # every relabelling gives this probe's count: it says nothing
        observed += sum(_key(a) != _key(b) for a in o for b in n)
        conv: dict[int, float] = {}
        for t, p in dist.items():
            for u, q in null.items():
                conv[t + u] = conv.get(t + u, 0.0) + p * q
        dist = conv
    return min(1.0, sum(p for t, p in dist.items() if t >= observed))


def _mean(xs: Sequence[int]) -> float | None:
    return statistics.fmean(xs) if xs else None


def _invalid(message: str) -> Consistency:
    return Consistency(Verdict.INVALID, message, 0, 0, 0, 0, None, None, None)


def judge_consistency(
    old: Sequence[ProbeSet],
    new: Sequence[ProbeSet],
    *,
    old_label: str,
    new_label: str,
    deterministic: bool | None = None,
    alpha: float = ALPHA,
) -> Consistency:
    """Judge the ``new`` launches' answers against the ``old`` launches' (the rule in the
    module docstring). ``deterministic`` None: both sides' declarations decide."""
    if not old or not new:
        return Consistency(
            Verdict.MISSING, "consistency: no probe answers", 0, 0, 0, 0, None, None, None
        )
    ref = old[0]
    bad = next((s for s in (*old, *new) if not ref.same_prompts(s)), None)
    if bad is not None:
        return _invalid(
            f"consistency: {old_label} and {new_label} answered different probe sets (seed "
            f"{ref.seed} vs {bad.seed}, {len(ref.outputs)} vs {len(bad.outputs)} probes, "
            f"max_new_tokens {ref.max_new_tokens} vs {bad.max_new_tokens}, {ref.unit} vs "
            f"{bad.unit}): not comparable"
        )
    probes = len(ref.outputs)
    diffs: list[Difference] = []
    aa: list[Difference] = []
    for i in range(probes):
        olds = [s.outputs[i] for s in old]
        seen = {_key(a) for a in olds}
        changed = next((s.outputs[i] for s in new if _key(s.outputs[i]) not in seen), None)
        if changed is not None:
            # Where the new answer leaves the old answer it follows longest.
            got = [d for a in olds if (d := _difference(i, a, changed)) is not None]
            diffs.append(max(got, key=lambda d: d.position))
        odd = next((a for a in olds[1:] if _key(a) != _key(olds[0])), None)
        if odd is not None:
            d = _difference(i, olds[0], odd)
            if d is not None:
                aa.append(d)
    aa_compared = probes if len(old) >= 2 else 0
    if deterministic is None:
        deterministic = all(s.deterministic for s in (*old, *new))
    unit = ref.unit
    launches = f"{len(old)} vs {len(new)} launches"
    msg = (
        f"consistency: {len(diffs)} of {probes} greedy probes answered differently by "
        f"{new_label} than by {old_label} ({launches}"
    )
    if aa_compared:
        msg += f"; A/A: {old_label} disagreed with itself on {len(aa)} of {probes})"
    else:
        msg += "; no A/A measured)"
    p: float | None = None
    if deterministic:
        msg += " (deterministic inference declared: any difference fails)"
        verdict = Verdict.FAIL if diffs else Verdict.PASS
    else:
        p = permutation_p(old, new)
        if p is None:
            p = float(stats.binom.sf(len(diffs) - 1, probes, NO_AA_ALLOWANCE)) if diffs else 1.0
            rule = f"more than the {NO_AA_ALLOWANCE:.0%} allowed without A/A"
        else:
            rule = "beyond what relabelling the launches explains"
        verdict = Verdict.FAIL if p < alpha else Verdict.PASS
        if verdict == Verdict.FAIL:
            msg += f"; {rule} (exact p={p:.2g} < {alpha:g})"
    if diffs:
        first = diffs[0]
        msg += (
            f"; first difference: probe {first.probe} at {unit} {first.position} "
            f"({_show(first.old)} vs {_show(first.new)}); mean first difference at "
            f"{unit} {_mean([d.position for d in diffs]):.1f}"
        )
        if aa:
            msg += f" (A/A {_mean([d.position for d in aa]):.1f})"
    return Consistency(
        verdict,
        msg,
        len(diffs),
        probes,
        len(aa),
        aa_compared,
        _mean([d.position for d in diffs]),
        _mean([d.position for d in aa]),
        diffs[0] if diffs else None,
        p,
    )


def _show(x: int | str | None) -> str:
    return "end" if x is None else repr(x) if isinstance(x, str) else str(x)
