"""launch()/attach() against fake SGLang servers: startup faults, teardown, ports, secrets."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_llmperf.launch import launcher
from pytest_llmperf.launch.launcher import (
    AttachError,
    LaunchError,
    ServerStartError,
    attach,
    launch,
)
from pytest_llmperf.launch.ports import PortClaim, free_port
from pytest_llmperf.launch.server_config import ServerConfig

from ._helpers import child_pid_from_log, fake_config, is_alive, wait_dead

SECRET = "sk-test-7c1d9e0f"


def test_healthy_server_lifecycle(tmp_path: Path) -> None:
    cfg = fake_config("healthy", FAKE_503_COUNT="3")
    t0 = time.monotonic()
    with launch(cfg, log_dir=tmp_path, simulate=False, gpu_ids=[1, 2]) as handle:
        print(f"healthy after 3x503: ready in {time.monotonic() - t0:.2f} s")
        assert handle.mode == "launched" and handle.config is cfg
        assert handle.url.startswith("http://127.0.0.1:") and handle.pid and is_alive(handle.pid)
        assert handle.log_path is not None and handle.log_path.parent == tmp_path
        assert handle.log_path.name.startswith("fake-healthy-")
        assert launcher.live_servers() == [handle]
        tail = handle.log_tail()
        assert tail.count("GET /health_generate") >= 4
        assert "The server is fired up and ready to roll!" in tail
        assert "CUDA_VISIBLE_DEVICES=1,2" in tail
        assert handle.argv[1:4] == ["-m", "sglang.launch_server", "--model-path"]
        pid = handle.pid
    assert handle.closed and handle.exit_code == -15 and not is_alive(pid)
    assert launcher.live_servers() == []
    assert handle.close() == -15  # idempotent


def test_early_exit_fails_at_once_with_code_and_log(tmp_path: Path) -> None:
    cfg = fake_config("exit3").model_copy(update={"launch_timeout_s": 60.0})
    t0 = time.monotonic()
    with pytest.raises(ServerStartError) as info:
        launch(cfg, log_dir=tmp_path, simulate=False)
    elapsed = time.monotonic() - t0
    print(f"exit-3 server: ServerStartError after {elapsed:.2f} s")
    err = info.value
    assert err.exit_code == 3 and err.log_path is not None
    assert "exited with code 3" in str(err) and str(err.log_path) in str(err)
    assert "ValueError: fake server refuses to start" in str(err)
    assert elapsed < 30  # far below the 60 s launch timeout: the exit was noticed, not waited out


def test_never_healthy_times_out_and_is_killed(tmp_path: Path) -> None:
    t0 = time.monotonic()
    with pytest.raises(ServerStartError, match=r"did not become healthy within 1.5 s") as info:
        launch(fake_config("never"), log_dir=tmp_path, simulate=False, health_timeout_s=1.5)
    print(f"never-healthy server: ServerStartError after {time.monotonic() - t0:.2f} s")
    assert "last: /health_generate: HTTP 503" in str(info.value)
    assert info.value.exit_code == -15  # it was running; the launcher stopped it


def test_sigterm_ignored_escalates_to_sigkill(tmp_path: Path) -> None:
    handle = launch(fake_config("ignore_term"), log_dir=tmp_path, simulate=False)
    pid = handle.pid
    t0 = time.monotonic()
    assert handle.close(grace_s=0.5) == -9
    print(f"SIGTERM-ignoring server: SIGKILLed, close() took {time.monotonic() - t0:.2f} s")
    assert pid is not None and not is_alive(pid)


@pytest.mark.parametrize("mode", ["child", "escaped"])
def test_group_and_escaped_descendants_die(tmp_path: Path, mode: str) -> None:
    handle = launch(fake_config(mode), log_dir=tmp_path, simulate=False)
    assert handle.log_path is not None and handle.pid is not None
    child = child_pid_from_log(handle.log_path)
    assert is_alive(child)
    t0 = time.monotonic()
    handle.close(grace_s=2.0)
    print(f"server with {mode} child: close() took {time.monotonic() - t0:.2f} s")
    assert wait_dead([handle.pid, child], 5.0) == []


def _listening_socket() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def test_port_taken_is_retried_on_another_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _listening_socket() as taken:
        taken_port = taken.getsockname()[1]
        real_claim = launcher.claim_port
        ports = iter([taken_port])
        # A process outside pytest-llmperf takes the port between our check and the launch.
        monkeypatch.setattr(
            launcher,
            "claim_port",
            lambda host, rng=None: (
                PortClaim(p, None) if (p := next(ports, 0)) else real_claim(host)
            ),
        )
        with launch(fake_config("healthy"), log_dir=tmp_path, simulate=False) as handle:
            assert not handle.url.endswith(f":{taken_port}")
            assert handle.log_path is not None
            text = handle.log_path.read_text()
            assert "Address already in use" in text and f"port {taken_port} was taken" in text


def test_port_taken_every_time_gives_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with _listening_socket() as taken:
        taken_port = taken.getsockname()[1]
        monkeypatch.setattr(
            launcher, "claim_port", lambda host, rng=None: PortClaim(taken_port, None)
        )
        with pytest.raises(ServerStartError, match=f"port {taken_port} was already in use"):
            launch(fake_config("healthy"), log_dir=tmp_path, simulate=False)
        with pytest.raises(LaunchError, match=f"port {taken_port} on 127.0.0.1 is in use"):
            launch(fake_config("healthy"), log_dir=tmp_path, simulate=False, port=taken_port)


def test_simulator_on_a_taken_port_says_so_and_is_retried(tmp_path: Path) -> None:
    """Two sessions on one machine race for the same per-worker port range: the simulator
    must fail with EADDRINUSE (under uvloop aiohttp's own bind failed with an AttributeError
    the launcher could not recognise), so the launcher moves to the next port."""
    with _listening_socket() as taken:
        start = taken.getsockname()[1]
        cfg = ServerConfig(name="sim", model="sim/qwen-moe")
        rng = (start, start + 50)
        real_claim = launcher.claim_port
        first = iter([start])  # hand out the taken port once, as a racing process would
        picks = lambda host, r=None: (  # noqa: E731
            PortClaim(p, None) if (p := next(first, 0)) else real_claim(host, r)
        )
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(launcher, "claim_port", picks)
            with launch(cfg, log_dir=tmp_path, simulate=True, port_range=rng) as handle:
                assert not handle.url.endswith(f":{start}")
                assert handle.log_path is not None
                text = handle.log_path.read_text()
                assert "Address already in use" in text and f"port {start} was taken" in text


def test_port_range(tmp_path: Path) -> None:
    with _listening_socket() as taken:
        start = taken.getsockname()[1]
        rng = (start, start + 50)
        with launch(fake_config("healthy"), log_dir=tmp_path, simulate=False, port_range=rng) as h:
            port = int(h.url.rsplit(":", 1)[1])
            assert start < port < start + 50


def test_require_real_refuses_simulation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launcher, "sglang_available", lambda: False)
    with pytest.raises(LaunchError, match="SGLang is not installed.*simulated server was refused"):
        launch(fake_config("healthy"), log_dir=tmp_path, require_real=True)
    with pytest.raises(LaunchError, match="contradict"):
        launch(fake_config("healthy"), log_dir=tmp_path, simulate=True, require_real=True)
    assert not list(tmp_path.iterdir())  # refused before anything started


def test_owned_flags_rejected(tmp_path: Path) -> None:
    cfg = ServerConfig(name="x", model="m", args=("--tp", "2", "--port=1234"))
    with pytest.raises(LaunchError, match="args must not contain --port"):
        launch(cfg, log_dir=tmp_path, simulate=False)


def test_api_key_never_leaks(tmp_path: Path) -> None:
    handle = launch(fake_config("healthy"), log_dir=tmp_path, simulate=False, api_key=SECRET)
    assert handle.api_key == SECRET and handle.auth_headers == {"Authorization": f"Bearer {SECRET}"}
    assert "--api-key" in handle.argv
    for text in (repr(handle), str(handle), " ".join(handle.argv), handle.log_tail(200)):
        assert SECRET not in text
    handle.close()
    assert handle.log_path is not None
    log = handle.log_path.read_text()
    assert SECRET not in log and "'api_key': '***'" in log  # the server printed it; scrubbed

    with pytest.raises(ServerStartError) as info:
        launch(fake_config("exit3"), log_dir=tmp_path, simulate=False, api_key=SECRET)
    assert "'api_key': '***'" in str(info.value)
    assert SECRET not in str(info.value) and SECRET not in info.value.log_tail
    assert info.value.log_path is not None and SECRET not in info.value.log_path.read_text()


def test_interrupt_during_startup_stops_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[int] = []

    def interrupted(client: object, url: str, deadline: float, proc: object, *a: object) -> None:
        started.append(proc.pid)  # type: ignore[attr-defined]
        raise KeyboardInterrupt

    monkeypatch.setattr(launcher, "poll_ready", interrupted)
    with pytest.raises(KeyboardInterrupt):
        launch(fake_config("ignore_term"), log_dir=tmp_path, simulate=False)
    assert launcher.live_servers() == [] and wait_dead(started, 5.0) == []


def test_terminate_all(tmp_path: Path) -> None:
    a = launch(fake_config("healthy", name="a"), log_dir=tmp_path, simulate=False)
    b = launch(fake_config("child", name="b"), log_dir=tmp_path, simulate=False)
    assert {h.pid for h in launcher.live_servers()} == {a.pid, b.pid}
    assert launcher.terminate_all(grace_s=2.0) == 2
    assert a.closed and b.closed and launcher.live_servers() == []


def test_attach(tmp_path: Path) -> None:
    with launch(fake_config("healthy"), log_dir=tmp_path, simulate=False) as server:
        attached = attach(server.url + "/", api_key=SECRET, timeout_s=5)
        assert attached.mode == "attached" and attached.url == server.url
        assert attached.kind is not None and attached.kind.kind == "sglang"
        assert (
            attached.kind.health_route == "/health_generate" and attached.kind.backend == "sglang"
        )
        assert attached.pid is None and attached.log_path is None and attached.log_tail() == ""
        assert SECRET not in repr(attached)
        attached.close()
        assert server.pid is not None and is_alive(server.pid)  # attach owns nothing


def test_attach_failures(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead_url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    t0 = time.monotonic()
    with pytest.raises(
        AttachError,
        match=r"did not answer any of GET /health_generate, /health, /v1/models with 200 within 1",
    ):
        attach(dead_url, timeout_s=1.0)
    print(f"attach to closed port: AttachError after {time.monotonic() - t0:.2f} s")
    with pytest.raises(AttachError, match="invalid server URL"):
        attach("localhost:30000")


def test_attach_to_unhealthy() -> None:
    # A server stuck at 503 (e.g. still warming up) is not attachable; started by hand here.
    port = free_port("127.0.0.1")
    env = {**os.environ, **fake_config("never").env}
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", "m", "--port", str(port)]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL)
    try:
        with pytest.raises(AttachError, match=r"within 2 s \(last: /health_generate: HTTP 503\)"):
            attach(f"http://127.0.0.1:{port}", timeout_s=2.0)
    finally:
        proc.kill()
        proc.wait(timeout=10)
