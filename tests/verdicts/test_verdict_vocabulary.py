"""One verdict vocabulary: every judge and every file speaks ``Verdict``; old files still load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_llmperf.report.ab_table import AB_SCHEMA_VERSION, ab_table, load_ab, save_ab
from pytest_llmperf.verdicts.paired import judge_paired
from pytest_llmperf.verdicts.stats import decide
from pytest_llmperf.verdicts.verdict import Verdict

# An ab.json as schema 1 wrote it: upper-case verdicts, the A/B named ``compare``.
_SCHEMA_1_POINT = {
    "compare": "new-vs-old",
    "candidate": "new",
    "reference": "old",
    "metric": "output_throughput",
    "concurrency": 4,
    "rounds": 3,
    "order": [["old", "new"], ["new", "old"], ["old", "new"]],
    "candidate_values": [90.0, 91.0, None],
    "reference_values": [100.0, 101.0, None],
    "change": -0.1,
    "ci_low": -0.12,
    "ci_high": -0.08,
    "confidence": 0.95,
    "tolerance": 0.05,
    "adjust": "none",
    "verdict": "FAIL",
    "message": "output_throughput is 10.0 % lower",
}


def test_a_schema_1_ab_file_still_loads_in_the_one_vocabulary(tmp_path: Path) -> None:
    old = tmp_path / "ab.json"
    old.write_text(json.dumps({"schema_version": 1, "points": [_SCHEMA_1_POINT]}))
    point = load_ab(old).points[0]
    assert point.verdict is Verdict.FAIL and point.ab == "new-vs-old"

    # Written again, it is the current schema with the lower-case spelling only.
    new = tmp_path / "again.json"
    save_ab([point], new)
    data = json.loads(new.read_text())
    assert data["schema_version"] == AB_SCHEMA_VERSION == 2
    assert data["points"][0]["verdict"] == "fail" and data["points"][0]["ab"] == "new-vs-old"
    assert "FAIL" not in ab_table([point]) and " fail" in ab_table([point])


def test_an_unknown_verdict_in_ab_json_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "ab.json"
    bad.write_text(
        json.dumps({"schema_version": 2, "points": [{**_SCHEMA_1_POINT, "verdict": "ok"}]})
    )
    with pytest.raises(ValueError, match="verdict"):
        load_ab(bad)


def test_every_judge_returns_members_of_the_one_enum() -> None:
    paired = judge_paired(
        [-0.1, -0.11, -0.09],
        candidate="new",
        reference="old",
        metric_name="output_throughput",
        concurrency=4,
        tolerance=0.05,
    )
    assert type(paired.verdict) is Verdict and paired.verdict is Verdict.FAIL
    dec = decide(
        [100.0],
        base_mean=100.0,
        base_std=0.0,
        base_n=1,
        tolerance=0.05,
        direction="higher",
    )
    assert type(dec.outcome) is Verdict and dec.outcome is Verdict.PASS
