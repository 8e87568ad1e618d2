"""The baseline workflow end to end: record, pass, select, unused, missing (xdist or not)."""

from __future__ import annotations

import json

import pytest

from .conftest import SUITE, light, run, with_sweep

# Long enough levels that aggregate tok/s is steady on a shared CPU, judged on throughput.
LONGER = ["--llmperf-output-len", "128"]
THROUGHPUT = 'metrics = ["output_throughput"]'


@pytest.fixture(autouse=True)
def _light(suite):
    """The plugin's real validity limits, on a light load (the suite's own sim_args)."""
    (suite.path / "llmperf.toml").write_text(light(with_sweep(SUITE, THROUGHPUT)))


def test_update_records_then_the_same_server_passes(suite, xdist_args):
    first = run(suite, "--llmperf-update", *LONGER, *xdist_args)
    first.assert_outcomes(passed=6)  # 2 configs x 2 levels, gate at C=1 and C=4
    files = sorted(
        p.relative_to(suite.path).as_posix() for p in suite.path.rglob("baselines/**/*.json")
    )
    assert len(files) == 2 and files[0].endswith("/mtp.json") and files[1].endswith("/plain.json")
    data = json.loads((suite.path / files[1]).read_text())
    assert data["schema_version"] == 2 and data["config"] == "plain"
    (levels,) = data["workloads"].values()
    assert sorted(levels) == ["1", "4"]
    assert levels["4"]["metrics"]["output_throughput"]["mean"] > 0
    first.stdout.fnmatch_lines(
        ["*SIMULATED*", "*plain (sglang-in64-out128)*", "*4 baseline entries created*"]
    )

    second = run(suite, *LONGER, *xdist_args)
    second.assert_outcomes(passed=6)
    second.stdout.fnmatch_lines(["*llmperf*", "*mtp (sglang-in64-out128)*"])
    assert "entries unused" not in second.stdout.str()
    # Results JSON of the run, in bench_serving's key names.
    results = json.loads((suite.path / "llmperf-results" / "results.json").read_text())
    assert {s["config"] for s in results["sweeps"]} == {"plain", "mtp"}
    assert "output_throughput" in results["sweeps"][0]["levels"][0]


def test_missing_baseline_fails_with_the_command_that_records_it(suite):
    result = run(suite, *LONGER)
    result.assert_outcomes(failed=4, passed=2)
    result.stdout.fnmatch_lines(
        ["*no baseline entry*", "*record it: pytest 'test_perf.py::test_sweep*--llmperf-update"]
    )


def test_k_selects_points_and_unused_counts_only_selected(suite):
    run(suite, "--llmperf-update", *LONGER).assert_outcomes(passed=6)
    only = run(suite, *LONGER, "-k", "C4")
    only.assert_outcomes(passed=3, deselected=3)
    assert "entries unused" not in only.stdout.str()
    # --llmperf-levels narrows this session only: C=4 could not be measured, so it is not
    # unused, the run passes without advising the deleting command, and an update keeps it.
    narrowed = run(suite, *LONGER, "--llmperf-levels", "1")
    narrowed.assert_outcomes(passed=3)
    assert narrowed.ret == 0 and "entries unused" not in narrowed.stdout.str()
    kept = run(suite, *LONGER, "--llmperf-levels", "1", "--llmperf-update")
    assert kept.ret == 0 and "entries deleted" not in kept.stdout.str()
    assert _entries(suite) == {"mtp": ["1", "4"], "plain": ["1", "4"]}
    # The suite itself drops C=4: those entries are unused, which fails the session.
    fewer_levels = SUITE.replace("levels = [1, 4]", "levels = [1]")
    (suite.path / "llmperf.toml").write_text(light(with_sweep(fewer_levels, THROUGHPUT)))
    fewer = run(suite, *LONGER)
    fewer.assert_outcomes(passed=3)
    assert fewer.ret == 1
    fewer.stdout.fnmatch_lines(["*2 baseline entries unused*--llmperf-update to delete them*"])
    warned = run(suite, *LONGER, "--llmperf-warn-unused")
    assert warned.ret == 0
    deleted = run(suite, *LONGER, "--llmperf-update")
    deleted.stdout.fnmatch_lines(["*2 baseline entries deleted*"])
    assert run(suite, *LONGER).ret == 0
    # Another workload (a flag) measures its own entries and never deletes the suite's.
    other = run(suite, *LONGER, "--llmperf-input-len", "32", "--llmperf-update")
    assert other.ret == 0 and "entries deleted" not in other.stdout.str()
    assert run(suite, *LONGER).ret == 0


