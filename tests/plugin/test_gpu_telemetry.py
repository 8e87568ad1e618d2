"""GPU telemetry through the whole plugin, with a scripted NVML stand-in (tests/fake_nvml.py).

The server is the simulator launched as a ``command`` (a launched server: its GPUs are sampled).
No GPU is needed: the stand-in takes pynvml's place through the ``nvml_module`` setting
(``LLMPERF_NVML_MODULE``) and reports what its ``FAKE_NVML`` script says (a SW power cap on
the first clock-reason reads, or on all). Everything else is real: the simulated server, the
sampler thread, the re-measurement, the verdict, results.json and the baseline file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from .conftest import LIGHT, SWEEP_TEST, assert_no_servers_left
from .conftest import run as _run

FAKE = Path(__file__).parent.parent / "fake_nvml.py"

# The simulator launched as a ``command`` server: a launched server whose GPUs are sampled (a
# simulated one uses none, so none is).
SIM = [sys.executable, "-m", "pytest_llmperf.sim", "--model-path", "{model}", "--host", "{host}",
       "--port", "{port}", "--sim-time-scale", "5"]  # fmt: skip
COMMAND = "command = [" + ", ".join(f'"{part}"' for part in SIM) + "]"

SUITE = f"""
[[server]]
name = "plain"
model = "sim/qwen-moe"
{COMMAND}

[sweep]
levels = [4]
"""


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return _run(pytester, *args)


@pytest.fixture
def gpu_suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    pytester.makefile(".toml", llmperf=SUITE)
    pytester.makepyfile(test_perf=SWEEP_TEST, fake_nvml=FAKE.read_text())
    monkeypatch.setenv("LLMPERF_NVML_MODULE", "fake_nvml")
    monkeypatch.setenv("LLMPERF_GPU_TELEMETRY_INTERVAL", "0.05")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    yield pytester
    assert_no_servers_left(pytester.path)


def _samples(pytester: pytest.Pytester, c: int) -> list[dict]:
    data = json.loads((pytester.path / "llmperf-results" / "results.json").read_text())
    (sweep,) = data["sweeps"]
    first = [lv for lv in sweep["levels"] if lv["max_concurrency"] == c]
    return first + sweep.get("repeats", {}).get(str(c), [])


def test_a_throttled_level_is_remeasured_and_the_clean_sample_judged(gpu_suite, monkeypatch):
    # the first clock-reason read (the level's first sample) reports a SW power cap
    monkeypatch.setenv("FAKE_NVML", json.dumps({"throttle_calls": [1, 1]}))
    result = run(gpu_suite, "--llmperf-update")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["llmperf: GPU telemetry: NVML, driver 550.54.15, every 0.05 s: 0: NVIDIA H200 "
         "(SM 1,980 MHz max, mem 3,201 MHz, power limit 700 W)"]
    )  # fmt: skip
    first, second = _samples(gpu_suite, 4)
    assert first["gpu"]["reasons"]["sw_power_cap"] > 0
    assert first["gpu"]["sm_clock_min_mhz"] == 1410.0
    assert first["gpu"]["temperature_max_c"] == 83.0
    assert first["gpu"]["power_limit_w"] == 700.0
    assert second["gpu"]["reasons"] == {}
    assert second["gpu"]["sm_clock_median_mhz"] == 1980.0
    assert second["gpu"]["samples"] >= 2  # one at each end, more in between
    (baseline,) = (gpu_suite.path / "baselines").rglob("*.json")
    entry = next(iter(next(iter(json.loads(baseline.read_text())["workloads"].values())).values()))
    assert entry["invalid_left_out"] == 1  # the throttled sample is not in the entry
    assert entry["gpu"]["reasons"] == {} and entry["gpu"]["names"] == ["NVIDIA H200"]


def test_a_level_throttled_on_every_try_is_invalid_named_and_not_recorded(gpu_suite, monkeypatch):
    monkeypatch.setenv("FAKE_NVML", json.dumps({"throttle_calls": "always"}))
    result = run(gpu_suite)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*INVALID measurement*plain at C=4: invalid measurement: the GPU throttled (SW power "
         "cap in 100 % of samples, SM clock 1,410 vs 1,980 MHz) \u2014 not a code regression; "
         "re-measured 2 times*"]
    )  # fmt: skip
    assert len(_samples(gpu_suite, 4)) == 3  # measured once + max_reruns 2
    # recording: the same, and no entry from a throttled sample (recording's own re-measures
    # of invalid samples come on top: 2 more)
    result = run(gpu_suite, "--llmperf-update")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*not recorded*the GPU throttled*re-measured 4 times*"])
    assert not list((gpu_suite.path / "baselines").rglob("*.json"))


def test_without_nvml_the_header_says_why_and_the_run_goes_on(gpu_suite, monkeypatch):
    monkeypatch.setenv("FAKE_NVML", json.dumps({"missing": True}))
    result = run(gpu_suite, "--llmperf-update")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["llmperf: GPU telemetry: off (no NVML: NVMLError_LibraryNotFound: NVML Shared Library "
         "Not Found)"]
    )  # fmt: skip
    (sample,) = _samples(gpu_suite, 4)
    assert sample["gpu"] is None


GATE_SUITE = f"""
[[server]]
name = "plain"
model = "sim/qwen-moe"
{COMMAND}

[[server]]
name = "wide"
model = "sim/qwen-moe"
{COMMAND}
gpus = 2

[sweep]
levels = [4]

[[gate]]
name = "wide-wins-big"
config = "wide"
reference = "plain"
factor = 10.0
"""


def test_a_gate_between_sides_at_different_clocks_says_so(gpu_suite, monkeypatch):
    # "wide" runs on GPUs 0 and 1; GPU 1 is at 1,500 MHz with no throttle reason
    monkeypatch.setenv("FAKE_NVML", json.dumps({"gpus": 2, "sm_by_gpu": {"1": 1500}}))
    gpu_suite.makefile(".toml", llmperf=GATE_SUITE)
    gpu_suite.makepyfile(test_perf="def test_gate(llmperf_gate):\n    llmperf_gate.check()\n")
    result = run(gpu_suite)
    result.assert_outcomes(failed=1)  # 10x is not met: the sentence is printed
    result.stdout.fnmatch_lines(
        ["*the two sides ran at different GPU clocks (median SM clock wide 1,500 MHz vs plain "
         "1,980 MHz, 24 % apart): part of the difference may be the GPUs'*"]
    )  # fmt: skip


def test_a_simulated_server_uses_no_gpu_so_none_is_sampled(gpu_suite, monkeypatch):
    monkeypatch.setenv("FAKE_NVML", json.dumps({"throttle_calls": "always"}))
    gpu_suite.makefile(".toml", llmperf=SUITE.replace(COMMAND, "args = []"))
    result = run(gpu_suite, "--llmperf-update", *LIGHT)
    result.assert_outcomes(passed=1)  # the GPU beside it throttles: not the simulator's doing
    (sample,) = _samples(gpu_suite, 4)
    assert sample["gpu"] is None
