"""``llmperf sweep``: flag validation (exit 2, naming the flag), table and JSON output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_llmperf.cli import build_parser, main

from .fake_server import FakeServer


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["-c", "0"], "-c/--concurrency"),
        (["-c", ""], "-c/--concurrency"),
        (["-c", "1,x"], "-c/--concurrency"),
        (["--output-len", "0"], "--output-len"),
        (["--input-len", "-5"], "--input-len"),
        (["--request-rate", "0"], "--request-rate"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(
    argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["sweep", "--url", "http://127.0.0.1:1", *argv])
    assert exc.value.code == 2
    assert flag in capsys.readouterr().err


def test_url_or_launch_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["sweep"])
    assert exc.value.code == 2
    assert "--url" in capsys.readouterr().err


def test_launch_takes_the_remaining_flags() -> None:
    args = build_parser().parse_args(
        ["sweep", "-c", "1,2", "--launch", "--model-path", "m", "--speculative-algorithm", "NEXTN"]
    )
    assert args.launch == ["--model-path", "m", "--speculative-algorithm", "NEXTN"]
    assert args.concurrency == [1, 2]


def test_missing_api_key_env_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LLMPERF_TEST_KEY", raising=False)
    code = main(["sweep", "--url", "http://127.0.0.1:1", "--api-key-env", "LLMPERF_TEST_KEY"])
    assert code == 2 and "LLMPERF_TEST_KEY" in capsys.readouterr().err


def test_sweep_prints_table_and_writes_json(
    fake_server: FakeServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_server.config.api_key = "k-123"
    monkeypatch.setenv("LLMPERF_TEST_KEY", "k-123")
    out = tmp_path / "r.json"
    code = main(
        ["sweep", "--url", fake_server.url, "-c", "1,2", "--input-len", "8", "--output-len", "6",
         "--api-key-env", "LLMPERF_TEST_KEY", "--json", str(out)]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "Agg tok/s" in captured.out and "Per-req tok/s" in captured.out
    assert "C=2: 4/4 requests" in captured.err
    assert "k-123" not in captured.out + captured.err
    data = json.loads(out.read_text())
    assert data["schema_version"] == 1
    assert [lv["max_concurrency"] for lv in data["levels"]] == [1, 2]
    assert data["levels"][1]["total_output_tokens"] == 4 * 6


def test_unreachable_server_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["sweep", "--url", "http://127.0.0.1:9", "-c", "1", "--output-len", "2"])
    assert code == 1
    assert "warm-up" in capsys.readouterr().err
