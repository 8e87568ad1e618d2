"""Against the real SGLang server (CPU build of sglang, a tiny random-weight Llama).

Runs only when ``LLMPERF_SGLANG_PYTHON`` names the python of a venv with sglang installed
(``LLMPERF_SGLANG_MODEL`` the model directory, default the 32k-vocabulary one next to that
venv); skips otherwise. Each test is small (levels of 1-4, 32-64 prompt tokens, 16 output
tokens): the point is that the plugin's paths work on what a current SGLang really sends,
not speed. Plugin runs go through ``pytest`` in a subprocess over a suite in a tmp dir, as a
user runs them; the rest drive ``run_sweep`` against a server started by hand.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from pytest_llmperf.base.results import Workload
from pytest_llmperf.core.server_probe import flush_cache, get_server_info
from pytest_llmperf.core.sweep import run_sweep
from pytest_llmperf.verdicts.validity import ValidityPolicy, is_valid

PYTHON = os.environ.get("LLMPERF_SGLANG_PYTHON", "")
MODEL = os.environ.get(
    "LLMPERF_SGLANG_MODEL",
    str(Path(PYTHON).parent.parent.parent / "model32k") if PYTHON else "",
)
# What the CPU build needs (sglang-cpu.sh): torch-native kernels, no graphs, a small KV pool,
# and a scheduler that sleeps when idle instead of spinning a core.
CPU_ARGS = [
    "--device", "cpu",
    "--attention-backend", "torch_native",
    "--sampling-backend", "pytorch",
    "--disable-cuda-graph",
    "--max-total-tokens", "65536",
    "--sleep-on-idle",
    "--enable-metrics",
]  # fmt: skip
CPU_ENV = {"SGLANG_USE_CPU_ENGINE": "1"}
START_TIMEOUT_S = 240.0
RUN_TIMEOUT_S = 540.0
CAP = 2  # --max-running-requests of the hand-started server: C=4 queues
API_KEY = "sk-llmperf-integration-7f3a9c"

pytestmark = pytest.mark.skipif(
    not PYTHON, reason="set LLMPERF_SGLANG_PYTHON to the python of a venv with sglang to run"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


@pytest.fixture(scope="module")
def sglang_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One server started by hand: ``--api-key``, ``--max-running-requests 2``, metrics on."""
    if not Path(PYTHON).is_file() or not Path(MODEL).is_dir():
        pytest.fail(f"LLMPERF_SGLANG_PYTHON={PYTHON!r} or model {MODEL!r} does not exist")
    port = _free_port()
    log = tmp_path_factory.mktemp("sglang") / "server.log"
    argv = [PYTHON, "-m", "sglang.launch_server", "--model-path", MODEL]
    argv += ["--host", "127.0.0.1", "--port", str(port), *CPU_ARGS]
    argv += ["--max-running-requests", str(CAP), "--api-key", API_KEY]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **CPU_ENV},
        )
    url = f"http://127.0.0.1:{port}"
    auth = {"Authorization": f"Bearer {API_KEY}"}
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:  # bounded wait for a generating server
            if proc.poll() is not None:
                pytest.fail(f"sglang exited with {proc.returncode}; log: {log}")
            try:
                if httpx.get(url + "/health_generate", headers=auth, timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1.0)
        else:
            pytest.fail(f"sglang not healthy within {START_TIMEOUT_S:.0f} s; log: {log}")
        yield url
    finally:
        _stop(proc)


def _pytest(
    root: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``pytest`` over ``root`` in a subprocess, as a user runs it (no LLMPERF_* inherited)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LLMPERF_")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=root,
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )


def _suite(root: Path, server: str, sweep: str) -> None:
    (root / "test_perf.py").write_text(
        "def test_sweep(llmperf_point):\n    llmperf_point.assert_baseline()\n"
    )
    (root / "llmperf.toml").write_text(f"[[server]]\n{server}\n\n[sweep]\n{sweep}\n")


def _launched_server(name: str, *extra: str) -> str:
    return "\n".join(
        [
            f'name = "{name}"',
            f"model = {json.dumps(MODEL)}",
            f"python = {json.dumps(PYTHON)}",
            'env = { SGLANG_USE_CPU_ENGINE = "1" }',
            f"args = {json.dumps([*CPU_ARGS, *extra])}",
            "launch_timeout_s = 300",
        ]
    )


