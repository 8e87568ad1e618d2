"""Servers launched from a config's own ``command``: waited for on their health path, logged
and torn down like SGLang. The llama-server test runs only where the binary is given by
``LLMPERF_LLAMA_SERVER`` (model: ``LLMPERF_LLAMA_MODEL``)."""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path

import httpx
import pytest

from pytest_llmperf.base.results import Workload
from pytest_llmperf.launch import launcher
from pytest_llmperf.launch.launcher import LaunchError, ServerStartError, launch
from pytest_llmperf.launch.server_config import ServerConfig
from pytest_llmperf.run.ab import ABRun
from pytest_llmperf.run.perfrun import PerfRun
from pytest_llmperf.run.suite import suite_from_data
from tests.launch._helpers import is_alive, wait_dead

HTTP_SERVER = [sys.executable, "-m", "http.server", "{port}", "--bind", "{host}"]


def test_command_server_is_launched_waited_for_and_stopped(tmp_path: Path) -> None:
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "ready").write_text("ok")
    cfg = ServerConfig(
        name="http",
        model="none",
        command=(*HTTP_SERVER, "--directory", str(tmp_path / "www")),
        health="/ready",
        launch_timeout_s=30,
    )
    with launch(cfg, log_dir=tmp_path / "logs", simulate=None) as handle:
        assert handle.mode == "launched" and handle.pid is not None
        assert handle.argv[:3] == [sys.executable, "-m", "http.server"]
        assert handle.argv[3] == handle.url.rsplit(":", 1)[1]  # {port} substituted
        assert handle.kind is not None and handle.kind.health_route == "/ready"
        assert handle.kind.kind == "openai-compatible" and handle.kind.served_model is None
        assert httpx.get(f"{handle.url}/ready", trust_env=False).text == "ok"
        assert launcher.live_servers() == [handle]
        pid = handle.pid
    assert handle.closed and not is_alive(pid) and launcher.live_servers() == []
    log = handle.log_path
    assert log is not None and "# llmperf: launched 'http' attempt 1" in log.read_text()
    assert '"GET /ready HTTP/1.1" 200' in log.read_text()  # the server's own output is logged


def test_command_server_that_never_gets_healthy(tmp_path: Path) -> None:
    cfg = ServerConfig(name="http", model="none", command=tuple(HTTP_SERVER), health="/nope")
    with pytest.raises(ServerStartError, match=r"did not become healthy within 2 s") as info:
        launch(cfg, log_dir=tmp_path, health_timeout_s=2.0)
    assert "/nope: HTTP 404" in str(info.value) and info.value.exit_code == -15


def test_missing_command_binary_names_the_field(tmp_path: Path) -> None:
    cfg = ServerConfig(name="x", model="m", command=("/nonexistent/server", "{port}"))
    with pytest.raises(LaunchError, match=r"'x'.command\[0\]: cannot start /nonexistent/server"):
        launch(cfg, log_dir=tmp_path)


LLAMA = os.environ.get("LLMPERF_LLAMA_SERVER")
LLAMA_MODEL = os.environ.get(
    "LLMPERF_LLAMA_MODEL", str(Path("~/.cache/llmperf-peers/models/small-llama.gguf").expanduser())
)


@pytest.mark.skipif(not LLAMA, reason="set LLMPERF_LLAMA_SERVER to a llama-server binary")
def test_llama_server_via_command(tmp_path: Path) -> None:
    assert LLAMA is not None
    if not Path(LLAMA_MODEL).is_file():
        pytest.fail(f"LLMPERF_LLAMA_SERVER is set but the model {LLAMA_MODEL} does not exist")
    command = [LLAMA, "-m", LLAMA_MODEL, "-a", "{model}", "--host", "{host}", "--port", "{port}"]
    command += ["-np", "4", "-c", "4096", "-t", "1", "--no-webui", "--metrics"]
    suite = suite_from_data(
        {
            "server": [
                {"name": "llama", "model": "small", "command": command, "launch_timeout_s": 120}
            ]
        },
        source="test",
    )
    run = PerfRun(suite=suite, output_dir=tmp_path, env=dict(os.environ))
    assert run.mode_for("llama") == "launched"
    try:
        handle = run.server("llama")
        assert handle.kind is not None and handle.kind.health_route == "/health"
        assert handle.kind.served_model == "small" and handle.kind.backend == "openai"
        assert run.suggested_backend("llama") == "openai"
        wl = Workload(backend="openai", input_len=32, output_len=8, requests_per_level=4)
        level = run.measure("llama", wl, 2)
        print(
            f"llama-server C=2: {level.completed}/{level.num_requests} ok, "
            f"{level.output_throughput:.1f} tok/s, median TTFT {level.median_ttft_ms} ms"
        )
        assert level.completed >= 1 and level.total_output_tokens >= 8
        pid = handle.pid
        assert pid is not None
    finally:
        run.close()
    assert not is_alive(pid)


