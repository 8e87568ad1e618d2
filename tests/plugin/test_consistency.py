"""Fast but wrong never passes: the A/B's greedy consistency probes, end to end on the
simulator (``run/ab.py``, ``verdicts/consistency.py``, ``sim/greedy.py``).

An unchanged pair passes, even with batching drift on both sides; a candidate whose answers
changed for a quarter of the prompts fails every level, naming the share, the A/A spread and
the first differing probe and position; with deterministic inference declared, one drifting
answer is enough to fail.
"""

from __future__ import annotations

import json
import re
import sys

import pytest

from .conftest import FAST, light

SUITE = """
[[server]]
name = "old"
model = "sim/qwen-moe"

[[server]]
name = "new"
model = "sim/qwen-moe"

[sweep]
levels = [1]

[[ab]]
candidate = "new"
reference = "old"
rounds = 2
tolerance = 0.9
"""


def _run(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict[int, dict]]:
    pytester.makefile(".toml", llmperf=light(SUITE))
    pytester.makepyfile(test_ab="def test_ab(llmperf_ab):\n    llmperf_ab.check()\n")
    out_dir = pytester.path / "out"
    result = pytester.runpytest_subprocess(
        *FAST,
        "--llmperf-output-len",  # longer than FAST: a busy box then keeps each level valid
        "64",
        "--llmperf-output-dir",
        str(out_dir),
        # A level a loaded box could not measure validly is skipped, not failed: these tests
        # are about the answers, and a consistency fail fails whatever the speed sample was.
        "--llmperf-invalid",
        "skip",
        *args,
        timeout=300,
    )
    data = json.loads((out_dir / "ab.json").read_text())
    return result, {p["concurrency"]: p for p in data["points"]}


def test_unchanged_pair_passes_consistency(pytester: pytest.Pytester) -> None:
    result, points = _run(pytester, "--llmperf-sim-args", "--sim-nondeterminism 0.02")
    out = result.stdout.str()
    assert result.ret == 0, out[-3000:]
    for p in points.values():
        assert p["consistency"] == "pass" and p["probes_compared"] == 32, p
        assert p["probes_aa_compared"] == 32  # the reference's 2 launches against each other
        assert "consistency:" in p["message"]
    assert "greedy outputs" in out  # the A/B table's column


def test_changed_answers_fail_naming_share_and_first_probe(pytester: pytest.Pytester) -> None:
    result, points = _run(pytester, "--llmperf-sim-args", "new: --sim-diverge-share 0.25")
    out = result.stdout.str()
    result.assert_outcomes(failed=1)
    msg = re.search(
        r"consistency: (\d+) of 32 greedy probes answered differently by new than by old \(2 vs "
        r"2 launches; A/A: old disagreed with itself on 0 of 32\); beyond what relabelling the "
        r"launches explains \(exact p=\S+ < 0.01\); first difference: probe (\d+) at token "
        r"(\d+) \((\d+) vs (\d+)\)",
        out,
    )
    assert msg, out[-3000:]
    differing = int(msg.group(1))
    assert 4 <= differing <= 16  # about a quarter of 32 prompts
    for p in points.values():
        assert p["verdict"] == "fail" and p["consistency"] == "fail"
        assert p["probes_differing"] == differing and p["probes_aa_differing"] == 0


def test_deterministic_inference_fails_any_difference(pytester: pytest.Pytester) -> None:
    # Drift on every answer of new only; both declare deterministic inference, which turns
    # the simulator's drift off, so only a changed-answer share can differ: a small one.
    result, points = _run(
        pytester,
        "--llmperf-probes",
        "8",
        "--llmperf-sim-args",
        "--enable-deterministic-inference; new: --sim-diverge-share 0.15",
    )
    out = result.stdout.str()
    p = points[1]
    if p["probes_differing"] == 0:  # the seeded draw gave none of 8 prompts a change
        pytest.fail(f"the seeded share picked no prompt of 8: {p}")
    assert p["consistency"] == "fail", p
    assert "deterministic inference declared: any difference fails" in out
    result.assert_outcomes(failed=1)


POINT_SUITE = """
[[server]]
name = "srv"
model = "sim/qwen-moe"

[sweep]
levels = [1]
"""

