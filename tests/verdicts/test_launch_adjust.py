"""Launch-adjusted verdicts: a launch's shared speed cancels, one level's own change stays."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from pytest_llmperf.base.errors import InputError
from pytest_llmperf.verdicts.baseline import summarize
from pytest_llmperf.verdicts.baseline_file import LaunchResidual, MetricSummary
from pytest_llmperf.verdicts.compare import Verdict, compare_point
from pytest_llmperf.verdicts.launch_adjust import (
    ResidualSummary,
    adjustable,
    decide_adjusted,
    launch_residuals,
    summarize_residuals,
)

from . import make_level

CENTERS = {1: 100.0, 16: 1000.0, 64: 2000.0}


def test_only_speed_like_metrics_are_adjusted() -> None:
    assert adjustable("output_throughput") and adjustable("median_ttft_ms")
    assert not adjustable("accept_length") and not adjustable("cache_hit_rate")


def test_a_launch_factor_cancels_and_a_level_change_stays() -> None:
    fast = {c: v * 1.2 for c, v in CENTERS.items()}  # a launch 20 % faster at every level
    assert launch_residuals({"L": fast}, CENTERS, 64) == pytest.approx([0.0])
    hurt = {**fast, 64: fast[64] * 0.75}  # ... and 25 % slower at C=64 only
    (r,) = launch_residuals({"L": hurt}, CENTERS, 64)
    assert math.exp(r) == pytest.approx(0.75)
    # The other levels keep their residual 0: the median does not let C=64 leak into them.
    assert launch_residuals({"L": hurt}, CENTERS, 16) == pytest.approx([0.0])


def test_launches_with_fewer_than_three_levels_are_not_adjusted() -> None:
    two = {"L": {1: 120.0, 64: 2400.0}}
    assert launch_residuals(two, CENTERS, 64) == []
    assert launch_residuals({"L": {1: 1.0, 16: 1.0}}, CENTERS, 64) == []  # 64 not measured


def test_adjusted_decision_sees_through_launch_noise() -> None:
    rng = random.Random(7)
    # Baseline: five launches, each with its own speed (sd 15 %) and 2 % level noise.
    base = []
    for _ in range(5):
        f = math.exp(rng.gauss(0, 0.15))
        launch = {c: v * f * math.exp(rng.gauss(0, 0.02)) for c, v in CENTERS.items()}
        base += launch_residuals({"L": launch}, CENTERS, 64)
    summary = summarize_residuals(base)
    assert summary is not None and summary.n == 5 and summary.sd is not None
    assert summary.sd < 0.05  # the 15 % launch speed is gone
    slow = {c: v * 1.3 for c, v in CENTERS.items()}
    slow[64] *= 0.75
    dec = decide_adjusted(
        "output_throughput", launch_residuals({"L": slow}, CENTERS, 64), summary, 0.05
    )
    assert dec.outcome == "fail" and dec.deficit == pytest.approx(0.25, abs=0.03)
    same = {c: v * 0.8 for c, v in CENTERS.items()}  # a slow launch, nothing else
    ok = decide_adjusted(
        "output_throughput", launch_residuals({"L": same}, CENTERS, 64), summary, 0.05
    )
    assert ok.outcome == "pass"


def _entry_summary(mean: float, residual: LaunchResidual | None) -> MetricSummary:
    s = summarize("output_throughput", [mean * 0.85, mean, mean * 1.15], launches=["a", "b", "c"])
    return s.model_copy(update={"launch_residual": residual})


def test_compare_point_combines_plain_and_adjusted() -> None:
    from pytest_llmperf.verdicts.baseline_file import BaselineEntry

    res = LaunchResidual(mean=0.0, sd=0.01, n=3)
    entry = BaselineEntry(metrics={"output_throughput": _entry_summary(2000.0, res)})
    # 25 % slower at this level, in a launch that is 20 % fast: the plain comparison sees
    # only -10 % inside the 15 % launch noise; the adjusted one sees the 25 %.
    level = make_level(64, 1500.0)
    plain = compare_point("plain", level, entry, metrics=["output_throughput"])
    assert plain.verdict != Verdict.FAIL
    adj = compare_point(
        "plain",
        level,
        entry,
        metrics=["output_throughput"],
        adjusted={"output_throughput": [math.log(0.75)]},
    )
    assert adj.verdict == Verdict.FAIL
    assert "launch-adjusted: 25.0 % below baseline with each launch's speed removed" in (
        adj.message()
    )
    # An adjusted pass outweighs an unresolved plain comparison...
    calm = compare_point(
        "plain", level, entry, metrics=["output_throughput"], adjusted={"output_throughput": [0.0]}
    )
    assert calm.verdict == Verdict.PASS
    # ...and entries recorded without residuals are judged as before.
    bare = BaselineEntry(metrics={"output_throughput": _entry_summary(2000.0, None)})
    old = compare_point(
        "plain",
        level,
        bare,
        metrics=["output_throughput"],
        adjusted={"output_throughput": [math.log(0.75)]},
    )
    assert old.verdict == plain.verdict


def test_residual_summary_of_one_launch_has_no_spread() -> None:
    s = summarize_residuals([0.1])
    assert s == ResidualSummary(mean=0.1, sd=None, n=1)
    assert summarize_residuals([]) is None


def _store(tmp_path: Any, spread: float, residual_sd: float) -> tuple[Any, str]:
    """Entries at every level of CENTERS over 3 launches: plain spread ``spread``, residual
    spread ``residual_sd``."""
    from pytest_llmperf.verdicts.baseline import BaselineStore
    from pytest_llmperf.verdicts.baseline_file import BaselineEntry, EntryKey

    from . import make_sweep

    store = BaselineStore(tmp_path)
    wl = make_sweep("plain", CENTERS).workload.key()
    for c, v in CENTERS.items():
        values = [v * (1 - spread), v, v * (1 + spread)]
        s = summarize("output_throughput", values, launches=["a", "b", "c"])
        s = s.model_copy(update={"launch_residual": LaunchResidual(mean=0.0, sd=residual_sd, n=3)})
        store.queue_update(
            EntryKey("hw", "plain", wl, c), BaselineEntry(metrics={"output_throughput": s})
        )
    store.flush()
    return store, wl


def test_compare_sweep_adjusts_like_the_plugin(tmp_path) -> None:
    """``llmperf compare`` on a results file: samples grouped by launch, residuals against
    the stored entries, the same combined verdict as the point check."""
    from pytest_llmperf.verdicts.compare import compare_sweep

    from . import make_sweep

    store, wl = _store(tmp_path, spread=0.15, residual_sd=0.01)
    # One launch 20 % fast, with C=64 25 % slower than the rest of it.
    run = make_sweep("plain", {1: 120.0, 16: 1200.0, 64: 1800.0})
    run = run.model_copy(
        update={"levels": [lv.model_copy(update={"launch": "L"}) for lv in run.levels]}
    )
    plain = compare_sweep(run, store, "hw", metrics=["output_throughput"])
    adjusted = compare_sweep(run, store, "hw", metrics=["output_throughput"], adjust="launch")
    assert [p.verdict for p in plain] != [p.verdict for p in adjusted]
    assert [p.verdict for p in adjusted] == [Verdict.PASS, Verdict.PASS, Verdict.FAIL]
    assert "launch-adjusted" in adjusted[2].message()
    # adjust = "auto" chooses as the plugin does: a 15 % launch spread against 1 % residuals
    auto = compare_sweep(run, store, "hw", metrics=["output_throughput"], adjust="auto")
    assert [p.verdict for p in auto] == [Verdict.PASS, Verdict.PASS, Verdict.FAIL]
    assert "launch-adjusted (the launch's shared speed removed" in auto[2].message()
    # ...and under the sequential rule (a budget of 6 looks, residual noise pooled), the
    # 25 % drop is beyond the pooled noise at the first look
    looked = compare_sweep(run, store, "hw", metrics=["output_throughput"], adjust="auto", looks=6)
    assert [p.verdict for p in looked][2] == Verdict.FAIL


def test_a_baseline_whose_launches_differed_by_their_speed_alone_says_so(tmp_path) -> None:
    """Recorded in many passes a launch, a level's residuals can be the same in every launch
    (spread 0): the message says why the adjusted comparison was taken in words, not as an
    infinite ratio ("infx")."""
    from pytest_llmperf.verdicts.compare import compare_sweep

    from . import make_sweep

    store, _ = _store(tmp_path, spread=0.15, residual_sd=0.0)
    run = make_sweep("plain", {1: 120.0, 16: 1200.0, 64: 1800.0})
    run = run.model_copy(
        update={"levels": [lv.model_copy(update={"launch": "L"}) for lv in run.levels]}
    )
    auto = compare_sweep(run, store, "hw", metrics=["output_throughput"], adjust="auto")
    text = auto[2].message()
    assert "as the baseline's launches differed by it alone" in text
    assert "infx" not in text


def test_a_stall_inside_the_level_is_re_measured_not_failed() -> None:
    """-14 % at one level of one launch: beyond a 1 % residual spread, so a fail; unless the
    level's own within-run error says its window was disturbed (a stall), then inconclusive."""
    base = ResidualSummary(mean=0.0, sd=0.01, n=3)
    r = [math.log(0.86)]
    assert decide_adjusted("output_throughput", r, base, 0.05).outcome == "fail"
    stalled = decide_adjusted("output_throughput", r, base, 0.05, within_se=[0.08])
    assert stalled.outcome == "inconclusive"
    # a 25 % drop with a calm window still fails
    calm = decide_adjusted("output_throughput", [math.log(0.75)], base, 0.05, within_se=[0.01])
    assert calm.outcome == "fail"