@pytest.mark.skipif(not LLAMA, reason="set LLMPERF_LLAMA_SERVER to a llama-server binary")
def test_llama_server_ab_relaunches_both_every_round_and_sees_a_slot_cap(tmp_path: Path) -> None:
    """Same-job A/B against a real engine: "new" is llama-server with one slot (like SGLang
    capping max_running_requests), "old" with four; at C=4 the cap serializes the requests."""
    assert LLAMA is not None
    if not Path(LLAMA_MODEL).is_file():
        pytest.fail(f"LLMPERF_LLAMA_SERVER is set but the model {LLAMA_MODEL} does not exist")

    def command(slots: int) -> list[str]:
        argv = [LLAMA, "-m", LLAMA_MODEL, "-a", "{model}", "--host", "{host}", "--port", "{port}"]
        return argv + ["-np", str(slots), "-c", str(1024 * slots), "-t", "1", "--no-webui"]

    servers = [
        {"name": name, "model": "small", "command": command(slots), "launch_timeout_s": 120}
        for name, slots in (("old", 4), ("new", 1))
    ]
    compare = {"candidate": "new", "reference": "old", "rounds": 3}
    suite = suite_from_data({"server": servers, "ab": [compare]}, source="test")
    run = PerfRun(suite=suite, output_dir=tmp_path, env=dict(os.environ))
    wl = Workload(backend="openai", input_len=32, output_len=32, requests_per_level=8)
    ab = ABRun(suite.ab[0], (1, 4), wl, run)
    try:
        ab.measure()
    finally:
        run.close()
    assert launcher.live_servers() == []
    assert ab.orders == [("old", "new"), ("new", "old"), ("old", "new")]
    logs = sorted(p.name for p in (tmp_path / "logs").iterdir())
    assert len(logs) == 6, logs  # a fresh launch of each server in every round
    # No failed request, exact token counts (a busy host may starve the client: that level
    # is then left out of the pairs, which is what the validity check is for).
    reasons = [r for rs in ab.invalid.values() for r in rs]
    assert [r for r in reasons if "load generator" not in r] == []
    old, new = ab.values["old"][4], ab.values["new"][4]
    print(f"llama-server A/B at C=4, tok/s per round: old {old}, new {new}; invalid {reasons}")
    print(ab.result(1).message, ab.result(4).message, sep="\n")
    # One slot serves four clients one at a time: slower than four slots in every valid round.
    pairs = [(o, n) for o, n in zip(old, new, strict=True) if math.isfinite(o + n)]
    assert len(pairs) >= 2 and all(n < o for o, n in pairs), (old, new)
    assert ab.result(4).change < 0


PRINT_ENV_THEN_SERVE = (
    "import os, sys, runpy; print(sorted(os.environ.items()), flush=True); "
    "sys.argv = ['http.server', sys.argv[1], '--bind', sys.argv[2]]; "
    "runpy.run_module('http.server', run_name='__main__')"
)


def test_the_session_key_is_not_inherited_and_no_secret_stays_in_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_key, session_key = "sk-env-7f3c19", "sk-cli-9d2e44"
    monkeypatch.setenv("LLMPERF_API_KEY", env_key)
    # The wrapper prints its environment, and the session key is in its own env by the
    # config's choice: both are scrubbed from the log; LLMPERF_API_KEY is never passed on.
    cfg = ServerConfig(
        name="wrapper",
        model="none",
        command=(sys.executable, "-c", PRINT_ENV_THEN_SERVE, "{port}", "{host}"),
        env={"WRAPPER_TOKEN": session_key},
        health="/",
        launch_timeout_s=30,
    )
    with launch(cfg, log_dir=tmp_path, secrets=(session_key,)) as handle:
        assert handle.log_path is not None
        deadline = time.monotonic() + 10
        while "WRAPPER_TOKEN" not in handle.log_path.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "LLMPERF_API_KEY" not in handle.log_path.read_text()
        assert "WRAPPER_TOKEN" in handle.log_path.read_text()
        assert session_key not in handle.log_tail(5)
    text = handle.log_path.read_text()
    assert session_key not in text and env_key not in text and "'***'" in text


DAEMONIZING = Path(__file__).parent / "fixtures" / "daemonizing_server.py"


def test_a_command_that_daemonizes_its_server_is_an_error_and_the_daemon_is_stopped(
    tmp_path: Path,
) -> None:
    pid_file = tmp_path / "daemon.pid"
    cfg = ServerConfig(
        name="daemon",
        model="none",
        command=(sys.executable, str(DAEMONIZING), "{port}", "{host}", str(pid_file)),
        health="/",
        launch_timeout_s=30,
    )
    with pytest.raises(ServerStartError, match=r"exited with code 0") as info:
        launch(cfg, log_dir=tmp_path / "logs")
    text = str(info.value)
    assert pid_file.exists()
    daemon = int(pid_file.read_text())
    assert f"left running pid {daemon}" in text and "foreground, not daemonize" in text
    assert wait_dead([daemon], 10.0) == []


def test_a_limit_the_server_printed_before_its_traceback_is_in_the_error(tmp_path: Path) -> None:
    """SGLang prints "Max running requests is reset to 48" early; the traceback of its exit
    fills the log tail. The error names that line under "earlier, the server said"."""
    script = (
        "print('Max running requests is reset to 48 for speculative decoding.', flush=True)\n"
        "for i in range(80): print('  File \"x.py\", line', i, 'in f', flush=True)\n"
        "raise SystemExit(1)\n"
    )
    cfg = ServerConfig(name="spec", model="m", command=(sys.executable, "-c", script, "{port}"))
    with pytest.raises(ServerStartError) as info:
        launch(cfg, log_dir=tmp_path, health_timeout_s=20.0)
    text = str(info.value)
    assert "exited with code 1" in text
    head, _, tail = text.partition("last ")
    assert "earlier, the server said:\n    Max running requests is reset to 48" in head
    assert "reset to 48" not in tail  # it was pushed out of the tail: said once, above it