def _results(root: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((root / "llmperf-results" / "results.json").read_text())
    return loaded


def _out(run: subprocess.CompletedProcess[str]) -> str:
    return run.stdout + run.stderr


def test_launch_through_python_records_then_an_unchanged_run_passes(tmp_path: Path) -> None:
    _suite(
        tmp_path,
        _launched_server("plain"),
        "levels = [1, 2]\ninput_len = 32\noutput_len = 16\nbaseline_repeat = 2",
    )
    record = _pytest(tmp_path, "--llmperf-update")
    assert record.returncode == 0, _out(record)
    assert "baseline entries created" in record.stdout, _out(record)
    entries = list((tmp_path / "baselines").rglob("*.json"))
    assert entries, "no baseline file written"
    run = _results(tmp_path)
    (sweep,) = run["sweeps"]
    server = sweep["server"]
    assert (server["mode"], server["version"]) == ("launched", "0.5.23")
    assert server["max_running_requests"] is not None
    for level in sweep["levels"]:
        assert level["failed"] == 0, level["errors"]
        assert level["completed"] > 0
        # launch -> healthy, measured by the launcher: a real load takes seconds
        assert level["startup_s"] is not None and level["startup_s"] > 1.0, level["startup_s"]
        assert level["first_request_ms"] is not None and level["first_request_ms"] > 0
    gate = _pytest(tmp_path)
    # An unchanged run never fails a verdict. On a box too busy to measure, the starved points
    # are re-measured, then skipped with the one TOO BUSY line (exit 1), never judged.
    assert "failed" not in gate.stdout.splitlines()[-1], _out(gate)
    if gate.returncode != 0:
        assert "TOO BUSY: machine too busy to measure" in gate.stdout, _out(gate)
    else:
        assert "2 passed" in gate.stdout, _out(gate)


def test_attach_by_url_with_api_key_sees_the_cap_as_queueing(
    sglang_url: str, tmp_path: Path
) -> None:
    _suite(
        tmp_path,
        'name = "attached"\nmodel = "m"',
        "levels = [1, 4]\ninput_len = 32\noutput_len = 16",
    )
    env = {"LLMPERF_API_KEY": API_KEY}
    record = _pytest(tmp_path, "--llmperf-url", sglang_url, "--llmperf-update", env=env)
    assert record.returncode == 0, _out(record)
    assert f"C=4 > max running requests {CAP}: queueing" in record.stdout, _out(record)
    results_text = (tmp_path / "llmperf-results" / "results.json").read_text()
    (sweep,) = json.loads(results_text)["sweeps"]
    assert sweep["server"]["mode"] == "attached"
    assert sweep["server"]["max_running_requests"] == CAP
    by_c = {lv["max_concurrency"]: lv for lv in sweep["levels"]}
    assert by_c[4]["queueing"] is True and by_c[1]["queueing"] is False
    assert all(lv["failed"] == 0 for lv in by_c.values())
    # who could hold the client's CPU, measured per level: the machine's processes and, on
    # Linux, apart from them the hypervisor (0 on bare metal)
    for lv in by_c.values():
        client = lv["client"]
        assert 0 < client["system_cpu_percent"] <= 100 and client["cpus"] >= 1, client
        assert 0 <= client["steal_percent"] <= 100, client
    # the flush before each level was accepted (a refusal is a note)
    assert not any("flush_cache" in n for lv in by_c.values() for n in lv["notes"])
    # the key reaches the server and nothing the user reads or stores
    for text in (record.stdout, record.stderr, results_text):
        assert API_KEY not in text
    for path in (tmp_path / "baselines").rglob("*"):
        if path.is_file():
            assert API_KEY not in path.read_text()
    gate = _pytest(tmp_path, "--llmperf-url", sglang_url, env=env)
    assert gate.returncode == 0, _out(gate)


def test_attach_without_the_key_is_a_clear_error(sglang_url: str, tmp_path: Path) -> None:
    _suite(
        tmp_path, 'name = "attached"\nmodel = "m"', "levels = [1]\ninput_len = 32\noutput_len = 16"
    )
    run = _pytest(tmp_path, "--llmperf-url", sglang_url, "--llmperf-update")
    assert run.returncode != 0
    assert "401" in _out(run) or "API key" in _out(run) or "api key" in _out(run), _out(run)


@pytest.mark.parametrize("backend", ["sglang", "openai", "openai-chat"])
def test_each_route_counts_tokens_exactly(sglang_url: str, backend: str) -> None:
    # chat: the template adds tokens; 64 leaves room for it
    input_len = 64 if backend == "openai-chat" else 32
    workload = Workload(backend=backend, input_len=input_len, output_len=16, requests_per_level=6)
    result = run_sweep(sglang_url, [1, 4], workload, api_key=API_KEY)
    assert result.server.version == "0.5.23"
    for level in result.levels:
        c = level.max_concurrency
        assert level.failed == 0, (backend, c, level.errors)
        assert level.total_output_tokens == 6 * 16, (backend, c)
        if backend != "openai-chat":
            assert level.total_input_tokens == 6 * input_len, (backend, c)
        assert level.median_itl_ms is not None
        # An ITL p50 of 0 (gaps that came from one network read, on a busy box) is never
        # presented as a valid measurement: the level says how much of its ITL is coalesced.
        if level.median_itl_ms == 0:
            assert not is_valid(level, workload, ValidityPolicy()), (backend, c, level.notes)
            assert level.coalesced_itl_share is not None and level.coalesced_itl_share > 0.5
    assert result.levels[1].queueing  # C=4 against the cap of 2


def test_flush_cache_is_accepted_while_idle(sglang_url: str) -> None:
    import asyncio

    async def flush() -> tuple[tuple[bool, str | None], dict[str, Any] | None]:
        headers = {"Authorization": f"Bearer {API_KEY}"}
        async with httpx.AsyncClient(base_url=sglang_url, headers=headers) as http:
            return await flush_cache(http), await get_server_info(http)

    (flushed, why), info = asyncio.run(flush())
    assert (flushed, why) == (True, None)
    assert info is not None and info["version"] == "0.5.23"


@pytest.mark.parametrize(
    ("backend", "source"),
    [("sglang", "meta_info"), ("openai", "/metrics")],
)
def test_shared_prefix_hit_rate_from_meta_info_and_from_metrics(
    sglang_url: str, backend: str, source: str
) -> None:
    workload = Workload(
        backend=backend,
        input_len=64,
        output_len=16,
        requests_per_level=8,
        kind="shared-prefix",
        prefix_len=48,
        prefix_groups=2,
    )
    (level,) = run_sweep(sglang_url, [2], workload, api_key=API_KEY).levels
    assert level.failed == 0, level.errors
    expected = workload.expected_cache_hit_rate()
    assert level.cache_hit_rate is not None, (source, level.notes)
    # the radix cache recomputes the last prefix token: a little under the share
    assert expected - 0.1 < level.cache_hit_rate <= expected + 0.02, (source, level.notes)
    from_metrics = any("/metrics counters" in n for n in level.notes)
    assert from_metrics == (source == "/metrics"), level.notes


def test_speculative_flags_on_cpu_show_the_servers_own_error(tmp_path: Path) -> None:
    # EAGLE needs an attention backend this CPU build lacks: SGLang resets the running cap to
    # 48, then its scheduler rejects the config and the whole server exits.
    spec = [
        "--speculative-algorithm", "EAGLE",
        "--speculative-draft-model-path", MODEL,
        "--speculative-num-steps", "2",
        "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "3",
    ]  # fmt: skip
    _suite(
        tmp_path, _launched_server("eagle", *spec), "levels = [1]\ninput_len = 32\noutput_len = 16"
    )
    run = _pytest(tmp_path, "--llmperf-update")
    out = _out(run)
    assert run.returncode != 0, out
    assert "server did not start" in out, out
    assert "EAGLE is not supported" in out, out  # the server's own error, from the log tail
    logs = list((tmp_path / "llmperf-results" / "logs").glob("eagle-*.log"))
    assert len(logs) == 1 and str(logs[0]) in out, out  # the message names the full log
    # SGLang's cap reset comes before the traceback that fills the tail: the message says it too
    assert "Max running requests is reset to 48" in logs[0].read_text()
    assert "earlier, the server said:" in out, out
    assert "Max running requests is reset to 48" in out, out


def test_ab_in_passes_of_two_launched_servers(tmp_path: Path) -> None:
    """``[[ab]] passes = 2`` on two real launched servers: every launch of a round measures the
    sweep twice, interleaved, each pass a valid sample, and the verdict rests on them (the
    plugin's own validity rules: a level the client starved is re-measured, never judged)."""
    (tmp_path / "test_ab.py").write_text("def test_ab(llmperf_ab):\n    llmperf_ab.check()\n")
    servers = "\n\n".join(f"[[server]]\n{_launched_server(n)}" for n in ("old", "new"))
    (tmp_path / "llmperf.toml").write_text(
        f"{servers}\n\n[sweep]\nlevels = [1, 2, 4]\ninput_len = 32\noutput_len = 16\n\n"
        '[[ab]]\ncandidate = "new"\nreference = "old"\nrounds = 3\npasses = 2\n'
    )
    run = _pytest(tmp_path, "-v")  # -q -v: the header, with its plan
    out = _out(run)
    assert run.returncode == 0, out  # the same server twice: no level fails, none is invalid
    points = json.loads((tmp_path / "llmperf-results" / "ab.json").read_text())["points"]
    assert {p["concurrency"] for p in points} == {1, 2, 4}, out
    # the header planned the rounds it ran, two launches each, and the summary counts them
    assert "+ A/B new-vs-old 2-3 rounds of 2 launches (2 passes a launch), about" in out, out
    took = re.search(r"took: (\d+) launches", out)
    rounds_run = max(p["rounds_run"] for p in points)
    assert took is not None and int(took.group(1)) == 2 * rounds_run, out
    assert 2 <= rounds_run <= 3
    for p in points:
        assert p["passes"] == 2, p
        rounds = p["rounds_run"]
        assert len(p["candidate_passes"]) == len(p["reference_passes"]) == rounds, p
        assert all(len(r) == 2 and None not in r for r in p["candidate_passes"]), p
        assert "of 2 passes" in p["message"], p["message"]
        assert p["verdict"] in ("pass", "inconclusive"), p["message"]
