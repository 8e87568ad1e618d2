"""``record_from_results``: a session's sweeps and verdicts as one run record."""

from __future__ import annotations

from pytest_llmperf.base.results import LevelResult, ServerFacts, SweepResult, Workload
from pytest_llmperf.history.from_results import git_commit, record_from_results
from pytest_llmperf.verdicts.compare import PointComparison
from pytest_llmperf.verdicts.verdict import Verdict

WL = Workload(input_len=64, output_len=16)


def level(c: int, tput: float, failed: int = 0) -> LevelResult:
    done = 4 - failed
    return LevelResult(
        max_concurrency=c,
        num_requests=4,
        completed=done,
        failed=failed,
        duration=1.0,
        total_input_tokens=64 * done,
        total_output_tokens=16 * done,
        output_throughput=tput,
        median_ttft_ms=10.0,
        errors=["boom"] if failed else [],
    )


def sweep() -> SweepResult:
    return SweepResult(
        config="plain",
        server=ServerFacts(
            mode="attached",
            version="0.5.23",
            server_args={"api_key": "sk-live-abcdefghijkl", "tp_size": 2},
        ),
        workload=WL,
        levels=[level(1, 100.0), level(4, 300.0, failed=4)],
        repeats={1: [level(1, 104.0), level(1, 90.0, failed=4)]},
    )


def test_points_keep_every_valid_sample_and_invalid_points_no_numbers() -> None:
    record = record_from_results([sweep()], source="sweep", hardware={"plain": "cpu"})
    one, four = record.points
    assert (one.concurrency, one.valid, one.verdict) == (1, True, None)
    assert one.samples["output_throughput"] == (100.0, 104.0)  # the failed repeat left out
    assert one.metrics["output_throughput"] == 102.0  # their median
    assert one.invalid_reasons == ("no request completed (4 of 4 failed)",)  # the repeat's
    assert (four.concurrency, four.valid, four.verdict) == (4, False, "invalid")
    assert not four.metrics and not four.samples
    assert any("no request completed" in r for r in four.invalid_reasons)
    assert (record.source, record.hardware_key, record.sglang_version) == ("sweep", "cpu", "0.5.23")
    args = record.provenance["servers"]["plain"]["server_args"]
    assert args == {"api_key": "***", "tp_size": 2}


def test_a_judged_point_takes_the_comparisons_verdict_and_value() -> None:
    judged = PointComparison("plain", 1, WL.key(), Verdict.FAIL, metrics=[])
    record = record_from_results(
        [sweep()], source="pytest", hardware=lambda c: "hw", points={"plain": [judged]}
    )
    assert record.points[0].verdict == "fail" and record.points[0].hardware_key == "hw"
    assert record.points[1].verdict == "invalid"


def test_git_commit_from_the_environment_or_none() -> None:
    assert git_commit(env={"LLMPERF_GIT_COMMIT": "abc123"}) == "abc123"
    assert git_commit(env={"GITHUB_SHA": "def456"}) == "def456"
