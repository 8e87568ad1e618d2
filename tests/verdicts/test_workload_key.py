"""The workload key names everything that changes the numbers, and nothing else.

A baseline recorded with 8 requests per level, another seed or a sampling temperature must not
be compared with a run of the default workload; the default key must stay what the committed
baselines use.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_llmperf.base.results import Workload
from pytest_llmperf.run.suite import load_suite
from pytest_llmperf.verdicts.baseline import BaselineStore, entry_from_levels
from pytest_llmperf.verdicts.baseline_file import EntryKey, load_baseline_file
from pytest_llmperf.verdicts.compare import Verdict, compare_sweep

from . import PLAIN, WORKLOAD, make_sweep

REPO = Path(__file__).resolve().parents[2]


def test_default_key_is_unchanged() -> None:
    assert Workload().key() == "sglang-in1000-out1000"
    assert Workload(input_len=64, output_len=16).key() == "sglang-in64-out16"


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"requests_per_level": 8}, "sglang-in1000-out1000-req8"),
        ({"seed": 7}, "sglang-in1000-out1000-seed7"),
        ({"seed": -1}, "sglang-in1000-out1000-seed-1"),
        ({"temperature": 0.7}, "sglang-in1000-out1000-temp0.7"),
        ({"request_rate": 2.0}, "sglang-in1000-out1000-rate2"),
        ({"backend": "openai-chat"}, "openai-chat-in1000-out1000"),
        (
            {"requests_per_level": 64, "request_rate": 1.5, "seed": 3, "temperature": 1.0},
            "sglang-in1000-out1000-req64-rate1.5-seed3-temp1",
        ),
    ],
)
def test_what_changes_the_numbers_changes_the_key(change: dict[str, object], key: str) -> None:
    assert Workload(**change).key() == key  # type: ignore[arg-type]


def test_timeout_does_not_change_the_key() -> None:
    assert Workload(request_timeout_s=30).key() == Workload().key()


def test_keys_of_distinct_workloads_are_distinct() -> None:
    variants = [
        Workload(),
        Workload(requests_per_level=4),
        Workload(requests_per_level=40),
        Workload(seed=4),
        Workload(seed=40),
        Workload(temperature=0.4),
        Workload(request_rate=4),
        Workload(backend="openai"),
        Workload(input_len=100, output_len=10),
        Workload(input_len=10, output_len=100),
    ]
    assert len({w.key() for w in variants}) == len(variants)


def test_committed_baselines_match_the_default_suite_workload() -> None:
    """perf_tests/llmperf.toml's workload finds its entries in baselines/sim-fast-moe/."""
    sweep = load_suite(REPO / "perf_tests" / "llmperf.toml").sweep
    wl = Workload(
        input_len=sweep.input_len or 1000,
        output_len=sweep.output_len or 1000,
        seed=sweep.seed or 0,
        requests_per_level=sweep.requests,
        request_rate=sweep.request_rate,
    )
    for config in ("plain", "mtp"):
        f = load_baseline_file(REPO / "baselines" / "sim-fast-moe" / f"{config}.json")
        assert wl.key() in f.workloads, f"{config}: {sorted(f.workloads)}"
        assert f.entry(wl.key(), 16) is not None


def test_a_baseline_of_other_request_counts_is_not_compared(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    sweep = make_sweep("plain", PLAIN)
    other = WORKLOAD.model_copy(update={"requests_per_level": 8})
    for lv in sweep.levels:
        key = EntryKey("hw", "plain", other.key(), lv.max_concurrency)
        store.queue_update(key, entry_from_levels([lv], ["output_throughput"]))
    store.flush()
    points = compare_sweep(sweep, BaselineStore(tmp_path), "hw")
    assert {p.verdict for p in points} == {Verdict.MISSING}
    points = compare_sweep(
        sweep.model_copy(update={"workload": other}), BaselineStore(tmp_path), "hw"
    )
    assert {p.verdict for p in points} == {Verdict.PASS}
