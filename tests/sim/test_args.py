"""Command-line parsing: SGLang's flag names, aliases, prefixes and error behaviour."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pytest_llmperf.base import values
from pytest_llmperf.sim.args import parse_args
from pytest_llmperf.sim.faults import Faults


def test_defaults_match_sglang() -> None:
    a = parse_args([])
    k = a.knobs
    assert (k.host, k.port, k.tp_size, k.dp_size) == ("127.0.0.1", 30000, 1, 1)
    assert k.stream_interval == 1 and k.decode_log_interval == 40
    assert k.max_running_requests is None and k.api_key is None
    assert a.faults == Faults()


def test_abbreviations_and_aliases() -> None:
    a = parse_args(
        ["--model", "org/m", "--tp", "2", "--dp", "4", "--tensor-parallel-size", "8"]
        + ["--speculative-draft-model", "org/d", "--mem-frac", "0.7"]
    )
    assert a.knobs.model_path == "org/m"
    assert a.knobs.tp_size == 8  # the later flag wins, as in argparse
    assert a.knobs.dp_size == 4
    assert a.knobs.speculative_draft_model_path == "org/d"
    assert a.knobs.mem_fraction_static == 0.7


def test_all_known_flags_parse() -> None:
    a = parse_args(
        [
            "--model-path", "m", "--host", "0.0.0.0", "--port", "1234",
            "--max-running-requests", "16", "--max-total-tokens", "9000",
            "--chunked-prefill-size", "-1", "--context-length", "4096", "--api-key", "k",
            "--served-model-name", "served", "--speculative-algorithm", "nextn",
            "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", "4", "--stream-interval", "2",
            "--cuda-graph-max-bs", "32", "--disable-cuda-graph", "--enable-metrics",
            "--skip-server-warmup", "--decode-log-interval", "10", "--log-level", "warning",
            "--trust-remote-code", "--sim-profile", "p", "--sim-seed", "7",
            "--sim-jitter", "0.03", "--sim-time-scale", "2", "--sim-slowdown", "1-8:1.5",
            "--sim-slowdown", "9-16:2",
        ]
    )  # fmt: skip
    k = a.knobs
    assert k.host == "0.0.0.0" and k.port == 1234 and k.max_running_requests == 16
    assert k.chunked_prefill_size == -1 and k.context_length == 4096
    assert k.speculative_algorithm == "NEXTN" and k.speculative_num_draft_tokens == 4
    assert k.disable_cuda_graph and k.enable_metrics and k.skip_server_warmup
    assert k.sim_slowdown == ((1, 8, 1.5), (9, 16, 2.0))
    assert k.sim_time_scale == 2.0 and k.sim_seed == 7 and a.trust_remote_code


def test_unknown_flags_are_kept_not_rejected() -> None:
    a = parse_args(["--tp", "2", "--mamba-scheduler-strategy", "no_buffer", "--enable-foo"])
    assert a.knobs.tp_size == 2
    assert a.unknown_args == ("--mamba-scheduler-strategy", "no_buffer", "--enable-foo")
    assert a.knobs.unknown_args == a.unknown_args


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--port", "abc"], "argument --port: invalid int value: 'abc'"),
        (["--tp", "two"], "invalid int value"),
        (["--speculative"], "ambiguous option"),
        (["--sim-slowdown", "8-1:2"], "invalid slowdown"),
        (["--sim-fault", "explode"], "unknown fault"),
        (["--sim-fault", "crash-after-tokens=x"], "needs a token count"),
        (["--tp-size", "0"], "must be >= 1"),
    ],
)
def test_bad_values_exit_2_with_argparse_message(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def _shared_message(parse: object, text: str) -> str:
    assert callable(parse)
    with pytest.raises(ValueError) as exc:
        parse(text)
    return str(exc.value)


@pytest.mark.parametrize(
    "flag, value, parse",
    [
        ("--sim-time-scale", "0", values.parse_positive_float),
        ("--sim-time-scale", "inf", values.parse_positive_float),
        ("--sim-keepalive-timeout", "-1", values.parse_positive_float),
        ("--sim-keepalive-max-requests", "0", values.parse_positive_int),
        ("--sim-launch-speed-sd", "1.5", values.parse_unit_float),
        ("--sim-stall-ms", "-5", values.parse_nonneg_float),
        ("--sim-stall-rate", "nan", values.parse_nonneg_float),
        ("--sim-load-time", "soon", values.parse_nonneg_float),
        ("--sim-jitter", "nan", values.parse_float),
        ("--sim-seed", "x", values.parse_int),
        ("--sim-step-jitter", "-0.1", values.parse_nonneg_float),
    ],
)
def test_sim_flags_use_the_shared_value_parsers(
    flag: str, value: str, parse: object, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ``--sim-*`` flag says what the settings and the CLI say for the same mistake."""
    with pytest.raises(SystemExit) as exc:
        parse_args([flag, value])
    assert exc.value.code == 2
    assert f"argument {flag}: {_shared_message(parse, value)}" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--sim-step-jitter", "0.5"], "argument --sim-step-jitter: must be below 0.5, got 0.5"),
        (["--sim-chat-template-overhead", "5"], "expected PER_MESSAGE,CONSTANT"),
        (["--sim-chat-template-overhead", "5,-1"], "must be zero or more, got -1"),
        (["--sim-fault", "crash-after-tokens=-1"], "needs a token count"),
    ],
)
def test_sim_flag_checks_of_their_own(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_sim_flags_parse_good_values() -> None:
    k = parse_args(
        ["--sim-step-jitter", "0.04", "--sim-chat-template-overhead", "0,3", "--sim-seed", "-2"]
        + ["--sim-jitter", "0.05", "--sim-load-time", "0", "--sim-launch-speed-sd", "1"]
        + ["--sim-fault", "crash-after-tokens=0"]
    )
    assert k.knobs.sim_step_jitter == 0.04 and k.knobs.sim_chat_template_overhead == (0, 3)
    assert k.knobs.sim_seed == -2 and k.knobs.sim_jitter == 0.05 and k.knobs.sim_load_time == 0
    assert k.knobs.sim_launch_speed_sd == 1.0 and k.faults.crash_after_tokens == 0


def test_faults_parse_and_describe() -> None:
    a = parse_args(
        ["--sim-fault", "http-500", "--sim-fault", "cut-stream-after-tokens=50"]
        + ["--sim-fault", "crash-on-start"]
    )
    assert a.faults.http_500 and a.faults.crash_on_start
    assert a.faults.cut_stream_after_tokens == 50
    assert a.faults.describe() == ["crash-on-start", "http-500", "cut-stream-after-tokens=50"]


def test_help_documents_faults() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pytest_llmperf.sim", "--help"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    for name in ("crash-on-start", "hang-stream-after-tokens=N", "stream-error-after-tokens"):
        assert name in out
    assert "--tp-size" in out and "--sim-slowdown" in out


def test_malformed_port_exits_2_as_a_process() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "pytest_llmperf.sim", "--port", "abc"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert res.returncode == 2
    assert "invalid int value: 'abc'" in res.stderr