def test_baselines_and_paired_ab_remove_the_launch_factor_the_same_way() -> None:
    from pytest_llmperf.verdicts.paired import remove_launch_factor

    # One launch (or A/B round): every level 20 % fast, C=64 alone 25 % slower on top.
    values = {1: 1.2, 16: 1.2, 64: 0.9, 128: 1.2}
    centers = {c: 1.0 for c in values}
    paired = remove_launch_factor({c: [math.log(v)] for c, v in values.items()})
    for c in values:
        assert launch_residuals({"L": values}, centers, c) == pytest.approx(paired[c])
    assert paired[64][0] == pytest.approx(math.log(0.75))
    # Below the one minimum both refuse: the baseline side leaves the launch out, A/B says so.
    two = {1: 1.2, 64: 0.9}
    assert launch_residuals({"L": two}, centers, 64) == []
    with pytest.raises(InputError, match="at least 3 levels"):
        remove_launch_factor({c: [math.log(v)] for c, v in two.items()})


def test_polish_finds_each_passs_factor_past_a_stall_in_another_level() -> None:
    from pytest_llmperf.verdicts.launch_adjust import polish, remove_common_factor

    drop, stall = math.log(0.9), math.log(0.6)
    noise = [
        [0.004, -0.006, 0.002, 0.0],
        [-0.003, 0.005, -0.001, 0.002],
        [0.001, 0.0, 0.003, -0.004],
    ]
    speed = [0.10, 0.12, 0.08, 0.11]  # each pass's own factor (drift)
    passes = [{c: speed[j] + noise[c][j] for c in range(3)} for j in range(4)]
    for p in passes:
        p[0] += drop  # level 0 regressed in every pass
    passes[2][1] += stall  # level 1 stalled in pass 3
    # the pass's plain median is then level 0 itself: its residual there is 0
    one_step = remove_common_factor(passes[2])
    assert one_step is not None and one_step[0] == 0.0
    got = polish(passes)
    assert all(r is not None for r in got)
    for j, r in enumerate(got):
        assert r is not None and r[0] == pytest.approx(drop, abs=0.015), (j, r)
        assert r[2] == pytest.approx(0.0, abs=0.015)
    assert got[2] is not None and got[2][1] == pytest.approx(stall, abs=0.015)
    # one pass: the plain median; a pass with fewer than three finite levels: None, NaN kept
    assert polish(passes[:1]) == [remove_common_factor(passes[0])]
    holes = [dict(passes[0]), {0: 0.1, 1: math.nan, 2: 0.2}, {**passes[1], 3: math.nan}]
    out = polish(holes)
    assert out[1] is None and out[0] is not None and out[2] is not None
    assert math.isnan(out[2][3])


