"""GPU telemetry's sampler and summary against the NVML stand-in (tests/fake_nvml.py)."""

from __future__ import annotations

import json
import time

import pytest

from pytest_llmperf.base.gpu_stats import GpuTelemetry, clock_note
from pytest_llmperf.base.results import LevelResult
from pytest_llmperf.launch.telemetry import NvmlTelemetry, nvml_indices, open_telemetry
from pytest_llmperf.verdicts.validity import check_level, throttled_by_gpu
from tests import fake_nvml

FAKE = "tests.fake_nvml"


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(fake_nvml.STATE, "reason_calls", 0)
    monkeypatch.setitem(fake_nvml.STATE, "throttled", False)


def _script(monkeypatch: pytest.MonkeyPatch, **script: object) -> None:
    monkeypatch.setenv("FAKE_NVML", json.dumps(script))


def test_a_sampler_summarizes_clocks_reasons_power_and_memory(monkeypatch):
    _script(monkeypatch, gpus=2, throttle_calls=[1, 2])  # the first time point, both GPUs
    tele = open_telemetry("nvml", FAKE, 0.01)
    assert isinstance(tele, NvmlTelemetry)
    sampler = tele.start(["0", "1"])
    assert sampler is not None
    deadline = time.monotonic() + 10
    while len(sampler.samples) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    summary = sampler.stop()
    n = summary.samples
    assert n >= 5 and summary.gpus == ["0", "1"]
    assert summary.reasons == {"sw_power_cap": round(1 / n, 4)}
    assert summary.sm_clock_min_mhz == 1410.0 and summary.sm_clock_median_mhz == 1980.0
    assert summary.sm_clock_max_mhz == 1980.0 and summary.mem_clock_median_mhz == 3201.0
    assert summary.temperature_max_c == 83.0 and summary.power_limit_w == 700.0
    assert summary.memory_used_max_mib == 121 * 1024
    assert summary.util_mean_percent is None  # the stand-in's GPU does not support it
    assert summary.throttled() == {"sw_power_cap": round(1 / n, 4)}
    assert not sampler._thread.is_alive()


def test_no_nvml_is_a_header_note_never_an_error(monkeypatch):
    _script(monkeypatch, missing=True)
    tele = open_telemetry("nvml", FAKE, 0.2)
    assert tele.header == (
        "GPU telemetry: off (no NVML: NVMLError_LibraryNotFound: NVML Shared Library Not Found)"
    )
    assert tele.start(["0"]) is None
    assert "cannot import no_such_nvml" in open_telemetry("nvml", "no_such_nvml", 0.2).header
    assert open_telemetry("off", FAKE, 0.2).header == "GPU telemetry: off (gpu_telemetry = off)"
    _script(monkeypatch, gpus=0)
    assert (
        open_telemetry("nvml", FAKE, 0.2).header == "GPU telemetry: off (no NVML: NVML sees no GPU)"
    )


def test_one_sample_costs_little(monkeypatch):
    """Bounded cost: one GPU read (8 NVML calls) with the stand-in, Python's own overhead."""
    _script(monkeypatch)
    tele = open_telemetry("nvml", FAKE, 0.2)
    assert isinstance(tele, NvmlTelemetry)
    n = 500
    t0 = time.perf_counter()
    for _ in range(n):
        tele.read("0")
    per_read_ms = (time.perf_counter() - t0) / n * 1000
    assert per_read_ms < 5.0, per_read_ms  # against a 200 ms interval: under 2.5 %


def test_nvml_indices_follow_cuda_visible_devices():
    assert nvml_indices(None, 2, {}) == ["0", "1"]
    assert nvml_indices([1], 1, {"CUDA_VISIBLE_DEVICES": "4,5,6"}) == ["5"]
    assert nvml_indices(None, 2, {"CUDA_VISIBLE_DEVICES": "3,7"}) == ["3", "7"]
    assert nvml_indices(None, 1, {"CUDA_VISIBLE_DEVICES": "GPU-1234abcd"}) == []  # a UUID


def _level(gpu: GpuTelemetry | None, **kw: object) -> LevelResult:
    base = dict(max_concurrency=4, num_requests=8, completed=8, failed=0, duration=1.0)
    return LevelResult.model_validate({**base, "gpu": gpu, **kw})


def test_a_throttled_level_is_invalid_for_that_alone_and_idle_is_not_throttling():
    hot = GpuTelemetry(
        samples=10, sm_clock_median_mhz=1410, sm_clock_max_mhz=1980,
        reasons={"sw_power_cap": 0.4, "gpu_idle": 0.6},
    )  # fmt: skip
    (reason,) = check_level(_level(hot))
    assert reason == (
        "the GPU throttled (SW power cap in 40 % of samples, SM clock 1,410 vs 1,980 MHz)"
    )
    assert throttled_by_gpu(_level(hot))
    assert not throttled_by_gpu(_level(hot, failed=1))  # failed requests: a real INVALID
    idle = GpuTelemetry(samples=10, reasons={"gpu_idle": 1.0, "applications_clocks": 1.0})
    assert check_level(_level(idle)) == [] and not throttled_by_gpu(_level(idle))


def test_a_results_file_level_without_telemetry_still_loads():
    level = LevelResult.model_validate(
        dict(max_concurrency=1, num_requests=4, completed=4, failed=0, duration=1.0)
    )
    assert level.gpu is None


def test_sides_at_different_clocks_are_said():
    def at(mhz: float) -> list[GpuTelemetry | None]:
        return [GpuTelemetry(samples=5, sm_clock_median_mhz=mhz)]

    assert clock_note({"a": at(1980), "b": at(1950)}) is None  # 1.5 % apart
    note = clock_note({"a": at(1980), "b": at(1410)})
    assert note == (
        "the two sides ran at different GPU clocks (median SM clock a 1,980 MHz vs b 1,410 MHz, "
        "29 % apart): part of the difference may be the GPUs'"
    )
    assert clock_note({"a": at(1980), "b": [None]}) is None  # unknown: nothing claimed
