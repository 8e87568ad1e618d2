"""The accuracy probe of a run: one config's server answers the generated items, untimed.

A server is asked once per (config, item count, seed, backend) and session; every check that
judges accuracy (the config's points, an A/B holding it) reuses that answer. The requests go to
the live server between timed levels, never during one (the run's server lock), greedy and
bounded (``core/greedy_requests``), so they cost time but no measurement.
"""

from __future__ import annotations

from pytest_llmperf.base.accuracy_items import ITEMS_VERSION, generate_items, is_right, prompt
from pytest_llmperf.base.results import Workload
from pytest_llmperf.core.greedy_requests import ask
from pytest_llmperf.run.perfrun import PerfRun
from pytest_llmperf.verdicts.accuracy import AccuracyComparison, AccuracyRecord, compare_accuracy

__all__ = ["DEADLINE_S", "judge", "probe"]

DEADLINE_S = 600.0  # all of one probe's requests
CONCURRENCY = 4
MAX_TOKENS = 8  # every answer is one word or number; the newline stop ends it sooner
STOP = ["\n"]


def probe(run: PerfRun, config: str, workload: Workload, n: int) -> tuple[AccuracyRecord, str]:
    """``config``'s answers to ``n`` items drawn from the workload's seed, and the first
    failed request's error ("" when none failed)."""
    key = (config, n, workload.seed, workload.backend)
    done = run.accuracy.get(key)
    if done is not None:
        return done
    items = generate_items(n, workload.seed)
    with run.servers.lock:
        handle = run.server(config)
        got = ask(
            handle.url,
            [prompt(i.question) for i in items],
            backend=workload.backend,
            api_key=handle.api_key,
            model=handle.kind.served_model if handle.kind is not None else None,
            max_tokens=MAX_TOKENS,
            stop=STOP,
            concurrency=CONCURRENCY,
            request_timeout_s=workload.request_timeout_s,
            deadline_s=DEADLINE_S,
        )
    right = [is_right(i, t) for i, t in zip(items, got.texts, strict=True)]
    record = AccuracyRecord.of(right, items_version=ITEMS_VERSION, seed=workload.seed,
                               failed=got.failed)  # fmt: skip
    run.accuracy[key] = (record, got.errors[0] if got.errors else "")
    return run.accuracy[key]


def judge(
    run: PerfRun,
    config: str,
    workload: Workload,
    n: int,
    old: AccuracyRecord | None,
    *,
    drop: float,
    new_label: str,
    old_label: str,
) -> AccuracyComparison:
    """``config``'s probe against ``old`` (a baseline's or the other side's answers)."""
    record, error = probe(run, config, workload, n)
    res = compare_accuracy(record, old, drop=drop, new_label=new_label, old_label=old_label)
    if error:
        res = res.model_copy(update={"message": f"{res.message} (first error: {error})"})
    return res
