"""The crossover read with its noise: ties inside the gates' margin, invalid levels, verdicts."""

from __future__ import annotations

import pytest

from pytest_llmperf.base.results import SweepResult
from pytest_llmperf.verdicts.baseline import BaselineStore, summarize
from pytest_llmperf.verdicts.baseline_file import SWEEP_LEVEL, BaselineEntry, EntryKey
from pytest_llmperf.verdicts.compare import Verdict
from pytest_llmperf.verdicts.crossover import CrossoverRule, compare_crossover, estimate_crossover
from pytest_llmperf.verdicts.stats import LaunchNoise

from . import MTP, PLAIN, make_level, make_sweep

PLAIN_SWEEP = make_sweep("plain", PLAIN)
MTP_SWEEP = make_sweep("mtp", MTP, cap=48, accept=2.0)


def _with_repeats(sweep: SweepResult, factors: dict[int, list[float]]) -> SweepResult:
    """Extra samples of some levels, each from its own launch, at ``factor`` × the first."""
    repeats = {}
    for c, fs in factors.items():
        first = sweep.level(c)
        assert first is not None
        repeats[c] = [
            make_level(c, first.output_throughput * f).model_copy(update={"launch": f"L{i}"})
            for i, f in enumerate(fs, 1)
        ]
    levels = [lv.model_copy(update={"launch": "L0"}) for lv in sweep.levels]
    return sweep.model_copy(update={"levels": levels, "repeats": repeats})


def test_clear_differences_give_a_point_crossover() -> None:
    est = estimate_crossover(MTP_SWEEP, PLAIN_SWEEP)
    # C=32: mtp 1502 vs plain 1359 (+10.5 %) beats the 5.7 % single-launch margin; C=64 loses 32 %.
    assert (est.value, est.low, est.high) == (32, 32, 32)
    assert est.ties == () and est.complete
    assert est.judge(32) == Verdict.PASS
    assert est.judge(64) == Verdict.FAIL
    assert est.judge(16) == Verdict.PASS


def test_a_sweep_that_stops_below_the_recorded_crossover_cannot_fail_it() -> None:
    """--llmperf-levels 1,4 on a suite whose crossover was recorded at C=32: mtp still wins at
    C=4, the largest level measured, so the run cannot say the crossover fell."""
    plain = make_sweep("plain", {1: 100, 4: 300})
    mtp = make_sweep("mtp", {1: 130, 4: 390})
    est = estimate_crossover(mtp, plain)
    assert (est.value, est.open_ended) == (4, True)
    assert est.judge(32) == Verdict.INCONCLUSIVE
    assert est.judge(4) == Verdict.PASS
    assert "the sweep stops at C=4 with no certain loss" in est.note()
    # A loss inside the measured levels is still a failure.
    lost = estimate_crossover(make_sweep("mtp", {1: 130, 4: 200}), plain)
    assert not lost.open_ended and lost.judge(32) == Verdict.FAIL


def test_a_level_inside_the_noise_makes_an_interval() -> None:
    plain = make_sweep("plain", {1: 100, 4: 300, 16: 900, 64: 2000})
    mtp = make_sweep("mtp", {1: 130, 4: 390, 16: 920, 64: 1500})  # C=16: +2.2 %, a tie
    est = estimate_crossover(mtp, plain)
    assert (est.value, est.low, est.high) == (16, 4, 16)
    assert est.ties == (16,)
    assert est.judge(16) == Verdict.INCONCLUSIVE  # could be 4, could be 16
    assert est.judge(4) == Verdict.PASS
    assert est.judge(64) == Verdict.FAIL  # even counting the tie as a win, it is below 64
    assert "C=16 (margin 5.7 %)" in est.note() and "C=4..C=16" in est.note()


def test_measured_launch_noise_widens_the_margin() -> None:
    plain = make_sweep("plain", {1: 100, 4: 300, 16: 900})
    mtp = make_sweep("mtp", {1: 130, 4: 390, 16: 1000})  # C=16: +11 %
    quiet = estimate_crossover(mtp, plain)
    assert (quiet.low, quiet.high) == (16, 16)
    # Three launches per side that scatter by ±20 %: the 11 % lead at C=16 is now a tie.
    noisy = estimate_crossover(
        _with_repeats(mtp, {16: [0.8, 1.2]}), _with_repeats(plain, {16: [1.2, 0.8]})
    )
    assert 16 in noisy.ties and noisy.low == 4 and noisy.high == 16


def test_an_invalid_level_on_the_walk_is_invalid_not_a_verdict() -> None:
    plain = make_sweep("plain", {1: 100, 4: 300, 16: 900})
    mtp = make_sweep("mtp", {1: 130, 4: 390, 16: 1000})
    bad = mtp.model_copy(
        update={"levels": [mtp.levels[0], make_level(4, 390, failed=3), mtp.levels[2]]}
    )
    est = estimate_crossover(bad, plain)
    assert not est.complete and est.invalid and "C=4 is invalid" in est.invalid[0]
    assert "mtp: " in est.invalid[0]
    assert est.judge(16) == Verdict.INVALID
    assert est.judge(1) == Verdict.PASS  # C=1 was won before the invalid level


