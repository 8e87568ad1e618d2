"""A scripted stand-in for nvidia-ml-py's ``pynvml``, for tests of GPU telemetry.

It has the names ``launch/telemetry.py`` reads (as pynvml spells them) and simulates GPUs
from the JSON in ``FAKE_NVML`` (an environment variable, so a pytester subprocess run sees the
same script)::

    {"gpus": 1, "name": "NVIDIA H200", "sm": 1980, "sm_throttled": 1410,
     "reason": "SwPowerCap", "throttle_calls": [1, 3], "missing": false,
     "sm_by_gpu": {"1": 1500}}

``throttle_calls``: the clock-reason reads (counted from 1 over the process, all GPUs
together) that report ``reason``; ``"always"`` throttles every read, absent none. The clock
read right after a throttled reason read is ``sm_throttled``. ``sm_by_gpu``: a GPU that runs
at a lower clock with no reason reported (application clocks set lower, a different board).
``missing``: ``nvmlInit`` fails as it does where the NVML library is absent. Point the plugin
at it with ``LLMPERF_NVML_MODULE=fake_nvml`` (the ``nvml_module`` setting) after copying it
where the run can import it.
"""

from __future__ import annotations

import json
import os
from types import SimpleNamespace
from typing import Any

NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_TEMPERATURE_GPU = 0
# pynvml's bit values (nvmlClocksEventReason*)
nvmlClocksEventReasonGpuIdle = 0x1
nvmlClocksEventReasonApplicationsClocksSetting = 0x2
nvmlClocksEventReasonSwPowerCap = 0x4
nvmlClocksEventReasonHwSlowdown = 0x8
nvmlClocksEventReasonSyncBoost = 0x10
nvmlClocksEventReasonSwThermalSlowdown = 0x20
nvmlClocksEventReasonHwThermalSlowdown = 0x40
nvmlClocksEventReasonHwPowerBrakeSlowdown = 0x80
nvmlClocksEventReasonDisplayClockSetting = 0x100


class NVMLError(Exception):
    pass


class NVMLError_LibraryNotFound(NVMLError):
    def __str__(self) -> str:
        return "NVML Shared Library Not Found"


class NVMLError_NotSupported(NVMLError):
    pass


def _script() -> dict[str, Any]:
    return json.loads(os.environ.get("FAKE_NVML", "{}"))


STATE = {"reason_calls": 0, "throttled": False}


def nvmlInit() -> None:
    if _script().get("missing"):
        raise NVMLError_LibraryNotFound()


def nvmlShutdown() -> None:
    pass


def nvmlSystemGetDriverVersion() -> str:
    return "550.54.15"


def nvmlDeviceGetCount() -> int:
    return int(_script().get("gpus", 1))


def nvmlDeviceGetHandleByIndex(index: int) -> int:
    if not 0 <= index < nvmlDeviceGetCount():
        raise NVMLError("Invalid Argument")
    return index


def nvmlDeviceGetName(handle: int) -> str:
    return str(_script().get("name", "NVIDIA H200"))


def nvmlDeviceGetCurrentClocksEventReasons(handle: int) -> int:
    s = _script()
    STATE["reason_calls"] += 1
    calls = s.get("throttle_calls")
    n = STATE["reason_calls"]
    throttled = calls == "always" or (isinstance(calls, list) and calls[0] <= n <= calls[1])
    STATE["throttled"] = throttled
    reason = globals()[f"nvmlClocksEventReason{s.get('reason', 'SwPowerCap')}"]
    return int(reason) if throttled else 0


def nvmlDeviceGetClockInfo(handle: int, kind: int) -> int:
    s = _script()
    if kind == NVML_CLOCK_MEM:
        return 3201
    if STATE["throttled"]:
        return int(s.get("sm_throttled", 1410))
    return int(s.get("sm_by_gpu", {}).get(str(handle), s.get("sm", 1980)))


def nvmlDeviceGetMaxClockInfo(handle: int, kind: int) -> int:
    return int(_script().get("sm", 1980)) if kind == NVML_CLOCK_SM else 3201


def nvmlDeviceGetPowerUsage(handle: int) -> int:
    return 690_000 if STATE["throttled"] else 450_000  # milliwatts


def nvmlDeviceGetEnforcedPowerLimit(handle: int) -> int:
    return 700_000


def nvmlDeviceGetTemperature(handle: int, sensor: int) -> int:
    return 83 if STATE["throttled"] else 61


def nvmlDeviceGetMemoryInfo(handle: int) -> SimpleNamespace:
    return SimpleNamespace(total=141 * 2**30, free=20 * 2**30, used=121 * 2**30)


def nvmlDeviceGetUtilizationRates(handle: int) -> SimpleNamespace:
    raise NVMLError_NotSupported("Not Supported")  # exercised: a reading a GPU lacks
