"""Measured noise, honest n over launches, unresolved points, gates inside noise."""

from __future__ import annotations

import pytest

from pytest_llmperf.base.results import LevelResult, ServerFacts, SweepResult, Workload
from pytest_llmperf.report.tables import judged_cell
from pytest_llmperf.verdicts.baseline import entry_from_levels
from pytest_llmperf.verdicts.compare import Verdict
from pytest_llmperf.verdicts.gates import Gate, evaluate_gate
from pytest_llmperf.verdicts.stats import decide, launch_count, launch_means, mean_within_se


def _lv(tput: float, launch: str | None = None, se: float = 0.0) -> LevelResult:
    return LevelResult(
        max_concurrency=16,
        num_requests=32,
        completed=32,
        failed=0,
        duration=1.0,
        total_input_tokens=32 * 512,
        total_output_tokens=32 * 128,
        output_throughput=tput,
        per_request_throughput=tput / 16,
        concurrency=16.0,
        launch=launch,
        within_se={"output_throughput": se} if se else {},
    )


def test_samples_sharing_a_launch_count_once() -> None:
    assert launch_means([1.0, 3.0, 10.0], ["a", "a", "b"]) == [2.0, 10.0]
    assert launch_count(["a", "a", None, None], 4) == 3
    same = decide(
        [100.0, 100.0, 100.0],
        base_mean=100.0,
        base_std=15.0,
        base_n=3,
        base_launches=3,
        tolerance=0.05,
        direction="higher",
        current_launches=["x", "x", "x"],
    )
    fresh = decide(
        [100.0, 100.0, 100.0],
        base_mean=100.0,
        base_std=15.0,
        base_n=3,
        base_launches=3,
        tolerance=0.05,
        direction="higher",
        current_launches=["x", "y", "z"],
    )
    assert same.n_launches_current == 1 and fresh.n_launches_current == 3
    assert same.margin > fresh.margin


def test_inconclusive_advice_for_an_attached_server_never_says_relaunch() -> None:
    """Each inconclusive kind, launched and attached: an attached server is never relaunched,
    so its advice names what a user can do to it (repeat on it, or run the session again)."""
    from pytest_llmperf.verdicts.stats import Decision

    unresolved = Decision("inconclusive", False, 0.08, 0.05, 0.1, 0.2, "margin", 3, 3,
                          resolved=False, mde=0.4)  # fmt: skip
    needs_more = Decision("inconclusive", False, 0.06, 0.05, 0.01, 0.02, "margin", 3, 3,
                          repeats_needed=9)  # fmt: skip
    plain = Decision("inconclusive", False, 0.06, 0.05, 0.01, 0.02, "margin", 3, 3)
    assert "--llmperf-relaunch" in unresolved.advice()
    assert "re-run to n=9 samples" in needs_more.advice()
    assert plain.advice().endswith("re-run, or re-record the baseline with more repeats")
    attached = [d.advice(attached=True) for d in (unresolved, needs_more, plain)]
    for text in attached:
        assert "relaunch" not in text.replace("never relaunched", "")
        assert "re-run" not in text
    assert attached[0].endswith(
        "an attached server is never relaunched, so more samples of it cannot narrow this "
        "margin: widen the tolerance, or restart the server and run the session again"
    )
    assert attached[1].endswith(
        "repeat on the same server to n=9 samples (repeat = 9 in [sweep] or the marker)"
    )
    assert attached[2].endswith(
        "run the session again, or re-record the baseline with more repeats"
    )


def test_sequential_advice_names_what_each_undecided_point_can_use() -> None:
    """At a look: more launches where they would settle it; else a better recording, or the
    same-job A/B, which pairs both sides instead of carrying the runner's noise across days."""
    from pytest_llmperf.verdicts.sequential import Look
    from pytest_llmperf.verdicts.stats import Decision

    def at_look(**kw: object) -> Decision:
        return Decision("inconclusive", False, 0.08, 0.05, 0.06, 0.17, "margin", 6, 6,
                        n_launches_current=6, look=Look(6, 6), **kw)  # type: ignore[arg-type]  # fmt: skip

    settles = at_look(repeats_needed=9).advice()
    assert settles.startswith(
        "inconclusive after 6 launches (noise margin 17.0 %, sequential rule at look 6 of 6): "
    )
    assert "raise launch_budget (--llmperf-launch-budget) to at least 9" in settles
    assert "[[ab]]" not in settles  # more launches of this run would do
    plain = at_look().advice()
    effect = at_look().advice(adjusted=True, launch_effect=True)
    passes = at_look().advice(adjusted=True)
    assert "with more launches (baseline_repeat) or widen the tolerance;" in plain
    assert "recorded launches differ beyond their passes' noise" in effect
    assert "baseline_passes" in passes and "baseline_passes" not in effect
    for text in (plain, effect, passes):
        assert text.endswith("compare old and new in the same job ([[ab]])")
    attached = at_look().advice(attached=True)
    assert attached.endswith("an attached server is never relaunched; widen the tolerance")


