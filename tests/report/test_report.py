"""Rendering: seed-style tables, gate table, Markdown, JUnit properties, redaction."""

from __future__ import annotations

import pytest

from pytest_llmperf.report.tables import (
    gate_table,
    junit_properties,
    level_table,
    markdown_summary,
    redact,
    redact_args,
)
from pytest_llmperf.verdicts.baseline import summarize
from pytest_llmperf.verdicts.baseline_file import BaselineEntry
from pytest_llmperf.verdicts.compare import compare_point
from pytest_llmperf.verdicts.gates import Gate, evaluate_gate
from tests.verdicts import MTP, PLAIN, WORKLOAD, make_sweep

MTP_SWEEP = make_sweep("mtp", MTP, cap=48, accept=1.9)
PLAIN_SWEEP = make_sweep("plain", PLAIN)


def _points():  # type: ignore[no-untyped-def]
    # Baseline: mtp measured last week as plain-like numbers at C=64/128 (a regression now).
    base = {c: (v if c < 64 else PLAIN[c]) for c, v in MTP.items()}
    return [
        compare_point(
            "mtp",
            lv,
            BaselineEntry(
                metrics={
                    "output_throughput": summarize("output_throughput", [base[lv.max_concurrency]])
                }
            ),
            workload=WORKLOAD,
        )
        for lv in MTP_SWEEP.levels
    ]


def test_level_table_has_seed_columns_and_verdicts() -> None:
    text = level_table(MTP_SWEEP, _points())
    lines = text.splitlines()
    for col in ("C", "Agg tok/s", "Per-req tok/s", "Tokens", "Wall(s)", "Ok", "TTFT p50/p99"):
        assert col in lines[0]
    row64 = next(line for line in lines if line.split()[0] == "64")
    assert "1571.1" in row64 and "-32.5" in row64 and "fail" in row64
    assert "server capped running requests at 48 (C=64 queues)" in row64
    row1 = next(line for line in lines if line.split()[0] == "1")
    assert "pass" in row1 and "+0.0" in row1 and "1.90" in row1


def test_table_without_baseline_is_narrow() -> None:
    text = level_table(PLAIN_SWEEP)
    assert "verdict" not in text and "2327.0" in text


def test_gate_table_and_markdown() -> None:
    g = evaluate_gate(Gate(config="mtp", reference="plain", factor=0.98), [PLAIN_SWEEP, MTP_SWEEP])
    assert gate_table([g]).count("fail") == 2
    md = markdown_summary([MTP_SWEEP], {"mtp": _points()}, [g])
    assert md.startswith("## LLM performance\n\n")
    assert "| C " in md and "|---" in md.replace(":", "-")
    assert "- mtp at C=128: 1635 tok/s, 41.6 % below plain (2800)" in md


def test_junit_properties() -> None:
    props = dict(junit_properties(_points()[4]))
    assert props["llmperf.verdict"] == "fail"
    assert props["llmperf.output_throughput"] == "1571.1"
    assert props["llmperf.output_throughput.baseline"] == "2327"
    assert props["llmperf.output_throughput.delta_pct"] == "-32.48"
    assert all(isinstance(v, str) for v in props.values())


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("Authorization: Bearer abc.def-123", "Authorization: Bearer ***"),
        ("--api-key s3cret --port 30000", "--api-key *** --port 30000"),
        ("--api-key=s3cret", "--api-key=***"),
        ('{"api_key": "s3cret", "tp": 4}', '{"api_key": ***, "tp": 4}'),
        ("key sk-abcdefghijklmnop used", "key *** used"),
        ("nothing secret here", "nothing secret here"),
        # counts and empty values are not secrets (seen in SGLang and simulator logs)
        ("#token: 12, #cached-token: 0", "#token: 12, #cached-token: 0"),
        ("ServerArgs(api_key=None, max_total_num_tokens=4096)", None),
        ("hf_token=hf_abcdefgh, --speculative-num-draft-tokens 4", None),
    ],
)
def test_redact(raw: str, clean: str | None) -> None:
    if clean is None:  # only the secret goes
        clean = raw.replace("hf_abcdefgh", "***")
    assert redact(raw) == clean


def test_redact_args() -> None:
    assert redact_args(["--model", "m", "--api-key", "s3cret", "--tp", "4"]) == [
        "--model",
        "m",
        "--api-key",
        "***",
        "--tp",
        "4",
    ]
    assert redact_args({"api_key": "s3cret", "tp_size": 4, "nested": {"token": "x"}}) == {
        "api_key": "***",
        "tp_size": 4,
        "nested": {"token": "***"},
    }
    assert redact_args({"api_key": None}) == {"api_key": None}
    assert redact_args({"max_total_num_tokens": 4096, "speculative_num_draft_tokens": 4}) == {
        "max_total_num_tokens": 4096,
        "speculative_num_draft_tokens": 4,
    }