NONE = "--sim-nondeterminism 0"
RECORD = ["--llmperf-update", "--llmperf-baseline-repeat", "3", "--llmperf-relaunch", "rerun"]


def _point(pytester: pytest.Pytester, sim: str, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        *FAST,
        "--llmperf-output-dir",
        str(pytester.path / "out"),
        "--llmperf-sim-args",
        f"--sim-time-scale 5 {sim}",  # slow enough for a loaded box to measure validly
        *args,
        timeout=300,
    )


def _entry(pytester: pytest.Pytester) -> dict:
    files = list((pytester.path / "baselines").rglob("srv.json"))
    assert len(files) == 1
    return next(iter(json.loads(files[0].read_text())["workloads"].values()))["1"]


def _record(pytester: pytest.Pytester, sim: str, *args: str, probes: int = 32) -> dict:
    pytester.makefile(".toml", llmperf=light(POINT_SUITE))
    pytester.makepyfile(test_p="def test_p(llmperf_point):\n    llmperf_point.check()\n")
    rec = _point(pytester, sim, *RECORD, *args)
    rec.assert_outcomes(passed=1)
    entry = _entry(pytester)
    # One probe set per recording launch that answered (3; a re-measured one may add its own),
    # each probe one string of ids.
    assert 3 <= len(entry["probes"]) <= _launches(pytester), entry.get("probes")
    assert all(len(s["outputs"]) == probes for s in entry["probes"])
    assert all(len(o.split()) == 16 for o in entry["probes"][0]["outputs"])
    return entry


def _launches(pytester: pytest.Pytester) -> int:
    """The launches the last session measured in (its results.json)."""
    results = json.loads((pytester.path / "out" / "results.json").read_text())
    levels = [lv for sw in results["sweeps"] for lv in sw["levels"]]
    levels += [lv for sw in results["sweeps"] for r in sw.get("repeats", {}).values() for lv in r]
    return len({lv["launch"] for lv in levels if lv.get("launch")})


def _consistency(pytester: pytest.Pytester) -> dict:
    """The point's consistency as the last session's results.json keeps it."""
    results = json.loads((pytester.path / "out" / "results.json").read_text())
    (check,) = [c for c in results["checks"] if c["kind"] == "point"]
    return check["consistency"]


def test_baseline_probes_pass_unchanged_and_fail_a_changed_share(
    pytester: pytest.Pytester,
) -> None:
    """64 probes: judged by one launch against the baseline's three, a changed probe is worth
    at best 1/4 (``verdicts/consistency.py``), and the baseline's own drift on a few probes
    weakens that further; with 32, this share (6 of the seed-0 prompts) passed 6.9 % of 1000
    drawn runs (``benchmarks/bench_consistency_power.py``), with 64 (a quarter changed) none."""
    probes = ("--llmperf-probes", "64")
    recorded = len(_record(pytester, "--sim-nondeterminism 0.02", *probes, probes=64)["probes"])
    same = _point(pytester, "--sim-nondeterminism 0.02", *probes)
    same.assert_outcomes(passed=1)
    # results.json keeps the point's consistency, passed or not
    kept = _consistency(pytester)
    assert kept["verdict"] == "pass" and kept["compared"] == 64, kept
    assert f"({recorded} vs {_launches(pytester)} launches;" in kept["message"]

    # A tolerance no launch can decide keeps the sequential loop adding launches (to 3): each
    # of them answers the probes, not only the one live when the point is judged.
    pytester.makefile(
        ".toml",
        llmperf=POINT_SUITE + 'launch_budget = 3\ntolerance = { output_throughput = "0.1%" }\n',
    )
    changed = _point(pytester, "--sim-nondeterminism 0.02 --sim-diverge-share 0.25", *probes)
    out = changed.stdout.str()
    changed.assert_outcomes(failed=1)
    msg = re.search(
        r"consistency: (\d+) of 64 greedy probes answered differently by this run than by the "
        r"baseline \((\d+) vs (\d+) launches; A/A: the baseline disagreed with itself on \d+ "
        r"of 64\); "
        r"beyond what relabelling the launches explains \(exact p=\S+ < 0.01\); first "
        r"difference: probe \d+ at token \d+",
        out,
    )
    assert msg, out[-3000:]
    assert 8 <= int(msg.group(1)) <= 32
    # every launch of the run answered, the sequential loop's added ones too
    assert int(msg.group(2)) == recorded
    assert int(msg.group(3)) == _launches(pytester), out[-3000:]
    kept = _consistency(pytester)
    assert kept["verdict"] == "fail" and kept["differing"] == int(msg.group(1)), kept

    # Fixed repeats (and their re-runs) in fresh launches: each answers too.
    pytester.makefile(".toml", llmperf=POINT_SUITE + "sequential = false\nrepeat = 2\n")
    changed = _point(pytester, "--sim-nondeterminism 0.02 --sim-diverge-share 0.25", *probes)
    out = changed.stdout.str()
    changed.assert_outcomes(failed=1)
    msg = re.search(r"by this run than by the baseline \((\d+) vs (\d+) launches;", out)
    assert msg, out[-3000:]
    assert int(msg.group(2)) == _launches(pytester) >= 2, out[-3000:]


