"""Time to a verdict: the launches and minutes a suite may take, said before the first launch,
and what it took, recorded as it goes.

The prediction reads what the baselines recorded (each launched server's ``startup_s``, each
level's throughput, from which its duration follows) and the settings that bound the launches
(``launch_budget``: the first sample of each point, the further samples of ``repeat`` or
``baseline_repeat``, and up to ``max_reruns`` fresh launches per point). ``PerfRun`` adds every
measurement's wall time and launch to ``spent``, which results.json keeps per config.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from pytest_llmperf.base.results import Workload
from pytest_llmperf.run.passes import Passes, auto_passes, recorded_ratio
from pytest_llmperf.verdicts.baseline import BaselineStore
from pytest_llmperf.verdicts.baseline_file import BaselineEntry, BaselineFileError, EntryKey

__all__ = [
    "DEFAULT_STARTUP_S",
    "ABPlan",
    "ConfigSpent",
    "Plan",
    "ab_plan",
    "launch_budget",
    "planned_launches",
    "plan",
    "record_spent",
]

# What a start-up is assumed to cost when no baseline recorded one (a small model's SGLang
# start on a warm page cache; a large one takes minutes, and the line says it was assumed).
DEFAULT_STARTUP_S = 60.0


def planned_launches(
    launch_budget: int, time_budget_min: float | None = None, launch_s: float | None = None
) -> int:
    """The most launches a config may take: ``launch_budget``, or fewer when ``time_budget``
    minutes hold fewer launches of ``launch_s`` seconds each (never fewer than one)."""
    n = max(1, launch_budget)
    if time_budget_min is not None and launch_s is not None and launch_s > 0:
        n = min(n, max(1, int(time_budget_min * 60 // launch_s)))
    return n


def launch_budget(
    n_levels: int,
    *,
    repeat: int = 1,
    max_reruns: int = 2,
    update: bool = False,
    baseline_repeat: int = 3,
    adjust: str = "none",
) -> tuple[int, int]:
    """(fewest, most) launches one launched server may take for its point checks.

    The first launch measures every level once; each further sample of a point is a fresh
    launch (with ``adjust = "launch"`` one launch measures the whole sweep), and each re-run of
    an inconclusive or failing point is one more."""
    n = max(repeat, baseline_repeat) if update else repeat
    fewest = n if adjust == "launch" else 1 + n_levels * (n - 1)
    return fewest, fewest + n_levels * max_reruns


@dataclass(frozen=True)
class Plan:
    """The prediction the header prints."""

    launched: int  # servers this session launches (attached ones are never launched)
    attached: int
    launches: tuple[int, int]  # per launched server
    seconds: tuple[float, float]
    startup_s: float | None  # recorded mean, None: DEFAULT_STARTUP_S assumed
    levels: Sequence[int]
    measured: bool  # every level's duration follows from a recorded throughput
    max_reruns: int
    ab: tuple[ABPlan, ...] = ()  # counted in ``seconds``

    def line(self) -> str:
        lo, hi = self.launches
        servers = f"{self.launched} server{'s' if self.launched != 1 else ''}"
        launches = f"{lo} launch{'es' if lo != 1 else ''}" if lo == hi else f"{lo}-{hi} launches"
        head = f"plan: {servers} × {launches}"
        if self.attached:
            head += f" (+{self.attached} attached, never launched)"
        head += "".join(f" + {a.text()}" for a in self.ab)
        start = (
            f"start-up {self.startup_s:.0f} s recorded in baselines"
            if self.startup_s is not None
            else f"no start-up time recorded, {DEFAULT_STARTUP_S:.0f} s assumed"
        )
        measured = (
            "each level's duration from its recorded throughput"
            if self.measured and all(a.measured for a in self.ab)
            else "measuring time not recorded (start-ups only)"
        )
        levels = ",".join(map(str, self.levels))
        return (
            f"{head}, about {_minutes(self.seconds[0])}-{_minutes(self.seconds[1])} min "
            f"({start}; levels {levels}, {measured}; up to {self.max_reruns} re-run"
            f"{'s' if self.max_reruns != 1 else ''} a point)"
        )


@dataclass(frozen=True)
class ABPlan:
    """One ``[[ab]]``'s share of the prediction: rounds of two launches, each launch measuring
    the sweep in ``passes`` passes (as ``run/ab.py`` runs them)."""

    label: str
    rounds: tuple[int, int]
    passes: int
    seconds: tuple[float, float]
    measured: bool  # both sides' level durations follow from recorded throughputs

    def text(self) -> str:
        lo, hi = self.rounds
        rounds = f"{lo} rounds" if lo == hi else f"{lo}-{hi} rounds"
        passes = f"{self.passes} pass{'es' if self.passes != 1 else ''} a launch"
        return f"A/B {self.label} {rounds} of 2 launches ({passes})"


def _minutes(seconds: float) -> str:
    m = seconds / 60
    return f"{m:.1f}" if m < 10 else f"{m:.0f}"


def _entries(store: BaselineStore, hardware: str, config: str) -> list[BaselineEntry]:
    try:
        f = store.file(hardware, config)
    except BaselineFileError:
        return []  # reported where a test reads it
    return [] if f is None else [e for levels in f.workloads.values() for e in levels.values()]


def _one_pass(
    store: BaselineStore, hardware: str, name: str, workload: Workload, levels: Sequence[int]
) -> tuple[float, float, bool]:
    """(one pass of the sweep, a judging launch's sweep in its entries' passes, every level's
    duration known) from the throughputs the baselines recorded."""
    one_pass = sweep = 0.0
    measured = True
    for c in levels:
        try:
            entry = store.get(EntryKey(hardware, name, workload.key(), c), mark_used=False)
        except BaselineFileError:
            entry = None
        tput = entry.metrics.get("output_throughput") if entry is not None else None
        if entry is None or tput is None or not tput.mean:
            measured = False
            continue
        level_s = workload.requests_sent(c) * workload.output_len / tput.mean
        one_pass += level_s
        sweep += entry.passes * level_s  # a judging launch: as many as its entry recorded
    return one_pass, sweep, measured


def _startup(store: BaselineStore, hardware: str, name: str) -> list[float]:
    return [
        e.metrics["startup_s"].mean
        for e in _entries(store, hardware, name)
        if "startup_s" in e.metrics
    ]


def _predicted_passes(
    passes: Passes,
    store: BaselineStore,
    hardware: str,
    name: str,
    workload: Workload,
    levels: Sequence[int],
    startup_s: float | None,
    pass_s: float,
) -> int:
    """``passes``, or for ``"auto"`` what the first launch will choose from the same recorded
    start-up and pass time, at the ratio ``name``'s entries recorded (``run/passes.py``)."""
    if isinstance(passes, int):
        return passes
    ratio = recorded_ratio(store, hardware, name, workload.key(), levels)
    return auto_passes(startup_s, pass_s, ratio)