def test_point_that_cannot_resolve_its_tolerance_is_inconclusive_with_mde() -> None:
    dec = decide(
        100.0, base_mean=100.0, base_std=15.0, base_n=3, base_launches=3,
        tolerance=0.05, direction="higher",
    )  # fmt: skip
    assert not dec.resolved and dec.outcome == "inconclusive"
    assert dec.mde is not None and dec.mde > 0.3  # 15 % launch noise: ~40 % is detectable
    assert "minimum detectable effect" in dec.advice()
    # Far beyond the noise it still fails.
    assert decide(
        40.0, base_mean=100.0, base_std=15.0, base_n=3, base_launches=3,
        tolerance=0.05, direction="higher",
    ).outcome == "fail"  # fmt: skip
    # A quiet baseline resolves 5 %.
    quiet = decide(
        99.0, base_mean=100.0, base_std=0.5, base_n=3, base_launches=3,
        tolerance=0.05, direction="higher",
    )  # fmt: skip
    assert quiet.resolved and quiet.outcome == "pass"


def test_within_run_error_widens_the_margin() -> None:
    kw = dict(base_mean=100.0, base_std=1.0, base_n=3, base_launches=3, tolerance=0.05)
    plain = decide(90.0, direction="higher", **kw)  # type: ignore[arg-type]
    noisy = decide(90.0, direction="higher", current_within_se=[0.05], **kw)  # type: ignore[arg-type]
    assert plain.outcome == "fail" and noisy.outcome == "inconclusive"


def test_one_measured_within_run_error_does_not_stand_for_every_sample() -> None:
    """A level whose steady window was too short to judge in all but one of 200 passes (C=2 of
    a short workload on real SGLang): that pass's error counts once in 200, as if each pass
    were as noisy (taken in full, it left that point 'could only have caught a regression larger
    than 59 %' where the point passes with 'no regression larger than 9.0 %')."""
    assert mean_within_se([0.15] + [None] * 199) == pytest.approx(0.15 / 200**0.5)
    assert mean_within_se([0.1, 0.2]) == pytest.approx((0.01 + 0.04) ** 0.5 / 2)
    assert mean_within_se([None, None]) is None and mean_within_se([]) is None
    kw = dict(base_mean=100.0, base_std=1.0, base_n=3, base_launches=3, tolerance=0.05)
    one = decide([90.0] * 200, direction="higher", current_within_se=[0.15] + [None] * 199, **kw)  # type: ignore[arg-type]
    assert one.outcome == "fail"
    # the baseline's summary combines its samples' errors the same way
    levels = [_lv(100.0, "p#1", se=0.15 if i == 0 else 0.0) for i in range(200)]
    s = entry_from_levels(levels, ["output_throughput"]).metrics["output_throughput"]
    assert s.within_se == pytest.approx(0.15 / 200**0.5)


def test_baseline_records_launch_spread() -> None:
    levels = [_lv(100.0, "p#1"), _lv(110.0, "p#1"), _lv(120.0, "p#2")]
    s = entry_from_levels(levels, ["output_throughput"]).metrics["output_throughput"]
    assert s.n == 3 and s.launches == 2
    assert s.std == pytest.approx(((105 - 112.5) ** 2 + (120 - 112.5) ** 2) ** 0.5)


def _sweep(config: str, levels: list[LevelResult]) -> SweepResult:
    return SweepResult(
        config=config,
        server=ServerFacts(),
        workload=Workload(input_len=512, output_len=128),
        levels=levels[:1],
        repeats={16: levels[1:]} if len(levels) > 1 else {},
    )


def test_gate_inside_noise_is_inconclusive_and_uses_every_sample() -> None:
    gate = Gate(name="g", config="mtp", reference="plain", metric="output_throughput", factor=1.0)
    close = evaluate_gate(gate, [_sweep("mtp", [_lv(98.0)]), _sweep("plain", [_lv(100.0)])])
    assert close.points[0].verdict == Verdict.INCONCLUSIVE
    assert "inside the noise margin" in close.points[0].message
    far = evaluate_gate(gate, [_sweep("mtp", [_lv(80.0)]), _sweep("plain", [_lv(100.0)])])
    assert far.points[0].verdict == Verdict.FAIL
    # The mean of all samples decides, not the first one.
    many = evaluate_gate(
        gate,
        [_sweep("mtp", [_lv(80.0, "m#1"), _lv(130.0, "m#2")]), _sweep("plain", [_lv(100.0)])],
    )
    assert many.points[0].value == pytest.approx(105.0)


def test_table_cell_shows_mean_spread_and_n() -> None:
    assert judged_cell([_lv(100.0), _lv(110.0), _lv(120.0)], "output_throughput") == (
        "110.0 ±9.1% n=3"
    )
    assert judged_cell([_lv(100.0, se=0.02)], "output_throughput") == "100.0 ±2.0%"
