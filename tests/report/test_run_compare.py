"""``llmperf compare A.json B.json`` and ``llmperf pr-comment``: one run judged against another
with the project's point rule, the points only one run has, and clear errors naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_llmperf.cli import main
from pytest_llmperf.report.html import ReportData
from pytest_llmperf.report.pr_comment import pr_comment
from pytest_llmperf.report.results_file import RunFile, save_run
from pytest_llmperf.report.run_compare import compare_runs
from pytest_llmperf.verdicts.verdict import Verdict
from tests.verdicts import MTP, PLAIN, make_sweep


def _runs(tmp_path: Path) -> tuple[Path, Path]:
    a = RunFile(hardware="hw", sweeps=[make_sweep("plain", PLAIN)])
    slower = {c: v * (0.7 if c == 64 else 1.0) for c, v in PLAIN.items() if c != 128}
    b = RunFile(hardware="hw", sweeps=[make_sweep("plain", slower), make_sweep("mtp", MTP)])
    save_run(a, tmp_path / "main.json")
    save_run(b, tmp_path / "pr.json")
    return tmp_path / "main.json", tmp_path / "pr.json"


def test_b_judged_against_a_point_by_point(tmp_path: Path) -> None:
    from pytest_llmperf.report.results_file import load_run

    a, b = _runs(tmp_path)
    diff = compare_runs(load_run(a), load_run(b))
    p64 = diff.point("plain", make_sweep("plain", PLAIN).workload.key(), 64)
    assert p64 is not None and p64.verdict == Verdict.FAIL
    tput = p64.metric("output_throughput")
    assert tput is not None and tput.change == pytest.approx(-0.3)
    # one sample a side: the rule's assumed noise, said so
    assert tput.decision.noise_assumed
    others = [p for p in diff.points if p.concurrency != 64]
    assert others and all(p.verdict == Verdict.PASS for p in others)
    assert [k[2] for k in diff.only_a] == [128]
    assert {k[0] for k in diff.only_b} == {"mtp"}


def test_compare_two_files_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _runs(tmp_path)
    assert main(["compare", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert "-30.0 %" in out and "fail" in out
    assert "only in main.json (not compared):" in out and "plain sglang-in1000-out1000 C=128" in out
    assert "only in pr.json" in out and "mtp" in out
    assert "plain at C=64: output_throughput" in out  # the failure sentence in full
    # the same run against itself: nothing changed, exit 0
    assert main(["compare", str(a), str(a)]) == 0


def test_compare_errors_name_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, _ = _runs(tmp_path)
    missing = tmp_path / "nope.json"
    assert main(["compare", str(a), str(missing)]) == 2
    assert str(missing) in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["compare", str(bad), str(a)]) == 2
    assert str(bad) in capsys.readouterr().err
    # the original form still needs --baselines, and says what else it takes
    assert main(["compare", str(a)]) == 2
    assert "--baselines DIR, or a second results file" in capsys.readouterr().err
    assert main(["compare", str(a), str(a), "--baselines", str(tmp_path)]) == 2
    assert "not both" in capsys.readouterr().err


def test_pr_comment_against_main(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _runs(tmp_path)
    assert main(["pr-comment", str(b), "--against", str(a)]) == 0
    body = capsys.readouterr().out
    assert body.startswith("## LLM performance")
    assert f"### Against main ({a})" in body
    assert "| plain" in body and "-30.0 %" in body and "fail" in body
    assert "<details><summary>" in body and "plain at C=64: output_throughput" in body
    assert "main only: plain" in body and "C=128" in body
    assert "http" not in body  # links to nothing


def test_pr_comment_escapes_and_redacts() -> None:
    sweep = make_sweep("plain", {1: 100.0})
    from pytest_llmperf.verdicts.compare import PointComparison

    p = PointComparison(
        "plain",
        1,
        sweep.workload.key(),
        Verdict.INVALID,
        invalid_reasons=["<b>bad</b>: api_key=sk-secretsecret123"],
        messages=["plain at C=1: <b>bad</b> --api-key sk-secretsecret123 | pipe"],
    )
    body = pr_comment(ReportData([sweep], {"plain": [p]}))
    assert "sk-secret" not in body and "<b>" not in body
    assert "&lt;b&gt;bad" in body and "\\| pipe" in body
    assert "1 invalid" in body and "FAILED" in body
