"""How many GPUs a server gets, and which: inferred from its flags, left alone without xdist,
disjoint per xdist worker, refused before launch when the workers do not fit.

The end-to-end tests run a ``PerfRun`` with a fake ``nvidia-smi`` (4 GPUs) on PATH and the fake
``sglang.launch_server``, which prints the ``CUDA_VISIBLE_DEVICES`` it was started with.
"""

from __future__ import annotations

import dataclasses
import os
import re
import stat
from pathlib import Path

import pytest

from pytest_llmperf.base.errors import InputError
from pytest_llmperf.launch import gpus, launcher
from pytest_llmperf.run.perfrun import PerfRun, PointError
from pytest_llmperf.run.suite import Suite, load_suite, suite_from_data
from tests.launch._helpers import FAKE_SGLANG

REPO = Path(__file__).resolve().parents[2]
H100 = "NVIDIA H100 80GB HBM3"


def need(*args: str) -> tuple[int, str]:
    n = gpus.gpus_from_flags(args)
    return n.count, n.source


def test_gpus_inferred_from_sglang_flags() -> None:
    assert need() == (1, "no parallelism flags")
    assert need("--mem-fraction-static", "0.8") == (1, "no parallelism flags")
    assert need("--tp-size", "4") == (4, "--tp-size 4")
    assert need("--tp=2") == (2, "--tp 2")
    assert need("--tensor-parallel-size", "8")[0] == 8
    # Data parallelism replicates the TP group unless DP attention shares it.
    assert need("--tp", "2", "--dp-size", "2")[0] == 4
    assert need("--tp", "2", "--dp=2")[0] == 4
    assert need("--tp", "4", "--dp", "4", "--enable-dp-attention")[0] == 4
    assert need("--tp-size", "2", "--pp-size", "2")[0] == 4
    assert (
        need("--tp-size", "2", "--pipeline-parallel-size=3", "--data-parallel-size", "2")[0] == 12
    )
    assert need("--tp", "8", "--nnodes", "2")[0] == 4  # GPUs on this node
    assert need("-tp", "2", "-pp", "2")[0] == 4  # vLLM's short forms
    assert need("--tp-size", "2", "--tp-size", "4")[0] == 4  # the last one wins, like argparse


@pytest.mark.parametrize("args", [("--tp-size", "four"), ("--dp=0",), ("--pp-size",)])
def test_bad_parallelism_value_names_the_flag(args: tuple[str, ...]) -> None:
    flag = args[0].split("=")[0]
    with pytest.raises(InputError, match=f"server 'x' args: {flag} .* not a positive integer"):
        gpus.gpus_from_flags(args, where="server 'x' args")


def test_shipped_suite_needs_four_gpus() -> None:
    suite = load_suite(REPO / "perf_tests" / "llmperf.toml")
    for cfg in suite.servers:
        assert cfg.gpus is None
        assert gpus.gpus_from_flags(cfg.args).count == 4


def test_plan_without_xdist_leaves_cuda_visible_devices_alone() -> None:
    plan = gpus.plan_gpus(gpus.GpuNeed(2, "--tp-size 2"), [H100] * 4, {})
    assert plan.ids is None and plan.error is None and plan.names == [H100] * 2
    assert "CUDA_VISIBLE_DEVICES not set" in plan.text and "4 visible" in plan.text
    plan = gpus.plan_gpus(gpus.GpuNeed(2, "x"), [H100] * 2, {"CUDA_VISIBLE_DEVICES": "5,7"})
    assert plan.ids is None and "CUDA_VISIBLE_DEVICES=5,7 left as set" in plan.text
    short = gpus.plan_gpus(gpus.GpuNeed(4, "--tp-size 4"), [H100] * 2, {})
    assert short.error is not None and "needs 4 GPU(s) (--tp-size 4) but only 2" in short.error


# ----------------------------------------------------------------------------- end to end

SMI = "\n".join(f"{i}, GPU-{i:04d}, {H100}, 81559, 550.54.15" for i in range(4))


@pytest.fixture
def four_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fake nvidia-smi listing 4 GPUs first on PATH, and the fake SGLang importable."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\ncat <<'EOF'\n{SMI}\nEOF\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path('/usr/bin')}:{Path('/bin')}")
    monkeypatch.setenv("PYTHONPATH", str(FAKE_SGLANG))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    # A run outside xdist unless the test says which worker it is (this test may itself run
    # in an xdist worker, whose variables the placement would otherwise read).
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    monkeypatch.syspath_prepend(str(FAKE_SGLANG))
    assert launcher.sglang_available()