def test_an_invalid_level_after_a_clear_loss_does_not_matter() -> None:
    plain = make_sweep("plain", {1: 100, 4: 300, 16: 900})
    mtp = make_sweep("mtp", {1: 130, 4: 200, 16: 1000})
    bad = mtp.model_copy(update={"levels": [*mtp.levels[:2], make_level(16, 1000, failed=3)]})
    est = estimate_crossover(bad, plain)
    assert est.complete and (est.low, est.high) == (1, 1)
    assert est.judge(4) == Verdict.FAIL


def test_compare_crossover_reports_the_interval(tmp_path) -> None:
    store = BaselineStore(tmp_path)
    key = EntryKey("hw", "mtp", PLAIN_SWEEP.workload.key(), SWEEP_LEVEL)
    summary = summarize("crossover_concurrency", [16.0], reference="plain")
    store.queue_update(key, BaselineEntry(metrics={"crossover_concurrency": summary}))
    store.flush()
    plain = make_sweep("plain", {1: 100, 4: 300, 16: 900, 64: 2000})
    mtp = make_sweep("mtp", {1: 130, 4: 390, 16: 920, 64: 1500})
    (res,) = compare_crossover(CrossoverRule("mtp", "plain"), [mtp, plain], store, "hw")
    assert res.verdict == Verdict.INCONCLUSIVE
    assert "inconclusive" in res.message and "C=4..C=16" in res.message
    clear = make_sweep("mtp", {1: 130, 4: 390, 16: 700, 64: 1500})
    (res,) = compare_crossover(CrossoverRule("mtp", "plain"), [clear, plain], store, "hw")
    assert res.verdict == Verdict.FAIL and "fell from C=16 to C=4" in res.message


def test_recorded_launch_noise_is_the_prior_of_one_launch_sides() -> None:
    from pytest_llmperf.verdicts.gates import Gate, evaluate_gate

    plain = make_sweep("plain", {1: 100, 4: 300, 16: 900})
    mtp = make_sweep("mtp", {1: 130, 4: 390, 16: 800})  # C=16: -11 %, one launch each
    gate = Gate(config="mtp", reference="plain", factor=1.0, where="C==16")
    assert evaluate_gate(gate, [mtp, plain]).verdict == Verdict.FAIL  # 2 % assumed: 5.7 %
    # Both baselines recorded launches 15 % apart: an 11 % gap between two single launches
    # is inside that noise (margin 2·√2·15 % = 42 %).
    noisy = evaluate_gate(gate, [mtp, plain], noise=lambda cfg, c, m: LaunchNoise(0.15, 3))
    assert noisy.verdict == Verdict.INCONCLUSIVE
    assert "inside the noise margin 42.4 %" in noisy.message()
    est = estimate_crossover(mtp, plain, noise=lambda cfg, c, m: LaunchNoise(0.15, 3))
    assert est.ties == (1, 4, 16) and (est.low, est.high) == (0, 16)


def test_the_store_gives_the_recorded_launch_spread(tmp_path) -> None:
    store = BaselineStore(tmp_path)
    key = EntryKey("hw", "plain", "w", 16)
    three = summarize("output_throughput", [85.0, 100.0, 115.0], launches=["a", "b", "c"])
    one = summarize("median_itl_ms", [3.0])
    store.queue_update(
        key, BaselineEntry(metrics={"output_throughput": three, "median_itl_ms": one})
    )
    store.flush()
    assert store.launch_noise(key, "output_throughput") == LaunchNoise(pytest.approx(0.15), 3)
    assert store.launch_noise(key, "median_itl_ms") is None
    assert store.launch_noise(EntryKey("hw", "plain", "w", 64), "output_throughput") is None


def test_two_launches_that_landed_close_do_not_shrink_the_margin() -> None:
    """After a re-run each side has two launches; their spread alone (1 % here, by chance) would
    make an 11 % gap look decisive under 15 % launch noise. Pooled with the recorded prior,
    the margin stays near the launch noise."""
    plain = _with_repeats(make_sweep("plain", {1: 100, 4: 300, 16: 900}), {16: [1.01]})
    mtp = _with_repeats(make_sweep("mtp", {1: 130, 4: 390, 16: 800}), {16: [0.99]})
    alone = estimate_crossover(mtp, plain)
    assert alone.margins[16] < 0.05 and alone.ties == ()
    pooled = estimate_crossover(mtp, plain, noise=lambda cfg, c, m: LaunchNoise(0.15, 3))
    assert pooled.margins[16] == pytest.approx(0.245, abs=1e-3) and 16 in pooled.ties
    assert LaunchNoise(0.15, 3).pooled_with(0.01, 2) == pytest.approx(0.1226, abs=1e-3)
    assert LaunchNoise(0.15, 3).pooled_with(None, 1) == 0.15
