"""Cross-config gates on seed-003 numbers, where parsing, crossover concurrency."""

from __future__ import annotations

import pytest

from pytest_llmperf.verdicts.compare import Verdict
from pytest_llmperf.verdicts.gates import (
    Gate,
    GateError,
    crossover_concurrency,
    evaluate_gate,
    load_gates,
    parse_where,
)

from . import MTP, PLAIN, make_sweep

PLAIN_SWEEP = make_sweep("plain", PLAIN)
MTP_SWEEP = make_sweep("mtp", MTP, cap=48, accept=2.0)


def test_mtp_never_loses_to_plain_fails_exactly_at_64_and_128() -> None:
    gate = Gate(config="mtp", reference="plain", op=">=", factor=0.98)
    result = evaluate_gate(gate, [PLAIN_SWEEP, MTP_SWEEP])
    assert result.verdict == Verdict.FAIL
    assert [p.concurrency for p in result.failed] == [64, 128]
    assert [p.concurrency for p in result.points] == [1, 4, 16, 32, 64, 128]
    assert result.failed[0].message == (
        "mtp at C=64: 1571 tok/s, 32.5 % below plain (2327), needs >= 0.98 × plain (2280); "
        "server capped running requests at 48 (C=64 queues); accept length 2.00"
    )


def test_speedup_gate_at_low_concurrency() -> None:
    assert (
        evaluate_gate(
            Gate(config="mtp", reference="plain", factor=1.2, where="C<=4"),
            [PLAIN_SWEEP, MTP_SWEEP],
        )
        .failed[0]
        .concurrency
        == 1
    )  # 121.5 < 1.2 × 108 = 129.6; C=4 passes (400.5 ≥ 343.2)
    ok = evaluate_gate(
        Gate(config="mtp", reference="plain", factor=1.3, where="C in 4,16"),
        [PLAIN_SWEEP, MTP_SWEEP],
    )
    assert ok.verdict == Verdict.PASS and [p.concurrency for p in ok.points] == [4, 16]


def test_crossover_is_32_on_seed_numbers() -> None:
    assert crossover_concurrency(MTP_SWEEP, PLAIN_SWEEP, "output_throughput") == 32
    assert crossover_concurrency(PLAIN_SWEEP, MTP_SWEEP) is None
    # Never loses -> the largest common C.
    faster = make_sweep("fast", {c: v * 2 for c, v in PLAIN.items()})
    assert crossover_concurrency(faster, PLAIN_SWEEP) == 128


def test_crossover_lower_is_better_metric() -> None:
    a = make_sweep("a", {1: 100, 4: 100})
    b = make_sweep("b", {1: 100, 4: 100})
    a.levels[0].median_ttft_ms, b.levels[0].median_ttft_ms = 50.0, 60.0  # a wins at C=1
    a.levels[1].median_ttft_ms, b.levels[1].median_ttft_ms = 90.0, 60.0  # loses at C=4
    assert crossover_concurrency(a, b, "median_ttft_ms") == 1


@pytest.mark.parametrize(
    ("text", "selected"),
    [
        ("all", [1, 4, 16, 32, 64, 128]),
        ("C<=4", [1, 4]),
        ("C >= 64", [64, 128]),
        ("C in 1,4", [1, 4]),
        ("C in [16, 32]", [16, 32]),
        ("C>=4 and C<32", [4, 16]),
        ("C==32", [32]),
    ],
)
def test_where_clauses(text: str, selected: list[int]) -> None:
    w = parse_where(text)
    assert [c for c in (1, 4, 16, 32, 64, 128) if w.matches(c)] == selected


@pytest.mark.parametrize("text", ["X<=4", "C<=four", "C in", "C in a,b", "C ~ 4"])
def test_bad_where_clause(text: str) -> None:
    with pytest.raises(GateError, match="expected 'all'"):
        parse_where(text)


def test_load_gates_errors_name_index_and_field() -> None:
    gates = load_gates([{"config": "mtp", "reference": "plain", "factor": 1.2, "where": "C<=4"}])
    assert gates[0].describe() == "mtp >= 1.2 × plain output_throughput at C<=4"
    with pytest.raises(GateError) as info:
        load_gates(
            [
                {"config": "mtp", "reference": "plain"},
                {
                    "config": "mtp",
                    "reference": "plain",
                    "factor": -1,
                    "where": "Q<3",
                    "metric": "tput",
                },
            ],
            source="perf.toml [[gates]]",
        )
    msg = str(info.value)
    assert "perf.toml [[gates]][1].factor: Input should be greater than 0" in msg
    assert "[1].where: where clause 'Q<3'" in msg
    assert "[1].metric: unknown metric 'tput'" in msg
    assert "[0]" not in msg


def test_invalid_level_makes_gate_point_invalid() -> None:
    bad = make_sweep("mtp", MTP, cap=48)
    bad.levels[2] = bad.levels[2].model_copy(update={"failed": 3, "completed": 29})
    r = evaluate_gate(Gate(config="mtp", reference="plain", factor=0.98), [PLAIN_SWEEP, bad])
    p16 = next(p for p in r.points if p.concurrency == 16)
    assert p16.verdict == Verdict.INVALID and "mtp: 3 of 32 requests failed" in p16.message


def test_a_gate_names_an_accept_length_below_the_configs_baseline() -> None:
    from pytest_llmperf.verdicts.baseline import summarize
    from pytest_llmperf.verdicts.baseline_file import BaselineEntry

    gate = Gate(config="mtp", reference="plain", op=">=", factor=0.98, where="C==64")
    recorded = BaselineEntry(metrics={"accept_length": summarize("accept_length", [3.0])})
    res = evaluate_gate(gate, [PLAIN_SWEEP, MTP_SWEEP], baseline=lambda cfg, c: recorded)
    assert res.verdict == Verdict.FAIL
    assert "accept length 2.00 is below its baseline 3.00" in res.message()
    plain = evaluate_gate(gate, [PLAIN_SWEEP, MTP_SWEEP])  # no baseline: the number alone
    assert "accept length 2.00" in plain.message() and "below its baseline" not in plain.message()