def test_update_adds_probes_to_an_entry_without_them(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", llmperf=light(POINT_SUITE))
    pytester.makepyfile(test_p="def test_p(llmperf_point):\n    llmperf_point.check()\n")
    _point(pytester, NONE, "--llmperf-update", "--llmperf-probes", "0").assert_outcomes(passed=1)
    assert "probes" not in _entry(pytester)  # recorded without: the old form
    # A plain run does not judge (nor ask) what the entry cannot be compared with.
    _point(pytester, "--sim-diverge-share 0.5").assert_outcomes(passed=1)
    _point(pytester, NONE, "--llmperf-update").assert_outcomes(passed=1)
    assert len(_entry(pytester)["probes"]) == 1
    _point(pytester, "--sim-diverge-share 0.5").assert_outcomes(failed=1)


def test_deterministic_baseline_fails_any_difference(pytester: pytest.Pytester) -> None:
    _record(pytester, "--enable-deterministic-inference")
    _point(pytester, "--enable-deterministic-inference").assert_outcomes(passed=1)
    # A share too small for the statistics fails: deterministic inference leaves no drift.
    changed = _point(pytester, "--enable-deterministic-inference --sim-diverge-share 0.06")
    out = changed.stdout.str()
    changed.assert_outcomes(failed=1)
    assert "deterministic inference declared: any difference fails" in out, out[-3000:]
    assert re.search(r"first difference: probe \d+ at token \d+", out)


def test_calibrate_record_keeps_each_runs_answers(pytester: pytest.Pytester) -> None:
    """``llmperf calibrate --record`` writes its entries from results files: each run's launch
    answers the probes (``probe_every_launch``), results.json keeps the answers, and the
    entries carry one set per run, so a later run is judged on them as after
    ``--llmperf-update``."""
    pytester.makefile(".toml", llmperf=light(POINT_SUITE))
    pytester.makepyfile(test_p="def test_p(llmperf_point):\n    llmperf_point.check()\n")
    sim = "--sim-time-scale 5 --sim-nondeterminism 0.02"
    cal = pytester.run(
        sys.executable, "-m", "pytest_llmperf.cli", "calibrate", "-n", "3", "--record",
        "baselines", "--", *FAST, "--llmperf-sim-args", sim, timeout=300,
    )  # fmt: skip
    assert cal.ret == 0, cal.stdout.str()[-3000:] + cal.stderr.str()[-3000:]
    assert re.search(r"srv \S+ C=1: 3 runs, probe answers of 3 launches", cal.stdout.str())
    run1 = json.loads((pytester.path / "llmperf-calibration" / "run-1" / "results.json")
                      .read_text())  # fmt: skip
    (kept,) = run1["probes"]
    assert kept["config"] == "srv" and len(kept["answers"]["outputs"]) == 32
    entry = _entry(pytester)
    assert len(entry["probes"]) == 3

    same = _point(pytester, "--sim-nondeterminism 0.02")
    same.assert_outcomes(passed=1)
    judged = _consistency(pytester)
    assert judged["verdict"] == "pass", judged
    assert f"(3 vs {_launches(pytester)} launches;" in judged["message"]
    changed = _point(pytester, "--sim-nondeterminism 0.02 --sim-diverge-share 0.5")
    changed.assert_outcomes(failed=1)
    assert _consistency(pytester)["verdict"] == "fail"
