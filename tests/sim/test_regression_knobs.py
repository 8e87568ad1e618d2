"""Knobs that make an upgrade's regressions visible: load time, CUDA-graph capture size,
accept length, the reported version, and launch noise across real processes."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import replace
from unittest.mock import ANY

import httpx
import pytest

from pytest_llmperf.core.server_probe import decode_cuda_graph_max_bs
from pytest_llmperf.sim.args import parse_args
from pytest_llmperf.sim.engine import SimEngine
from pytest_llmperf.sim.http_api import SGLANG_VERSION
from pytest_llmperf.sim.knobs import ServerKnobs
from pytest_llmperf.sim.perf_model import resolve
from pytest_llmperf.sim.server import READY_LINE
from pytest_llmperf.sim.virtual import run_virtual_level, run_virtual_sweep
from pytest_llmperf.sim.vllm_api import VLLM_VERSION

from .conftest import ServerThread, SimProcess, profile_args

MakeServer = Callable[..., ServerThread]


# ------------------------------------------------------------------ --sim-load-time
def test_load_time_delays_health_and_ready(sim_process: Callable[..., SimProcess]) -> None:
    t0 = time.monotonic()
    p = sim_process(*profile_args(), "--sim-load-time", "1.5")
    p.wait_healthy()
    assert time.monotonic() - t0 >= 1.5  # the port binds only after the load
    log = p.log()
    assert "Load weight end. elapsed=1.50 s" in log
    assert log.index("Load weight begin") < log.index("Load weight end") < log.index(READY_LINE)


def test_sigterm_during_load_exits_cleanly(sim_process: Callable[..., SimProcess]) -> None:
    p = sim_process(*profile_args(), "--sim-load-time", "60")
    deadline = time.monotonic() + 20
    while "Load weight begin" not in p.log():
        assert p.proc.poll() is None and time.monotonic() < deadline, p.log()
        time.sleep(0.05)
    with pytest.raises(httpx.ConnectError):
        httpx.get(p.url + "/health_generate", timeout=1)
    p.proc.send_signal(signal.SIGTERM)
    assert p.proc.wait(10) == 0
    assert READY_LINE not in p.log()


# ------------------------------------------------------------------ CUDA-graph capture size
def test_batch_above_cuda_graph_max_bs_runs_eager() -> None:
    kw = {"concurrencies": (16,), "input_len": 100, "output_len": 400}
    graphed = run_virtual_sweep(ServerKnobs(cuda_graph_max_bs=64), **kw)  # type: ignore[arg-type]
    eager = run_virtual_sweep(ServerKnobs(cuda_graph_max_bs=8), **kw)  # type: ignore[arg-type]
    off = run_virtual_sweep(ServerKnobs(disable_cuda_graph=True), **kw)  # type: ignore[arg-type]
    model, _ = resolve(None, ServerKnobs())
    factor = model.no_cuda_graph_factor
    assert factor > 1
    ratio = graphed.throughput()[16] / eager.throughput()[16]
    # Decode steps pay the whole factor; the few prefill steps are eager either way.
    assert ratio == pytest.approx(factor, rel=0.05)
    assert off.throughput()[16] == pytest.approx(eager.throughput()[16], rel=1e-6)
    at_c1 = run_virtual_sweep(ServerKnobs(cuda_graph_max_bs=8), concurrencies=(1,))
    at_c1_graphed = run_virtual_sweep(ServerKnobs(cuda_graph_max_bs=64), concurrencies=(1,))
    assert at_c1.throughput() == at_c1_graphed.throughput()  # below the capture size: no cost


def test_eager_steps_log_cuda_graph_false() -> None:
    model, _ = resolve(None, ServerKnobs(cuda_graph_max_bs=4, decode_log_interval=1))
    lines: list[str] = []
    engine = SimEngine(model, virtual=True, on_log=lines.append)
    run_virtual_level(engine, 8, 8, 50, 20)
    wide = [line for line in lines if line.startswith("Decode batch, #running-req: 8,")]
    assert len(wide) >= 10 and all("cuda graph: False" in x for x in wide)
    lines.clear()
    run_virtual_level(engine, 2, 2, 50, 20)
    narrow = [line for line in lines if line.startswith("Decode batch, #running-req: 2,")]
    assert len(narrow) >= 10 and all("cuda graph: True" in x for x in narrow)


def test_server_info_reports_cuda_graph_max_bs(make_server: MakeServer) -> None:
    from pytest_llmperf.sim.engine import create_engine

    knobs = parse_args([*profile_args(), "--cuda-graph-max-bs", "24"]).knobs
    engine, _ = create_engine(knobs)
    s = make_server(engine=engine, cuda_graph_max_bs=24)
    info = httpx.get(s.url + "/server_info").json()
    assert info["cuda_graph_max_bs"] == 24 and info["disable_cuda_graph"] is False
    # and in SGLang 0.5.23's spelling, which the plugin reads first
    assert info["cuda_graph_config"]["decode"] == {"backend": "full", "max_bs": 24, "bs": ANY}
    assert max(info["internal_states"][0]["decode_cuda_graph_bs"]) == 24
    assert decode_cuda_graph_max_bs(info) == 24


def test_server_info_without_graphs_has_no_capture_size(make_server: MakeServer) -> None:
    from pytest_llmperf.sim.engine import create_engine

    engine, _ = create_engine(parse_args([*profile_args(), "--disable-cuda-graph"]).knobs)
    info = httpx.get(make_server(engine=engine).url + "/server_info").json()
    assert info["cuda_graph_config"]["decode"]["backend"] == "disabled"
    assert info["internal_states"][0]["decode_cuda_graph_bs"] == []
    assert decode_cuda_graph_max_bs(info) is None


# ------------------------------------------------------------------ --sim-accept-scale
def test_accept_scale_lowers_accept_length_and_throughput() -> None:
    spec = ServerKnobs(speculative_algorithm="NEXTN")
    base, _ = resolve(None, spec)
    fell, _ = resolve(None, replace(spec, sim_accept_scale=0.8))
    assert base.spec is not None and fell.spec is not None
    assert fell.spec.accept_length_mean == pytest.approx(0.8 * base.spec.accept_length_mean)
    capped, _ = resolve(None, replace(spec, sim_accept_scale=10.0))
    assert capped.spec is not None
    assert capped.spec.accept_length_mean == pytest.approx(capped.spec.num_steps + 1)
    kw = {"concurrencies": (1, 16), "input_len": 100, "output_len": 400}
    before = run_virtual_sweep(spec, **kw)  # type: ignore[arg-type]
    after = run_virtual_sweep(replace(spec, sim_accept_scale=0.8), **kw)  # type: ignore[arg-type]
    for b, a in zip(before.levels, after.levels, strict=True):
        assert a.accept_length is not None and b.accept_length is not None
        assert a.accept_length < 0.9 * b.accept_length
        assert a.output_throughput < 0.92 * b.output_throughput
    assert parse_args(["--sim-accept-scale", "0.8"]).knobs.sim_accept_scale == 0.8


# ------------------------------------------------------------------ --sim-version
def test_sim_version_is_reported(make_server: MakeServer) -> None:
    s = make_server()
    assert httpx.get(s.url + "/server_info").json()["version"] == SGLANG_VERSION
    bad = make_server(sim_version="0.5.10rc0")
    assert httpx.get(bad.url + "/server_info").json()["version"] == "0.5.10rc0"
    vllm = make_server(sim_api="vllm", sim_version="0.11.1")
    assert httpx.get(vllm.url + "/version").json() == {"version": "0.11.1"}
    assert httpx.get(make_server(sim_api="vllm").url + "/version").json()["version"] == VLLM_VERSION


@pytest.mark.parametrize("value", ["", "v0.5.9", "0.5 9", "latest"])
def test_bad_sim_version_exits_2(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_args(["--sim-version", value])
    assert exc.value.code == 2 and "--sim-version" in capsys.readouterr().err


# ------------------------------------------------------------------ noise in real processes
def test_real_launches_differ_and_a_nonce_reproduces(
    sim_process: Callable[..., SimProcess],
) -> None:
    flags = [*profile_args(), "--sim-launch-speed-sd", "0.15", "--sim-seed", "5"]
    procs = [
        sim_process(*flags),
        sim_process(*flags),
        sim_process(*flags, "--sim-launch-nonce", "k"),
    ]
    truths = []
    for p in procs:
        p.wait_healthy()
        truths.append(httpx.get(p.url + "/_sim/ground_truth", timeout=5).json())
    assert truths[0]["speed_factor"] != truths[1]["speed_factor"]
    assert truths[0]["launch_nonce"] != truths[1]["launch_nonce"]
    assert truths[2]["launch_nonce"] == "k"
    knobs = parse_args([*flags, "--sim-launch-nonce", "k"]).knobs
    in_process, _ = resolve(None, knobs)
    assert truths[2]["speed_factor"] == in_process.speed_factor
    assert "nonce k" in procs[2].log()