def ab_plan(
    label: str,
    sides: Sequence[tuple[str, str]],
    store: BaselineStore,
    workload: Workload,
    levels: Sequence[int],
    rounds: tuple[int, int],
    passes: Passes,
    time_budget_min: float | None = None,
) -> ABPlan:
    """``[[ab]]`` ``label`` over ``sides`` ((config, hardware key), the first launched first):
    ``rounds`` (fewest, most) of two launches, each measuring the sweep in ``passes`` passes
    (``"auto"``: what the first launch will choose from the first side's recorded start-up and
    sweep), the most cut to what ``time_budget`` minutes hold, as the round loop cuts it."""
    per_side = []
    measured = True
    for name, hardware in sides:
        startups = _startup(store, hardware, name)
        one, _, known = _one_pass(store, hardware, name, workload, levels)
        measured = measured and known
        per_side.append((statistics.fmean(startups) if startups else None, one))
    first_start, first_pass = per_side[0]
    name, hardware = sides[0]
    n = _predicted_passes(passes, store, hardware, name, workload, levels, first_start, first_pass)
    per_round = sum(
        (start if start is not None else DEFAULT_STARTUP_S) + n * one for start, one in per_side
    )
    fewest, most = rounds
    most = max(2, planned_launches(most, time_budget_min, per_round))
    fewest = min(fewest, most)
    return ABPlan(label, (fewest, most), n, (fewest * per_round, most * per_round), measured)


def plan(
    configs: Iterable[tuple[str, str, bool]],
    store: BaselineStore,
    workload: Workload,
    levels: Sequence[int],
    budget: Callable[[int], tuple[int, int]],
    max_reruns: int,
    samples: int = 1,
    record_passes: Passes | None = None,
    ab: Sequence[ABPlan] = (),
) -> Plan:
    """The prediction for ``configs`` (name, hardware key, launched?): ``budget(n_levels)``
    gives each launched server's (fewest, most) launches (``launch_budget``); each level is
    measured ``samples`` times, and up to ``max_reruns`` more. A judging launch measures a
    level in as many passes as its entry recorded; a recording one (``record_passes``) in
    that many, ``"auto"`` chosen from the recorded start-up and the sweep's time as the
    first launch will choose it (``run/passes.py``). ``ab``: the ``[[ab]]`` rounds, added to
    the time (``ab_plan``)."""
    startups: list[float] = []
    lo_s = hi_s = 0.0
    launched = attached = 0
    measured = True
    fewest, most = budget(len(levels))
    for name, hardware, is_launched in configs:
        mine = _startup(store, hardware, name)
        if is_launched:
            launched += 1
            startups += mine
        else:
            attached += 1
        one_pass, sweep, known = _one_pass(store, hardware, name, workload, levels)
        measured = measured and known
        if record_passes is not None:
            start = statistics.fmean(mine) if mine and is_launched else None
            n = _predicted_passes(record_passes, store, hardware, name, workload, levels, start,
                                  one_pass)  # fmt: skip
            sweep = n * one_pass
        lo_s += sweep * samples
        hi_s += sweep * (samples + max_reruns)
    startup = statistics.fmean(startups) if startups else None
    each = startup if startup is not None else DEFAULT_STARTUP_S
    lo_s += launched * fewest * each + sum(a.seconds[0] for a in ab)
    hi_s += launched * most * each + sum(a.seconds[1] for a in ab)
    return Plan(
        launched,
        attached,
        (fewest, most) if launched else (0, 0),
        (lo_s, max(hi_s, lo_s)),
        startup,
        tuple(levels),
        measured,
        max_reruns,
        tuple(ab),
    )


@dataclass
class ConfigSpent:
    """One config's launches (their ids) and the seconds spent launching and measuring it."""

    launch_ids: set[str] = field(default_factory=set)
    seconds: float = 0.0


def record_spent(
    spent: dict[str, ConfigSpent], config: str, launch: str | None, seconds: float
) -> None:
    got = spent.setdefault(config, ConfigSpent())
    got.seconds += seconds
    if launch is not None:
        got.launch_ids.add(launch)