def fast(suite: Suite) -> Suite:
    """The suite with a short launch timeout (the fake server is up in well under a second)."""
    servers = [s.model_copy(update={"launch_timeout_s": 30.0}) for s in suite.servers]
    return dataclasses.replace(suite, servers=servers)


def tp_suite(tp: int) -> Suite:
    return suite_from_data(
        {
            "server": [
                {
                    "name": "tp",
                    "model": "fake/model",
                    "args": ["--tp-size", str(tp)],
                    "launch_timeout_s": 30,
                }
            ]
        },
        source="test",
    )


def run_for(suite: Suite, out: Path, env: dict[str, str]) -> PerfRun:
    return PerfRun(suite=suite, output_dir=out, env={**os.environ, **env})


def launched_devices(run: PerfRun, config: str) -> str:
    handle = run.server(config)
    try:
        assert handle.mode == "launched"
        match = re.search(r"^CUDA_VISIBLE_DEVICES=(.*)$", handle.log_tail(200), re.M)
        assert match, handle.log_tail(200)
        return match.group(1)
    finally:
        run.stop_all()


@pytest.mark.usefixtures("four_gpus")
def test_shipped_suite_gets_all_four_gpus_without_xdist(tmp_path: Path) -> None:
    suite = fast(load_suite(REPO / "perf_tests" / "llmperf.toml"))
    run = run_for(suite, tmp_path / "out", {})
    assert run.hardware_for("plain") == "4xNVIDIA-H100-80GB-HBM3"
    assert run.gpu_text("plain").startswith("GPUs: 4 (--tp-size 4); CUDA_VISIBLE_DEVICES not set")
    # The launcher did not set CUDA_VISIBLE_DEVICES: the server sees all four GPUs.
    assert launched_devices(run, "plain") == "None"


@pytest.mark.usefixtures("four_gpus")
def test_inherited_cuda_visible_devices_is_respected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    run = run_for(tp_suite(2), tmp_path / "out", {})
    assert "CUDA_VISIBLE_DEVICES=3,1 left as set; 2 visible" in run.gpu_text("tp")
    assert run.hardware_for("tp") == "2xNVIDIA-H100-80GB-HBM3"
    assert launched_devices(run, "tp") == "3,1"


@pytest.mark.usefixtures("four_gpus")
def test_two_workers_with_tp2_get_disjoint_pairs(tmp_path: Path) -> None:
    seen = {}
    for worker in ("gw0", "gw1"):
        env = {"PYTEST_XDIST_WORKER": worker, "PYTEST_XDIST_WORKER_COUNT": "2"}
        run = run_for(tp_suite(2), tmp_path / worker, env)
        assert run.hardware_for("tp") == "2xNVIDIA-H100-80GB-HBM3"
        seen[worker] = launched_devices(run, "tp")
    assert seen == {"gw0": "0,1", "gw1": "2,3"}
    # The controller's header shows both slices.
    header = run_for(tp_suite(2), tmp_path / "ctl", {}).gpu_text("tp", xdist_workers=2)
    assert header == "GPUs: 2 (--tp-size 2); per xdist worker: gw0: 0,1; gw1: 2,3"


@pytest.mark.usefixtures("four_gpus")
def test_four_workers_with_tp4_fail_before_launch(tmp_path: Path) -> None:
    header = run_for(tp_suite(4), tmp_path / "ctl", {}).gpu_text("tp", xdist_workers=4)
    assert "4 xdist worker(s) x 4 GPU(s) per server need 16 GPUs but only 4" in header
    for i in range(4):
        env = {"PYTEST_XDIST_WORKER": f"gw{i}", "PYTEST_XDIST_WORKER_COUNT": "4"}
        run = run_for(tp_suite(4), tmp_path / f"gw{i}", env)
        with pytest.raises(PointError, match=r"server not launched: 4 xdist worker\(s\) x 4"):
            run.server("tp")
        with pytest.raises(PointError, match="-n 1 or fewer"):
            run.server("tp")  # the error sticks; still nothing launched
        assert launcher.live_servers() == []
        assert not (tmp_path / f"gw{i}" / "logs").exists()  # no log: nothing was started
