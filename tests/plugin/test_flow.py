"""The baseline workflow end to end: record, pass, select, unused, missing (xdist or not)."""

from __future__ import annotations

import json

import pytest

from .conftest import RELAXED_CLIENT_CHECK, run

# Long enough levels that aggregate tok/s is steady on a shared CPU.
METRICS = ["--llmperf-metrics", "output_throughput", "--llmperf-output-len", "128"]


@pytest.fixture(autouse=True)
def _relaxed(suite):
    suite.makeconftest(RELAXED_CLIENT_CHECK)


def test_update_records_then_the_same_server_passes(suite, xdist_args):
    first = run(suite, "--llmperf-update", *METRICS, *xdist_args)
    first.assert_outcomes(passed=6)  # 2 configs x 2 levels, gate at C=1 and C=4
    files = sorted(
        p.relative_to(suite.path).as_posix() for p in suite.path.rglob("baselines/**/*.json")
    )
    assert len(files) == 2 and files[0].endswith("/mtp.json") and files[1].endswith("/plain.json")
    data = json.loads((suite.path / files[1]).read_text())
    assert data["schema_version"] == 1 and data["config"] == "plain"
    (levels,) = data["workloads"].values()
    assert sorted(levels) == ["1", "4"]
    assert levels["4"]["metrics"]["output_throughput"]["mean"] > 0
    first.stdout.fnmatch_lines(
        ["*SIMULATED*", "*plain (sglang-in64-out128)*", "*4 baseline entries created*"]
    )

    second = run(suite, *METRICS, *xdist_args)
    second.assert_outcomes(passed=6)
    second.stdout.fnmatch_lines(["*llmperf*", "*mtp (sglang-in64-out128)*"])
    assert "entries unused" not in second.stdout.str()
    # Results JSON of the run, in bench_serving's key names.
    results = json.loads((suite.path / "llmperf-results" / "results.json").read_text())
    assert {s["config"] for s in results["sweeps"]} == {"plain", "mtp"}
    assert "output_throughput" in results["sweeps"][0]["levels"][0]


def test_missing_baseline_fails_with_the_command_that_records_it(suite):
    result = run(suite, *METRICS)
    result.assert_outcomes(failed=4, passed=2)
    result.stdout.fnmatch_lines(
        ["*no baseline entry*", "*record it: pytest 'test_perf.py::test_sweep*--llmperf-update"]
    )


def test_k_selects_points_and_unused_counts_only_selected(suite):
    run(suite, "--llmperf-update", *METRICS).assert_outcomes(passed=6)
    only = run(suite, *METRICS, "-k", "C4")
    only.assert_outcomes(passed=3, deselected=3)
    assert "entries unused" not in only.stdout.str()
    # Fewer levels in the whole run: the C=4 entries are now unused, which fails the session.
    fewer = run(suite, *METRICS, "--llmperf-levels", "1")
    fewer.assert_outcomes(passed=3)
    assert fewer.ret == 1
    fewer.stdout.fnmatch_lines(["*2 baseline entries unused*--llmperf-update to delete them*"])
    warned = run(suite, *METRICS, "--llmperf-levels", "1", "--llmperf-warn-unused")
    assert warned.ret == 0
    deleted = run(suite, *METRICS, "--llmperf-levels", "1", "--llmperf-update")
    deleted.stdout.fnmatch_lines(["*2 baseline entries deleted*"])
    assert run(suite, *METRICS, "--llmperf-levels", "1").ret == 0