def test_auto_adjusts_when_every_level_moved_together_beyond_the_recorded_launch_noise(
    tmp_path,
) -> None:
    """Real SGLang on a CPU: recorded in one sitting (launch spread 3 %, residual spread 4 %,
    so ``auto`` chose the plain comparison), judged a day later on a box 2.1x faster, with the
    server capped so that C=4 (here C=64) ran 20 % below its neighbours: the plain comparison
    said +70 %, "pass". Every level moved together far beyond the recorded launch noise, so the
    plain comparison measures the box: the point is judged launch-adjusted."""
    from pytest_llmperf.verdicts.baseline_file import EntryKey
    from pytest_llmperf.verdicts.compare import compare_sweep
    from pytest_llmperf.verdicts.launch_adjust import moved_together

    from . import make_sweep

    store, wl = _store(tmp_path, spread=0.03, residual_sd=0.04)

    def launched(values: dict[int, float]) -> Any:
        """Three launches of the sweep: the first in ``levels``, the others as repeats."""
        run = make_sweep("plain", values)
        first = [lv.model_copy(update={"launch": "L1"}) for lv in run.levels]
        repeats = {
            lv.max_concurrency: [lv.model_copy(update={"launch": k}) for k in ("L2", "L3")]
            for lv in run.levels
        }
        return run.model_copy(update={"levels": first, "repeats": repeats})

    capped = launched({1: 210.0, 16: 2100.0, 64: 2000.0 * 2.1 * 0.8})
    (one, sixteen, sixty_four) = compare_sweep(
        capped, store, "hw", metrics=["output_throughput"], adjust="auto"
    )
    assert sixty_four.verdict == Verdict.FAIL, sixty_four.message()
    assert "every level of this run moved +110 % together" in sixty_four.message()
    assert one.verdict == sixteen.verdict == Verdict.PASS
    # The same box, nothing capped: no level fails, and the move itself is not a regression.
    fast = compare_sweep(
        launched({c: v * 2.1 for c, v in CENTERS.items()}), store, "hw",
        metrics=["output_throughput"], adjust="auto",
    )  # fmt: skip
    assert Verdict.FAIL not in {p.verdict for p in fast}
    # A run at the recording's speed keeps the plain comparison auto chose: C=64 20 % slower
    # fails there, with no word of a move.
    same_box = compare_sweep(
        launched({1: 100.0, 16: 1000.0, 64: 1600.0}), store, "hw",
        metrics=["output_throughput"], adjust="auto",
    )  # fmt: skip
    assert same_box[2].verdict == Verdict.FAIL and "moved" not in same_box[2].message()
    summary = store.get(EntryKey("hw", "plain", wl, 64)).metrics["output_throughput"]
    assert moved_together([2000.0 * 1.02], summary, [0.0], 0.05) is None  # within the noise


