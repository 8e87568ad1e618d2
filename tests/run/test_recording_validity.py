"""Recording applies judging's validity policy to every sample, and says what it left out."""

from __future__ import annotations

from pytest_llmperf.run.recording import recorded_entry, valid_samples
from pytest_llmperf.verdicts.validity import ValidityPolicy
from tests.verdicts import WORKLOAD, make_level


def test_every_sample_is_checked_and_invalid_ones_are_left_out_and_counted() -> None:
    good = make_level(4, 1000.0)
    starved = make_level(4, 1400.0, itl=0.0, saturated=True)
    failed = make_level(4, 1100.0, failed=1)  # not the first sample: still checked
    valid, left_out = valid_samples([good, failed, starved], WORKLOAD, ValidityPolicy())
    assert valid == [good]
    assert len(left_out) == 2 and "failed" in left_out[0]
    entry = recorded_entry(
        valid, None, 4, None, version=None, git_commit=None, invalid_left_out=len(left_out)
    )
    assert entry.invalid_left_out == 2
    assert entry.metrics["output_throughput"].n == 1
    assert entry.metrics["output_throughput"].mean == 1000.0
    assert entry.metrics["median_itl_ms"].mean == 10.0  # the starved 0.0 never entered


def test_the_judging_policy_decides_not_the_default() -> None:
    one_failure = make_level(4, 1000.0, failed=1)
    assert valid_samples([one_failure], WORKLOAD, ValidityPolicy())[0] == []
    assert valid_samples([one_failure], WORKLOAD, ValidityPolicy(max_failed=1))[0] == [one_failure]
