"""What the GPUs did during one level: the per-level summary of NVML samples.

A file format (``results.json`` levels, baseline entries), so it forbids unknown fields and
every field is optional data a reader may lack. Sampling itself is ``launch/telemetry.py``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "CLOCK_DIFF_LIMIT",
    "DISTURBING",
    "REASON_NAMES",
    "GpuTelemetry",
    "clock_note",
]

# NVML's clock-event reasons (pynvml ``nvmlClocksEventReason*``), by the word used in files.
# Only these describe a GPU slowed by heat, power or the board: idle, application-clock and
# sync-boost reasons are how a healthy GPU runs, so they never disturb a level.
REASON_NAMES: dict[str, str] = {
    "gpu_idle": "idle",
    "applications_clocks": "application clocks",
    "sw_power_cap": "SW power cap",
    "hw_slowdown": "HW slowdown",
    "sync_boost": "sync boost",
    "sw_thermal": "SW thermal slowdown",
    "hw_thermal": "HW thermal slowdown",
    "hw_power_brake": "HW power brake",
    "display_clocks": "display clocks",
}
DISTURBING = frozenset(
    {"sw_power_cap", "hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake"}
)
# Two sides whose median SM clocks differ by more than this ran on differently fast GPUs.
CLOCK_DIFF_LIMIT = 0.05


class GpuTelemetry(BaseModel):
    """The server's GPUs over one level, sampled every ``interval_s`` (all its GPUs together:
    the lowest clock, the highest temperature, a reason counted when any GPU had it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpus: list[str] = Field(default_factory=list)  # NVML indices sampled
    names: list[str] = Field(default_factory=list)
    samples: int = 0
    interval_s: float = 0.0
    sm_clock_min_mhz: float | None = None
    sm_clock_median_mhz: float | None = None
    sm_clock_max_mhz: float | None = None  # the GPU's own maximum (nvmlDeviceGetMaxClockInfo)
    mem_clock_median_mhz: float | None = None
    temperature_max_c: float | None = None
    power_mean_w: float | None = None
    power_limit_w: float | None = None
    memory_used_max_mib: float | None = None
    util_mean_percent: float | None = None
    # reason (REASON_NAMES key) -> share of samples in which some GPU reported it
    reasons: dict[str, float] = Field(default_factory=dict)
    error: str | None = None  # sampling stopped early: why

    def throttled(self, max_share: float = 0.0) -> dict[str, float]:
        """The disturbing reasons seen in more than ``max_share`` of the samples."""
        return {r: s for r, s in self.reasons.items() if r in DISTURBING and s > max_share}

    def throttle_text(self, max_share: float = 0.0) -> str:
        """``SW power cap in 40 % of samples, SM clock 1,410 vs 1,980 MHz``."""
        parts = [
            f"{REASON_NAMES.get(r, r)} in {100 * s:.0f} % of samples"
            for r, s in sorted(self.throttled(max_share).items(), key=lambda kv: -kv[1])
        ]
        if self.sm_clock_median_mhz is not None:
            top = f" vs {self.sm_clock_max_mhz:,.0f}" if self.sm_clock_max_mhz else ""
            parts.append(f"SM clock {self.sm_clock_median_mhz:,.0f}{top} MHz")
        return ", ".join(parts)


def _median(values: list[float]) -> float | None:
    if not values:
        return None
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def clock_note(sides: dict[str, list[GpuTelemetry | None]]) -> str | None:
    """One sentence when the sides' median SM clocks differ by more than ``CLOCK_DIFF_LIMIT``
    (the numbers then compare GPUs as much as code); None when they agree or are unknown."""
    medians: dict[str, float] = {}
    for name, tele in sides.items():
        m = _median([t.sm_clock_median_mhz for t in tele if t and t.sm_clock_median_mhz])
        if m is None:
            return None
        medians[name] = m
    if len(medians) < 2:
        return None
    lo, hi = min(medians.values()), max(medians.values())
    if hi <= 0 or (hi - lo) / hi <= CLOCK_DIFF_LIMIT:
        return None
    each = " vs ".join(f"{n} {m:,.0f} MHz" for n, m in medians.items())
    return (
        f"the two sides ran at different GPU clocks (median SM clock {each}, "
        f"{100 * (hi - lo) / hi:.0f} % apart): part of the difference may be the GPUs'"
    )
