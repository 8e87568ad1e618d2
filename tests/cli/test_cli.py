"""``llmperf sweep``: flag validation (exit 2, naming the flag), table and JSON output."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from pytest_llmperf.base.results import Workload
from pytest_llmperf.cli import _ProgressLine, build_parser, format_table, main
from pytest_llmperf.core.progress import Progress
from pytest_llmperf.core.sweep import run_sweep
from tests.sim_servers import running_sim


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
    assert args.levels == (1, 2)


def test_missing_api_key_env_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LLMPERF_TEST_KEY", raising=False)
    code = main(["sweep", "--url", "http://127.0.0.1:1", "--api-key-env", "LLMPERF_TEST_KEY"])
    assert code == 2 and "LLMPERF_TEST_KEY" in capsys.readouterr().err


def test_sweep_prints_table_and_writes_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLMPERF_TEST_KEY", "k-123")
    out = tmp_path / "r.json"
    with running_sim("--api-key", "k-123") as server:
        code = main(
            ["sweep", "--url", server.url, "-c", "1,2", "--input-len", "8", "--output-len", "6",
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
    err = capsys.readouterr().err
    assert "warm-up request" in err and "failed" in err
    # The progress line does not claim a warm-up that failed went fine.
    assert "warm-up done" not in err and "warm-up failed" in err


@pytest.mark.parametrize("backend", ["openai", "openai-chat"])
def test_openai_backends_down_server_is_one_line(
    backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["sweep", "--url", "http://127.0.0.1:9", "--backend", backend, "-c", "1",
                 "--input-len", "8", "--output-len", "2"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("llmperf sweep: error:"), err
    assert "http://127.0.0.1:9/v1/models" in lines[0]


@pytest.mark.parametrize("backend", ["sglang", "openai"])
def test_wrong_api_key_is_one_line_and_never_printed(
    backend: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLMPERF_TEST_KEY", "wrong-key-456")
    with running_sim("--api-key", "right-key-123") as server:
        code = main(["sweep", "--url", server.url, "--backend", backend, "-c", "1",
                     "--input-len", "8", "--output-len", "2",
                     "--api-key-env", "LLMPERF_TEST_KEY"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1
    assert "Traceback" not in err and "wrong-key-456" not in err
    errors = [line for line in err.splitlines() if line.startswith("llmperf sweep: error:")]
    assert len(errors) == 1 and "401" in errors[0], err


def test_own_options_after_launch_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    # Before: `-c 64` went to the server's flags and all six default levels ran.
    code = main(["sweep", "--launch", "--tp-size", "1", "-c", "64", "--output-len=8"])
    err = capsys.readouterr().err
    assert code == 2
    assert "-c --output-len=8 after --launch" in err


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_line_is_drawn_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    tty = _Terminal()
    monkeypatch.setattr(sys, "stderr", tty)
    line = _ProgressLine()  # the CLI's own construction: no argument, so sys.stderr
    line(Progress(4, 3, 8, 0, 300, 1.0, "level"))
    line(Progress(4, 8, 8, 0, 800, 2.0, "level-done"))
    assert tty.getvalue() == (
        "\r\x1b[KC=4: 3/8 requests, 300 tok/s so far\r\x1b[KC=4: 8/8 requests, 400 tok/s\n"
    )


def test_progress_line_in_a_log_is_one_line_per_level() -> None:
    log = io.StringIO()
    line = _ProgressLine(log)
    line(Progress(4, 3, 8, 0, 300, 1.0, "level"))
    line(Progress(4, 8, 8, 1, 800, 2.0, "level-done"))
    assert log.getvalue() == "C=4: 8/8 requests, 400 tok/s, 1 failed\n"


def test_table_flags_a_delivered_length_shortfall() -> None:
    workload = Workload(input_len=8, output_len=1000, requests_per_level=4)
    with running_sim("--sim-time-scale", "0.1") as server:  # 10x real time: no timing asserted
        result = run_sweep(server.url, [1], workload)
    full = format_table(result)
    assert "SHORT OUTPUT" not in full and "(!)" not in full
    # The server stopped early: 96 of the 4000 tokens the four requests asked for.
    lv = result.levels[0].model_copy(update={"total_output_tokens": 96})
    short = format_table(result.model_copy(update={"levels": [lv]}))
    assert "96 of 4000 (!)" in short
    assert "SHORT OUTPUT: 96 of 4000 requested output tokens delivered (2.4 %)" in short
