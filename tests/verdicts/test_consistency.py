"""The consistency rule (``verdicts/consistency.py``): the per-probe permutation test against
the old side's own spread, its false-alarm rate under random drift, its power against a
changed share, and the stored form of probe answers."""

from __future__ import annotations

import random

import pytest

from pytest_llmperf.base.probes import ProbeSet
from pytest_llmperf.verdicts.baseline_file import BaselineEntry, MetricSummary
from pytest_llmperf.verdicts.consistency import (
    ALPHA,
    _probe_null,
    first_difference,
    judge_consistency,
    permutation_p,
)
from pytest_llmperf.verdicts.verdict import Verdict

PROBES, TOKENS = 32, 16


def _truth(seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(1000) for _ in range(TOKENS)] for _ in range(PROBES)]


def _launch(truth: list[list[int]], rng: random.Random, drift: float, changed=()) -> ProbeSet:
    """One launch's answers: ``changed`` probes answer differently from token 3 on in every
    launch; any probe drifts (a random token changes, and the rest) with ``drift``."""
    outs = []
    for i, ans in enumerate(truth):
        a = list(ans)
        if i in changed:
            a[3:] = [5000 + i] * (TOKENS - 3)
        if rng.random() < drift:
            pos = rng.randrange(TOKENS)
            a[pos:] = [rng.randrange(10**6) for _ in range(TOKENS - pos)]
        outs.append(a)
    return ProbeSet(seed=1, max_new_tokens=TOKENS, outputs=outs)


def test_probe_null_is_the_relabelling_distribution() -> None:
    # Two answers of each kind, 2 old and 2 new: 2 of 6 labellings split them by side.
    assert _probe_null([[1], [1], [2], [2]], 2) == pytest.approx({4: 1 / 3, 2: 2 / 3})
    # One odd answer: every labelling gives the same count (says nothing).
    assert _probe_null([[1], [1], [1], [3]], 2) == {2: 1.0}
    assert _probe_null([[1]] * 4 + [[2]] * 4, 4)[16] == pytest.approx(2 / 70)


def test_first_difference_positions() -> None:
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 9, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2  # a prefix differs where it ends
    assert first_difference("abc", "abd") == 2


@pytest.mark.parametrize("rounds", [2, 4])
def test_false_alarms_stay_below_alpha_under_drift(rounds: int) -> None:
    rng = random.Random(11)
    truth = _truth(3)
    runs = 400
    fails = 0
    for _ in range(runs):
        old = [_launch(truth, rng, 0.1) for _ in range(rounds)]
        new = [_launch(truth, rng, 0.1) for _ in range(rounds)]
        fails += judge_consistency(old, new, old_label="o", new_label="n").verdict == Verdict.FAIL
    # At most alpha in expectation; 400 runs at 1 % allow a few by chance, not 4 %.
    assert fails <= 16, fails


@pytest.mark.parametrize(("rounds", "need"), [(2, 0.95), (4, 1.0)])
def test_a_quarter_changed_is_caught(rounds: int, need: float) -> None:
    rng = random.Random(12)
    truth = _truth(4)
    changed = set(range(0, PROBES, 4))  # 8 of 32
    caught = 0
    for _ in range(100):
        old = [_launch(truth, rng, 0.03) for _ in range(rounds)]
        new = [_launch(truth, rng, 0.03, changed) for _ in range(rounds)]
        res = judge_consistency(old, new, old_label="old", new_label="new")
        caught += res.verdict == Verdict.FAIL
    assert caught >= need * 100, caught
    assert res.differing >= 8 and res.compared == PROBES
    assert "8 of 32" in res.message or f"{res.differing} of 32" in res.message
    assert "first difference: probe 0 at token 3" in res.message or res.first is not None


def test_message_names_share_first_probe_and_position() -> None:
    truth = _truth(5)
    rng = random.Random(0)
    old = [_launch(truth, rng, 0.0) for _ in range(3)]
    new = [_launch(truth, rng, 0.0, {6, 9, 12, 20, 30})]
    res = judge_consistency(old, new, old_label="the baseline", new_label="this run")
    assert res.verdict == Verdict.FAIL and res.p_value is not None and res.p_value < ALPHA
    assert res.message.startswith(
        "consistency: 5 of 32 greedy probes answered differently by this run than by the "
        "baseline (3 vs 1 launches; A/A: the baseline disagreed with itself on 0 of 32)"
    )
    assert f"first difference: probe 6 at token 3 ({truth[6][3]} vs 5006)" in res.message
    assert (res.first.probe, res.first.position) == (6, 3) if res.first else False
    assert res.mean_position == 3.0


def test_one_launch_each_uses_the_allowance() -> None:
    truth = _truth(6)
    rng = random.Random(0)
    old = [_launch(truth, rng, 0.0)]
    two = judge_consistency(old, [_launch(truth, rng, 0.0, {1, 2})], old_label="o", new_label="n")
    assert two.verdict == Verdict.PASS and "no A/A measured" in two.message
    assert permutation_p(old, [_launch(truth, rng, 0.0)]) is None
    many = judge_consistency(
        old, [_launch(truth, rng, 0.0, set(range(10)))], old_label="o", new_label="n"
    )
    assert many.verdict == Verdict.FAIL and "allowed without A/A" in many.message


def test_deterministic_fails_any_difference() -> None:
    truth = _truth(7)
    rng = random.Random(0)
    old = [_launch(truth, rng, 0.0).model_copy(update={"deterministic": True}) for _ in range(2)]
    new = [_launch(truth, rng, 0.0, {17}).model_copy(update={"deterministic": True})]
    res = judge_consistency(old, new, old_label="o", new_label="n")
    assert res.verdict == Verdict.FAIL and "any difference fails" in res.message
    assert "probe 17 at token 3" in res.message
    same = judge_consistency(old, old[:1], old_label="o", new_label="n")
    assert same.verdict == Verdict.PASS


def test_different_probe_sets_are_invalid() -> None:
    a = ProbeSet(seed=1, max_new_tokens=4, outputs=[[1, 2]])
    b = ProbeSet(seed=2, max_new_tokens=4, outputs=[[1, 2]])
    res = judge_consistency([a], [b], old_label="o", new_label="n")
    assert res.verdict == Verdict.INVALID and "seed 1 vs 2" in res.message


def test_entry_keeps_probes_compactly_and_old_entries_unchanged() -> None:
    m = {"output_throughput": MetricSummary(mean=1.0, std=0.0, n=1, direction="higher")}
    plain = BaselineEntry(metrics=m)
    dumped = plain.model_dump(mode="json")
    assert "probes" not in dumped and "accuracy" not in dumped
    assert BaselineEntry.model_validate(dumped) == plain
    ps = ProbeSet(seed=1, max_new_tokens=3, outputs=[[1, 2, 3], [4]])
    entry = plain.model_copy(update={"probes": [ps]})
    data = entry.model_dump(mode="json")
    assert data["probes"][0]["outputs"] == ["1 2 3", "4"]  # one line per probe in a diff
    assert BaselineEntry.model_validate(data).probes == [ps]