def _entries(suite) -> dict[str, list[str]]:
    """Every stored (config → levels) pair under the suite's baselines."""
    out: dict[str, list[str]] = {}
    for path in suite.path.rglob("baselines/**/*.json"):
        data = json.loads(path.read_text())
        for levels in data["workloads"].values():
            out.setdefault(data["config"], []).extend(sorted(levels))
    return out


NO_BASELINE_TEST = """
def test_no_failed_requests(llmperf_point):
    assert llmperf_point.result.failed == 0
"""


def test_k_on_a_test_that_never_compares_leaves_entries_used_and_kept(suite):
    """`-k test_no_failed_requests` (the README's own example) could compare every point it
    selects, so no entry is unused; with --llmperf-update nothing is deleted."""
    suite.makepyfile(test_more=NO_BASELINE_TEST)
    run(suite, "--llmperf-update", *LONGER, "-k", "test_sweep").assert_outcomes(passed=4)
    before = _entries(suite)
    assert before == {"mtp": ["1", "4"], "plain": ["1", "4"]}
    only = run(suite, *LONGER, "-k", "test_no_failed_requests")
    only.assert_outcomes(passed=4, deselected=6)
    assert only.ret == 0 and "unused" not in only.stdout.str()
    updated = run(suite, *LONGER, "-k", "test_no_failed_requests", "--llmperf-update")
    assert updated.ret == 0 and "deleted" not in updated.stdout.str()
    assert _entries(suite) == before


def test_update_keeps_entries_of_a_server_that_did_not_start(suite):
    run(suite, "--llmperf-update", *LONGER).assert_outcomes(passed=6)
    before = _entries(suite)
    broken = run(
        suite,
        "--llmperf-update",
        *LONGER,
        "--llmperf-sim-args",
        "plain: --sim-fault crash-on-start",
        "-k",
        "test_sweep",
    )
    assert broken.ret != 0  # plain's points error
    assert "deleted" not in broken.stdout.str()
    assert _entries(suite) == before


def test_update_keeps_entries_of_skipped_and_errored_points(suite):
    run(suite, "--llmperf-update", *LONGER).assert_outcomes(passed=6)
    before = _entries(suite)
    suite.makepyfile(
        test_perf="""
import pytest

def test_sweep(llmperf_point):
    if llmperf_point.config == "plain":
        pytest.skip("not today")
    if llmperf_point.concurrency == 4:
        raise RuntimeError("a broken test body")
    llmperf_point.assert_baseline()
"""
    )
    result = run(suite, "--llmperf-update", *LONGER)
    result.assert_outcomes(passed=1, skipped=2, failed=1)
    assert "deleted" not in result.stdout.str()
    assert _entries(suite) == before


def test_rerecord_rewrites_passing_entries_with_their_own_noise(suite):
    """--llmperf-rerecord replaces even a passing one-launch entry with baseline_repeat samples
    from separate launches (its noise is then measured, not assumed)."""

    def plain_c1() -> dict:
        path = next(suite.path.rglob("baselines/**/plain.json"))
        (levels,) = json.loads(path.read_text())["workloads"].values()
        return levels["1"]["metrics"]["output_throughput"]

    args = [*LONGER, "-k", "test_sweep and plain"]
    run(suite, "--llmperf-update", *args).assert_outcomes(passed=2, deselected=4)
    old = plain_c1()
    assert old["n"] == 1
    again = run(suite, "--llmperf-rerecord", "--llmperf-baseline-repeat", "2", *args)
    again.assert_outcomes(passed=2, deselected=4)
    again.stdout.fnmatch_lines(["*UPDATING baselines*"])
    fresh = plain_c1()
    assert fresh["n"] == 2 and fresh["launches"] == 2
    assert len(fresh["samples"]) == 2 and old["mean"] not in fresh["samples"]
