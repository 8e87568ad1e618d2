"""GPU telemetry through NVML: what the server's GPUs did while a level was measured.

A throttled GPU (heat, power cap, a board slowdown) makes a level slow for reasons that are not
the code's; the verdicts can only tell the two apart if each level says what its GPUs did.
``Telemetry`` is the seam: ``NvmlTelemetry`` reads NVML through nvidia-ml-py's ``pynvml``
module (``nvmlInit``, ``nvmlDeviceGetClockInfo`` ... as that module names them), ``NoTelemetry``
stands in when there is no NVML library or no GPU and only says why, in one header line. The
module is imported by name (the ``nvml_module`` setting), which is how tests put a scripted
stand-in (``tests/fake_nvml.py``) in its place.

A level's samples are taken by a daemon thread every ``interval`` seconds from the level's
start to its end (``Sampler``); each sample reads every GPU of the server, so the cost is a few
NVML calls per GPU per interval, bounded by ``MAX_SAMPLES`` per level.
"""

from __future__ import annotations

import importlib
import statistics
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Protocol

from pytest_llmperf.base.gpu_stats import GpuTelemetry

__all__ = [
    "MAX_SAMPLES",
    "NoTelemetry",
    "NvmlTelemetry",
    "Sampler",
    "Telemetry",
    "nvml_indices",
    "open_telemetry",
    "summarize",
]

MAX_SAMPLES = 20_000  # per level: over an hour at 0.2 s; later samples are not kept
# pynvml's bit constant name (``nvmlClocksEventReason<Name>``) -> the word files use
_REASON_BITS = {
    "GpuIdle": "gpu_idle",
    "ApplicationsClocksSetting": "applications_clocks",
    "SwPowerCap": "sw_power_cap",
    "HwSlowdown": "hw_slowdown",
    "SyncBoost": "sync_boost",
    "SwThermalSlowdown": "sw_thermal",
    "HwThermalSlowdown": "hw_thermal",
    "HwPowerBrakeSlowdown": "hw_power_brake",
    "DisplayClockSetting": "display_clocks",
}


@dataclass(frozen=True)
class Sample:
    """One reading of one GPU."""

    gpu: str
    sm_mhz: float
    mem_mhz: float
    reasons: frozenset[str]
    power_w: float | None
    temperature_c: float | None
    memory_used_mib: float | None
    util_percent: float | None


class Telemetry(Protocol):
    """Where a level's GPU samples come from."""

    @property
    def header(self) -> str: ...

    def start(self, gpus: Sequence[str]) -> Sampler | None: ...


class NoTelemetry:
    """No NVML (library missing, no GPU, turned off): levels carry no telemetry."""

    def __init__(self, why: str) -> None:
        self.why = why

    @property
    def header(self) -> str:
        return f"GPU telemetry: off ({self.why})"

    def start(self, gpus: Sequence[str]) -> Sampler | None:
        return None


