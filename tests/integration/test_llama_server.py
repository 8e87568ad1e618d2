"""Against a real engine: llama.cpp's ``llama-server`` (CPU, a tiny random-weight model).

Runs only when ``LLMPERF_LLAMA_SERVER`` names the binary (model from ``LLMPERF_LLAMA_MODEL``,
default ``~/.cache/llmperf-peers/models/small-llama.gguf``); skips otherwise. llama-server
closes its connection after every streamed response without ``Connection: close``, and has
no ``/flush_cache``: what a load generator meets outside SGLang.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from pytest_llmperf.base.results import Workload
from pytest_llmperf.core.sweep import run_sweep
from pytest_llmperf.verdicts.validity import check_level

BINARY = os.environ.get("LLMPERF_LLAMA_SERVER", "")
MODEL = os.environ.get(
    "LLMPERF_LLAMA_MODEL",
    str(Path.home() / ".cache/llmperf-peers/models/small-llama.gguf"),
)
START_TIMEOUT_S = 120.0

pytestmark = pytest.mark.skipif(
    not BINARY, reason="set LLMPERF_LLAMA_SERVER to a llama-server binary to run"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def llama_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not Path(BINARY).is_file() or not Path(MODEL).is_file():
        pytest.fail(f"LLMPERF_LLAMA_SERVER={BINARY!r} or model {MODEL!r} does not exist")
    port = _free_port()
    log = tmp_path_factory.mktemp("llama") / "server.log"
    argv = [BINARY, "-m", MODEL, "-a", "small", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["-np", "4", "-c", "4096", "-t", "1", "--no-webui", "--metrics"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:  # bounded wait for /health
            if proc.poll() is not None:
                pytest.fail(f"llama-server exited with {proc.returncode}; log: {log}")
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        else:
            pytest.fail(f"llama-server not healthy within {START_TIMEOUT_S:.0f} s; log: {log}")
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def test_completions_sweep_loses_no_request_and_counts_tokens_exactly(llama_url: str) -> None:
    workload = Workload(backend="openai", input_len=32, output_len=16, requests_per_level=70)
    result = run_sweep(llama_url, [1, 4, 16], workload)
    for level in result.levels:
        c = level.max_concurrency
        assert level.failed == 0, (c, level.errors)
        assert level.total_output_tokens == 70 * 16, c
        assert level.total_input_tokens == 70 * 32, c
        assert level.total_cached_tokens == 0, c  # fresh prompts at every level
        # A shared CI host can stall the event loop; that verdict is the monitor's, not ours.
        reasons = [r for r in check_level(level, workload) if "load generator" not in r]
        assert reasons == [], c


def test_chat_level_is_valid_with_the_servers_template(llama_url: str) -> None:
    # 128: this model's vocabulary spells the ChatML markers out, ~57 tokens of template
    workload = Workload(backend="openai-chat", input_len=128, output_len=16, requests_per_level=8)
    result = run_sweep(llama_url, [4], workload)
    (level,) = result.levels
    assert level.failed == 0, level.errors
    assert level.prompt_overhead_tokens > 0  # the template and the prompt's number
    assert level.total_input_tokens == 8 * 128  # as the server counts, template included
    assert level.total_output_tokens == 8 * 16
    reasons = [r for r in check_level(level, workload) if "load generator" not in r]
    assert reasons == []
