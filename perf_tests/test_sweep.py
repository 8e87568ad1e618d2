"""Every (server, concurrency) point against its stored baseline.

One test id per point (``test_sweep[mtp-C64]``), so ``-k C64`` and JUnit reports work; a point
is measured once per session however many tests assert on it.
"""


def test_sweep(llmperf_point):
    llmperf_point.check()


def test_no_failed_requests(llmperf_point):
    result = llmperf_point.result
    assert result.failed == 0, (
        f"{llmperf_point.config} at C={llmperf_point.concurrency}: {result.errors}"
    )