class NvmlTelemetry:
    """NVML through ``nvml`` (the ``pynvml`` module or a stand-in with its names)."""

    def __init__(self, nvml: ModuleType, interval_s: float) -> None:
        self.nvml = nvml
        self.interval_s = interval_s
        nvml.nvmlInit()
        self.count = int(nvml.nvmlDeviceGetCount())
        self.driver = _text(nvml.nvmlSystemGetDriverVersion())
        self._lock = threading.Lock()  # NVML handles may be read from one sampler at a time
        self._max_sm: dict[str, float | None] = {}
        self._reason_fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or (
            nvml.nvmlDeviceGetCurrentClocksThrottleReasons  # drivers before the rename
        )
        self._bits = {
            word: int(bit)
            for name, word in _REASON_BITS.items()
            for bit in [
                getattr(nvml, f"nvmlClocksEventReason{name}", None)
                or getattr(nvml, f"nvmlClocksThrottleReason{name}", None)
            ]
            if bit
        }

    def _handle(self, gpu: str) -> Any:
        return self.nvml.nvmlDeviceGetHandleByIndex(int(gpu))

    def describe(self) -> list[str]:
        """``0: NVIDIA H200 (SM 1,980 MHz max, mem 3,201 MHz, power limit 700 W)`` per GPU."""
        nv, out = self.nvml, []
        with self._lock:
            for i in range(self.count):
                h = self._handle(str(i))
                sm = nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM)
                mem = nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)
                limit = nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000
                out.append(
                    f"{i}: {_text(nv.nvmlDeviceGetName(h))} (SM {sm:,} MHz max, mem {mem:,} MHz,"
                    f" power limit {limit:,.0f} W)"
                )
        return out

    @property
    def header(self) -> str:
        try:
            gpus = "; ".join(self.describe()) or "no GPU"
        except Exception as exc:  # a GPU that cannot say its clocks must not stop the session
            gpus = f"GPUs not described ({type(exc).__name__}: {exc})"
        return f"GPU telemetry: NVML, driver {self.driver}, every {self.interval_s:g} s: {gpus}"

    def start(self, gpus: Sequence[str]) -> Sampler | None:
        picked = [g for g in gpus if int(g) < self.count]
        if not picked:
            return None
        return Sampler(self, picked)

    def read(self, gpu: str) -> Sample:
        nv = self.nvml
        with self._lock:
            h = self._handle(gpu)
            if gpu not in self._max_sm:
                self._max_sm[gpu] = _maybe(
                    lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM)
                )
            mask = int(self._reasons(h))
            mem = _maybe(lambda: nv.nvmlDeviceGetMemoryInfo(h))
            util = _maybe(lambda: nv.nvmlDeviceGetUtilizationRates(h))
            power = _maybe(lambda: nv.nvmlDeviceGetPowerUsage(h))  # milliwatts
            return Sample(
                gpu=gpu,
                sm_mhz=float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
                mem_mhz=float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)),
                reasons=frozenset(w for w, bit in self._bits.items() if mask & bit),
                power_w=None if power is None else power / 1000,
                temperature_c=_maybe(
                    lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)
                ),
                memory_used_mib=None if mem is None else mem.used / 2**20,
                util_percent=None if util is None else float(util.gpu),
            )

    def _reasons(self, h: Any) -> int:
        """The clock-event reason mask; a driver older than the binding's name for it lacks
        that function (NVMLError_FunctionNotFound): the older name then, from now on."""
        try:
            return int(self._reason_fn(h))
        except Exception as exc:
            older = getattr(self.nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
            if "FunctionNotFound" not in type(exc).__name__ or older in (None, self._reason_fn):
                raise
            self._reason_fn = older
            return int(older(h))

    def static(self, gpu: str) -> tuple[str, float | None, float | None]:
        """Name, maximum SM clock and enforced power limit (W) of one GPU."""
        nv = self.nvml
        with self._lock:
            h = self._handle(gpu)
            limit = _maybe(lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h))  # milliwatts
            name = _text(nv.nvmlDeviceGetName(h))
        return name, self._max_sm.get(gpu), None if limit is None else limit / 1000


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _maybe(read: Callable[[], Any]) -> Any:
    """A reading some GPUs do not support (NVML_ERROR_NOT_SUPPORTED): None instead."""
    try:
        return read()
    except Exception as exc:  # NVMLError_NotSupported and kin; the sample stays useful
        if type(exc).__name__.startswith("NVMLError"):
            return None
        raise


@dataclass
class Sampler:
    """Samples ``gpus`` on a daemon thread until ``stop()``, which returns the summary."""

    source: NvmlTelemetry
    gpus: list[str]
    samples: list[list[Sample]] = field(default_factory=list)
    error: str | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        self._take()  # one sample at the start: a short level still has one
        self._thread = threading.Thread(target=self._loop, name="llmperf-nvml", daemon=True)
        self._thread.start()

    def _take(self) -> None:
        if self.error is not None or len(self.samples) >= MAX_SAMPLES:
            return
        try:
            self.samples.append([self.source.read(g) for g in self.gpus])
        except Exception as exc:  # a GPU fell off the bus mid-level: keep what was read
            self.error = f"{type(exc).__name__}: {exc}"

    def _loop(self) -> None:
        while len(self.samples) < MAX_SAMPLES and self.error is None:
            if self._stop.wait(self.source.interval_s):
                return
            self._take()

    def stop(self) -> GpuTelemetry:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10 * self.source.interval_s + 5)
        self._take()  # and one at the end
        try:
            statics = [self.source.static(g) for g in self.gpus]
        except Exception as exc:  # the level's samples stand without names and limits
            statics = [(g, None, None) for g in self.gpus]
            self.error = self.error or f"{type(exc).__name__}: {exc}"
        return summarize(self.samples, self.gpus, statics, self.source.interval_s, self.error)


