"""launch() with the real simulator (``python -m pytest_llmperf.sim``): ready, bad flags, faults."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from pytest_llmperf.launch import launcher
from pytest_llmperf.launch.launcher import ServerStartError, launch
from pytest_llmperf.launch.server_config import ServerConfig

from ._helpers import is_alive

SIM = Path(launcher.__file__).parents[1] / "sim"
pytestmark = pytest.mark.skipif(
    not (SIM / "__main__.py").exists(), reason="the simulator is not there yet"
)
PROFILES = sorted(p.stem for p in (SIM / "profiles").glob("*.json"))
SECRET = "sk-sim-51f0aa"


def sim_config(*args: str, name: str = "sim") -> ServerConfig:
    return ServerConfig(
        name=name,
        model="meta-llama/Llama-3.1-8B-Instruct",
        args=args,
        sim_profile=PROFILES[0] if PROFILES else None,
        launch_timeout_s=60,
    )


def test_simulated_server_launches_and_stops(tmp_path: Path) -> None:
    t0 = time.monotonic()
    # simulate=None: this machine has no SGLang, so the simulator stands in.
    simulate = None if not launcher.sglang_available() else True
    with launch(
        sim_config(), log_dir=tmp_path, simulate=simulate, api_key=SECRET, gpu_ids=[2]
    ) as handle:
        print(f"simulator: healthy in {time.monotonic() - t0:.2f} s")
        assert handle.mode == "simulated" and handle.pid is not None
        assert handle.argv[1:3] == ["-m", "pytest_llmperf.sim"]
        if PROFILES:
            assert handle.argv[handle.argv.index("--sim-profile") + 1] == PROFILES[0]
        resp = httpx.get(f"{handle.url}/health_generate", timeout=10, trust_env=False)
        assert resp.status_code == 200
        assert "The server is fired up and ready to roll!" in handle.log_tail(200)
        assert "CUDA_VISIBLE_DEVICES=2" in handle.log_tail(200)
        pid = handle.pid
        t1 = time.monotonic()
    assert handle.exit_code is not None and handle.exit_code in (0, -15)  # graceful on SIGTERM
    print(f"simulator: stopped by SIGTERM in {time.monotonic() - t1:.2f} s")
    assert not is_alive(pid)
    assert handle.log_path is not None and SECRET not in handle.log_path.read_text()


def test_sim_args_reach_only_the_simulated_server(tmp_path: Path) -> None:
    cfg = sim_config("--max-running-requests", "8").model_copy(
        update={"sim_args": ("--stream-interval", "4")}
    )
    with launch(cfg, log_dir=tmp_path, simulate=True) as handle:
        assert handle.argv[-2:] == ["--stream-interval", "4"]
        info = httpx.get(f"{handle.url}/server_info", timeout=10, trust_env=False).json()
        assert info["stream_interval"] == 4 and info["max_running_requests"] == 8


def test_bad_flag_fails_within_seconds_with_exit_2(tmp_path: Path) -> None:
    t0 = time.monotonic()
    with pytest.raises(ServerStartError) as info:
        launch(sim_config("--tp-size", "abc"), log_dir=tmp_path, simulate=True, api_key=SECRET)
    elapsed = time.monotonic() - t0
    print(f"simulator --tp-size abc: ServerStartError (exit 2) after {elapsed:.2f} s")
    err = info.value
    assert err.exit_code == 2 and "exited with code 2" in str(err)
    assert "invalid int value: 'abc'" in str(err) and str(err.log_path) in str(err)
    assert SECRET not in str(err)
    assert elapsed < 30  # exit noticed at once, not after the 60 s launch timeout


def test_crash_on_start_fault(tmp_path: Path) -> None:
    t0 = time.monotonic()
    with pytest.raises(ServerStartError, match="exited with code 1") as info:
        launch(sim_config("--sim-fault", "crash-on-start"), log_dir=tmp_path, simulate=True)
    print(f"simulator crash-on-start: ServerStartError after {time.monotonic() - t0:.2f} s")
    assert info.value.exit_code == 1


def test_hang_on_start_fault_times_out(tmp_path: Path) -> None:
    t0 = time.monotonic()
    with pytest.raises(ServerStartError, match="did not become healthy within 3 s") as info:
        launch(
            sim_config("--sim-fault", "hang-on-start"),
            log_dir=tmp_path,
            simulate=True,
            health_timeout_s=3,
        )
    print(f"simulator hang-on-start: ServerStartError after {time.monotonic() - t0:.2f} s")
    assert "HTTP 503" in str(info.value)


def test_startup_time_is_launch_to_healthy(tmp_path: Path) -> None:
    # --sim-load-time: the port binds at once, /health_generate answers only after the load
    simulate = None if not launcher.sglang_available() else True
    with launch(sim_config("--sim-load-time", "1.5"), log_dir=tmp_path, simulate=simulate) as h:
        assert h.startup_s is not None and 1.5 <= h.startup_s < 60
