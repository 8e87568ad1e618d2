"""Hardware key, nvidia-smi parsing, xdist GPU and port slicing: pure functions, no GPU."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from pytest_llmperf.launch import gpus
from pytest_llmperf.launch.hardware import detect_gpus, hardware_key

SMI_OUT = """0, GPU-aaaa, NVIDIA H100 80GB HBM3, 81559, 550.54.15
1, GPU-bbbb, NVIDIA H100 80GB HBM3, 81559, 550.54.15
2, GPU-cccc, NVIDIA A10, 23028, 550.54.15
"""


def fake_smi(tmp_path: Path, body: str) -> str:
    exe = tmp_path / "nvidia-smi"
    exe.write_text(f"#!/bin/sh\n{body}\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return str(exe)


def test_hardware_key_shapes() -> None:
    h100 = ["NVIDIA H100 80GB HBM3"] * 4
    assert hardware_key(h100, 2) == "2xNVIDIA-H100-80GB-HBM3"
    assert hardware_key(h100[:1], 2) == "2xNVIDIA-H100-80GB-HBM3"
    assert hardware_key(["A", "B"]) == "1xA+1xB"
    assert hardware_key([], None) == "cpu"
    assert hardware_key(h100, 1, sim_profile="h100-llama8b") == "sim-h100-llama8b"
    assert hardware_key(h100, 1, override="my rig/v2") == "my-rig-v2"


def test_detect_gpus_honours_cuda_visible_devices(tmp_path: Path) -> None:
    smi = fake_smi(tmp_path, f"cat <<'EOF'\n{SMI_OUT}EOF")
    assert [g.index for g in detect_gpus(env={}, nvidia_smi=smi)] == [0, 1, 2]
    two = detect_gpus(env={"CUDA_VISIBLE_DEVICES": "2,0"}, nvidia_smi=smi)
    assert [(g.index, g.name, g.memory_total_mib) for g in two] == [
        (2, "NVIDIA A10", 23028),
        (0, "NVIDIA H100 80GB HBM3", 81559),
    ]
    assert [g.index for g in detect_gpus(env={"CUDA_VISIBLE_DEVICES": "GPU-bb"}, nvidia_smi=smi)]
    assert detect_gpus(env={"CUDA_VISIBLE_DEVICES": ""}, nvidia_smi=smi) == []
    assert [
        g.index for g in detect_gpus(env={"CUDA_VISIBLE_DEVICES": "1,7,0"}, nvidia_smi=smi)
    ] == [1]


def test_detect_gpus_absent_failing_or_hanging(tmp_path: Path) -> None:
    assert detect_gpus(env={}, nvidia_smi=str(tmp_path / "nope")) == []
    assert detect_gpus(env={}, nvidia_smi=fake_smi(tmp_path, "exit 9")) == []
    hang = fake_smi(tmp_path, "exec sleep 30")
    assert detect_gpus(env={}, nvidia_smi=hang, timeout_s=0.5) == []


def test_worker_identity() -> None:
    assert gpus.worker_index({}) is None
    assert gpus.worker_index({"PYTEST_XDIST_WORKER": "gw3"}) == 3
    with pytest.raises(ValueError, match="gwN"):
        gpus.worker_index({"PYTEST_XDIST_WORKER": "master"})
    assert gpus.worker_count({"PYTEST_XDIST_WORKER_COUNT": "4"}) == 4
    assert gpus.worker_count({}) == 1


def test_gpu_slices_are_disjoint_or_refused() -> None:
    assert gpus.gpu_ids_for_worker(None, 1, 8, 2) == [0, 1]
    assert [gpus.gpu_ids_for_worker(i, 4, 8, 2) for i in range(4)] == [
        [0, 1],
        [2, 3],
        [4, 5],
        [6, 7],
    ]
    # More workers than whole slices: refused, never shared.
    with pytest.raises(gpus.GpuSliceError, match=r"6 xdist worker\(s\) x 2 GPU.* need 12 .* -n 4"):
        gpus.gpu_ids_for_worker(4, 6, 8, 2)
    with pytest.raises(gpus.GpuSliceError, match="only 3 are visible"):
        gpus.gpu_ids_for_worker(1, 2, 3, 2)
    assert gpus.gpu_ids_for_worker(3, 4, 8, 0) == []
    with pytest.raises(gpus.GpuSliceError, match="needs more GPUs than are visible"):
        gpus.gpu_ids_for_worker(0, 1, 2, 4)


def test_simulated_slices_are_notional_and_distinct() -> None:
    slices = [gpus.gpu_ids_for_worker(i, 3, 0, 2, simulate=True) for i in range(3)]
    assert slices == [[0, 1], [2, 3], [4, 5]]


def test_visible_devices_mapping() -> None:
    assert gpus.visible_devices_value([0, 1], None) == "0,1"
    assert gpus.visible_devices_value([1, 2], "4,5,6,7") == "5,6"
    with pytest.raises(gpus.GpuSliceError, match="shows only 2"):
        gpus.visible_devices_value([2], "4,5")