def summarize(
    samples: Sequence[Sequence[Sample]],
    gpus: Sequence[str],
    statics: Sequence[tuple[str, float | None, float | None]],
    interval_s: float,
    error: str | None = None,
) -> GpuTelemetry:
    """One level's summary: per time point the lowest clock of the server's GPUs, a reason
    counted when any GPU had it; then min/median over the level."""
    n = len(samples)
    sm = [min(s.sm_mhz for s in row) for row in samples]
    mem = [min(s.mem_mhz for s in row) for row in samples]

    def each(attr: str) -> list[float]:
        return [float(v) for row in samples for s in row if (v := getattr(s, attr)) is not None]

    temps, power, used, util = (each(a) for a in ("temperature_c", "power_w", "memory_used_mib",
                                                   "util_percent"))  # fmt: skip
    counts: dict[str, int] = {}
    for row in samples:
        for reason in frozenset().union(*(s.reasons for s in row)):
            counts[reason] = counts.get(reason, 0) + 1
    maxes = [m for _, m, _ in statics if m]
    limits = [p for _, _, p in statics if p]
    return GpuTelemetry(
        gpus=list(gpus),
        names=[name for name, _, _ in statics],
        samples=n,
        interval_s=interval_s,
        sm_clock_min_mhz=min(sm) if sm else None,
        sm_clock_median_mhz=statistics.median(sm) if sm else None,
        sm_clock_max_mhz=min(maxes) if maxes else None,
        mem_clock_median_mhz=statistics.median(mem) if mem else None,
        temperature_max_c=max(temps) if temps else None,
        power_mean_w=statistics.fmean(power) if power else None,
        power_limit_w=min(limits) if limits else None,
        memory_used_max_mib=max(used) if used else None,
        util_mean_percent=statistics.fmean(util) if util else None,
        reasons={r: round(c / n, 4) for r, c in sorted(counts.items())} if n else {},
        error=error,
    )


def open_telemetry(mode: str, module: str, interval_s: float) -> Telemetry:
    """The run's telemetry: NVML through ``module`` unless ``mode`` is ``off``; no library, no
    driver or no GPU gives ``NoTelemetry`` with the reason, never an error."""
    if mode == "off":
        return NoTelemetry("gpu_telemetry = off")
    try:
        nvml = importlib.import_module(module)
    except ImportError as exc:
        return NoTelemetry(f"no NVML: cannot import {module} ({exc}); pip install nvidia-ml-py")
    try:
        telemetry = NvmlTelemetry(nvml, interval_s)
    except Exception as exc:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...: no GPU here
        return NoTelemetry(f"no NVML: {type(exc).__name__}: {exc}")
    if telemetry.count == 0:
        return NoTelemetry("no NVML: NVML sees no GPU")
    return telemetry


def nvml_indices(ids: Sequence[int] | None, count: int, env: Mapping[str, str]) -> list[str]:
    """The NVML (physical) indices of a server's GPUs: its logical ``ids`` (or its first
    ``count``) through ``CUDA_VISIBLE_DEVICES``, as CUDA maps them. NVML ignores that variable,
    so index 0 there is the first physical GPU. Entries that are not indices (UUIDs, MIG
    names) cannot be mapped: none is sampled then."""
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    visible = (
        [p.strip() for p in cvd.split(",") if p.strip()]
        if cvd is not None and cvd.strip()
        else None
    )
    logical = list(ids) if ids is not None else list(range(count))
    if visible is None:
        return [str(i) for i in logical]
    picked = [visible[i] for i in logical if i < len(visible)]
    return picked if all(p.isdigit() for p in picked) else []