def test_a_backstop_failure_says_every_level_moved_together(tmp_path) -> None:
    """Real SGLang on a CPU, with the server capped at C=8: the box ran 35 % slower than at the
    recording, every level alike, and only the level with the smallest recorded noise failed,
    through the plain backstop. The message says the move was every level's, so the user does
    not chase that level; a level's own drop, judged launch-adjusted, says nothing of it."""
    from pytest_llmperf.verdicts.compare import compare_sweep

    from . import make_sweep

    store, _ = _store(tmp_path, spread=0.03, residual_sd=0.01)  # auto: launch-adjusted
    slow = make_sweep("plain", {c: v * 0.65 for c, v in CENTERS.items()})
    slow = slow.model_copy(
        update={"levels": [lv.model_copy(update={"launch": "L"}) for lv in slow.levels]}
    )
    points = compare_sweep(slow, store, "hw", metrics=["output_throughput"], adjust="auto")
    assert [p.verdict for p in points] == [Verdict.FAIL] * 3
    for p in points:
        assert "the plain difference alone is beyond the launch noise" in p.message()
        assert "every level of this run moved -35 % together against the recording" in p.message()
    # C=64 alone 25 % slower at the recording's speed fails launch-adjusted, with no such words
    own = make_sweep("plain", {1: 100.0, 16: 1000.0, 64: 1500.0})
    own = own.model_copy(
        update={"levels": [lv.model_copy(update={"launch": "L"}) for lv in own.levels]}
    )
    judged = compare_sweep(own, store, "hw", metrics=["output_throughput"], adjust="auto")
    assert judged[2].verdict == Verdict.FAIL and "together" not in judged[2].message()
