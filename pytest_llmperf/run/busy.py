"""A machine too busy to measure, or a GPU that throttled: re-measure such a level, and if it
stays so, say so.

A level whose load generator lagged while it was itself nearly idle
(``validity.starved_by_machine``) was starved by other processes or, on a virtual machine, by
the hypervisor (``verdicts/starvation.py`` says which): its numbers describe the
machine, not the server and not the client. Failing a wall of verdicts for it tells the user
nothing they can act on per test, and skipping it silently would hide that nothing was
measured. So such a point is re-measured (a quieter moment may measure it); if every sample
stays starved, its tests end undecided (skipped, with a short reason) and the session says
once, in the summary, how many points, how busy the machine was and what to do. Whether that
also makes the exit status non-zero is the ``invalid`` setting's call (``fail``, the default:
yes, so a CI job on an overloaded runner never goes green on points it did not measure).

A level during which a GPU of the server throttled (thermal, power cap, HW slowdown: the level's
``gpu`` telemetry) is re-measured the same way, within the same budget; if every sample
throttled, the point is INVALID with the reason named ("the GPU throttled (SW power cap in
40 % of samples, SM clock 1,410 vs 1,980 MHz) — not a code regression; re-measured 2
times"), never passed and never recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from pytest_llmperf.base.results import LevelResult, Workload
from pytest_llmperf.run.perfrun import PerfRun, PointError, Redo
from pytest_llmperf.verdicts.starvation import STEAL_NAMED_PERCENT, holders, stolen
from pytest_llmperf.verdicts.validity import (
    ValidityPolicy,
    disturbed,
    starved_by_machine,
    throttled_by_gpu,
)

__all__ = [
    "BusyPoint",
    "all_starved",
    "all_throttled",
    "throttle_note",
    "busy_point",
    "launch_redo",
    "settle",
    "skip_message",
    "summary_line",
]


@dataclass(frozen=True)
class BusyPoint:
    """One point the machine was too busy to measure, with what its last sample saw."""

    config: str
    concurrency: int
    samples: int  # measurements taken, all starved (re-measurements included)
    client_cpu_percent: float  # the load generator's own CPU, % of one core
    loop_lag_p99_ms: float
    system_cpu_percent: float | None  # the machine's own processes, % of all its CPUs
    cpus: int | None
    steal_percent: float | None = None  # what the hypervisor gave other guests, % of all CPUs

    def label(self) -> str:
        return f"{self.config} C={self.concurrency}"


OnBusy = Callable[[BusyPoint], None]


def all_starved(
    samples: Sequence[LevelResult], workload: Workload | None, policy: ValidityPolicy | None
) -> bool:
    """No sample can be judged, and every one of them only because others held the CPU."""
    return bool(samples) and all(starved_by_machine(s, workload, policy) for s in samples)


def all_throttled(
    samples: Sequence[LevelResult], workload: Workload | None, policy: ValidityPolicy | None
) -> bool:
    """No sample can be judged, and every one of them only because a GPU throttled (or the
    machine was busy besides)."""
    return bool(samples) and all(throttled_by_gpu(s, workload, policy) for s in samples)


def _disturbed(
    samples: Sequence[LevelResult], workload: Workload | None, policy: ValidityPolicy | None
) -> bool:
    """Every sample is invalid only for what the moment did (busy CPU, throttled GPU)."""
    return bool(samples) and all(disturbed(s, workload, policy) for s in samples)


def throttle_note(samples: Sequence[LevelResult]) -> str:
    """What an INVALID line of a point whose every sample throttled adds."""
    again = len(samples) - 1
    return " — not a code regression; " + (
        f"re-measured {again} time{'s' if again != 1 else ''}" if again else "measured once"
    )


def settle(
    run: PerfRun,
    config: str,
    workload: Workload,
    concurrency: int,
    wanted: int,
    max_reruns: int,
    policy: ValidityPolicy | None,
) -> list[LevelResult]:
    """Re-measure a point whose samples are all starved by the machine until one is valid or
    the point holds ``wanted + max_reruns`` samples (a bound every caller shares: a gate after
    the point's own check re-measures nothing more). Same launch: the launch was not at fault.
    """
    samples = run.samples(config, workload, concurrency)
    while _disturbed(samples, workload, policy) and len(samples) < wanted + max_reruns:
        try:
            run.measure(config, workload, concurrency)
        except PointError:
            break
        samples = run.samples(config, workload, concurrency)
    return samples


def busy_point(config: str, samples: Sequence[LevelResult]) -> BusyPoint:
    """The record of a point whose ``samples`` are all starved (the last one's figures)."""
    last = samples[-1]
    client = last.client
    assert client is not None  # starved_by_machine() needs one
    return BusyPoint(
        config=config,
        concurrency=last.max_concurrency,
        samples=len(samples),
        client_cpu_percent=client.cpu_percent,
        loop_lag_p99_ms=client.loop_lag_p99_ms,
        system_cpu_percent=client.system_cpu_percent,
        cpus=client.cpus,
        steal_percent=client.steal_percent,
    )


def _machine(p: BusyPoint) -> str:
    if p.system_cpu_percent is None:
        return ""
    on = f" of {p.cpus} CPUs" if p.cpus else ""
    return f", machine {p.system_cpu_percent:.0f} % busy{on}{stolen(p.steal_percent)}"


def skip_message(points: Iterable[BusyPoint]) -> str:
    """The short reason an undecided test carries (the summary has the rest)."""
    ps = list(points)
    worst = max(ps, key=lambda p: p.loop_lag_p99_ms)
    where = ", ".join(p.label() for p in ps)
    return (
        f"llmperf: machine too busy to measure {where} ({worst.samples} tries): the load "
        f"generator's loop lagged {worst.loop_lag_p99_ms:.0f} ms p99 at "
        f"{worst.client_cpu_percent:.0f} % of a core{_machine(worst)}"
    )


def summary_line(points: Iterable[BusyPoint], lag_limit_ms: float, fail: bool) -> str | None:
    """ONE line for the whole session (None when every point was measured)."""
    unique = {(p.config, p.concurrency): p for p in points}
    if not unique:
        return None
    ps = sorted(unique.values(), key=lambda p: (p.config, p.concurrency))
    lags = [p.loop_lag_p99_ms for p in ps]
    loads = [p.system_cpu_percent for p in ps if p.system_cpu_percent is not None]
    cpus = next((p.cpus for p in ps if p.cpus), None)
    steals = [p.steal_percent for p in ps if p.steal_percent is not None]
    load = (
        f", machine {_span(loads)} % busy" + (f" on {cpus} CPUs" if cpus else "") if loads else ""
    )
    if steals and max(steals) >= STEAL_NAMED_PERCENT:
        load += f" with {_span(steals)} % more stolen"
    # The point the hypervisor starved most decides whom the line names.
    worst = max(ps, key=lambda p: p.steal_percent or 0.0)
    who = holders(worst.client_cpu_percent, worst.system_cpu_percent, worst.steal_percent, cpus)
    n = len(ps)
    status = "; exit status 1 (--llmperf-invalid=fail)" if fail else " (--llmperf-invalid=skip)"
    return (
        f"machine too busy to measure {n} point{'s' if n != 1 else ''} "
        f"({', '.join(p.label() for p in ps)}), each tried {_span([p.samples for p in ps])} "
        f"times: {who.cause} (load generator "
        f"loop lag p99 {_span(lags)} ms, limit {lag_limit_ms:g} ms, while it "
        f"used at most {max(p.client_cpu_percent for p in ps):.0f} % of a core{load}); their "
        f"tests are skipped, undecided{status}. {who.remedy}"
    )


def _span(values: list[float] | list[int]) -> str:
    """``3`` or ``3-5``: a range of measured values, one number when they agree."""
    lo, hi = f"{min(values):.0f}", f"{max(values):.0f}"
    return lo if lo == hi else f"{lo}-{hi}"


def launch_redo(workload: Workload, policy: ValidityPolicy | None, rounds: int) -> Redo:
    """What a launch re-measures in itself (``PerfRun.ensure_launches``): samples the moment
    spoiled, in at most ``rounds`` more rounds (the point's ``max_reruns``)."""
    return Redo(lambda s: disturbed(s, workload, policy), rounds)
