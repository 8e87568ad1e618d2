"""``baseline_passes = "auto"``: how many passes of the sweep a recording launch measures.

A launch costs its start-up ``S`` (weights, CUDA graphs: minutes for a big model on a GPU), a
pass of the sweep ``T``. A launch's residual of a level carries a launch's own effect on it
(variance ``σ_L²``, what only more launches average out) and the passes' noise (``σ_W² / P``).
For a fixed measuring cost the variance is least at ``P = (σ_W / σ_L)·√(S / T)`` passes a
launch (the optimum of two-stage sampling, Cochran 1977, 10.6). Before the first launch
neither spread is known; ``WITHIN_TO_LAUNCH`` = 2 is an assumption, not a measurement (the
simulator's gpu-shared noise shows no launch effect at all, so passes are worth more there;
on a GPU the ratio is unmeasured). Where the config's entries already recorded passes over
several launches (a re-recording), the ratio they show is used instead
(``launch_adjust.within_to_launch``). The passes are
chosen once per config and sweep, from the first launch's start-up and its first pass, so
every level's entry records the same number.

A launch measures no more passes than fit in its own start-up time (``S / T``): its measuring
then never costs more than the start-up it amortizes, so a launch at most doubles in cost.
That bound decides where the entries show no launch effect beyond the passes' noise (ratio
infinite), where the optimum asks for every pass there is: real SGLang on a CPU, a pass
scattering 9.4 % about its launch and launches 1.2 % apart, left a 10 % drop undecided in 11
runs of 8 passes and caught it in 2 of 4 at 24 (``docs/verdicts.md``).

A launch that starts in less time than ``CHEAP_LAUNCH_PASSES`` passes take is cheap: another
launch costs little more than a pass and also samples the launch noise passes cannot, so such
launches measure one pass. The line is relative, as the formula is: real SGLang starting in
26 s on a CPU with a 1.6 s pass is as dear, in passes, as a GPU launch of minutes, and there 8
passes decided A/Bs that one pass left undecided; the simulator starts in well under a pass.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pytest_llmperf.base.results import LevelResult
from pytest_llmperf.base.values import parse_positive_int
from pytest_llmperf.verdicts.baseline import BaselineStore
from pytest_llmperf.verdicts.baseline_file import BaselineFileError, EntryKey
from pytest_llmperf.verdicts.launch_adjust import within_to_launch

__all__ = ["AUTO", "CHEAP_LAUNCH_PASSES", "Passes", "auto_passes",
           "first_pass", "parse_passes", "ratio_text", "recorded_ratio"]  # fmt: skip

AUTO: Literal["auto"] = "auto"
CHEAP_LAUNCH_PASSES = 2.0  # a launch starting in under this many passes' time is cheap
WITHIN_TO_LAUNCH = 2.0  # σ_W / σ_L assumed before anything is measured

Passes = int | Literal["auto"]


def parse_passes(text: Any) -> Passes:
    """The ``baseline_passes`` setting: ``auto`` or a positive whole number."""
    if isinstance(text, str) and text.strip().lower() == AUTO:
        return AUTO
    try:
        return parse_positive_int(text)
    except ValueError as exc:
        raise ValueError(f"{exc}, or auto") from None


def auto_passes(startup_s: float | None, pass_s: float, ratio: float | None = None) -> int:
    """The passes a launch that started in ``startup_s`` measures, a pass taking ``pass_s``
    (module docstring), at ``σ_W / σ_L`` = ``ratio`` (None: ``WITHIN_TO_LAUNCH`` assumed), at
    most the passes that fit in the start-up; 1 when the start-up is unknown (attached) or
    cheap (under ``CHEAP_LAUNCH_PASSES`` passes)."""
    if startup_s is None or pass_s <= 0 or startup_s < CHEAP_LAUNCH_PASSES * pass_s:
        return 1
    most = math.floor(startup_s / pass_s)  # the passes that fit in the start-up time
    best = (WITHIN_TO_LAUNCH if ratio is None else ratio) * math.sqrt(startup_s / pass_s)
    return max(1, min(most, round(best) if math.isfinite(best) else most))


def ratio_text(ratio: float | None) -> str:
    """How a note names the ratio the passes were chosen at."""
    if ratio is None:
        return f"pass-to-launch noise ratio {WITHIN_TO_LAUNCH:g} assumed"
    if not math.isfinite(ratio):
        return "no launch effect beyond the passes' noise in the entries recorded before"
    return f"pass-to-launch noise ratio {ratio:.2g} from the entries recorded before"


def recorded_ratio(
    store: BaselineStore, hardware: str, config: str, workload_key: str, levels: Sequence[int]
) -> float | None:
    """``σ_W / σ_L`` of ``config``'s output throughput as its entries at ``levels`` recorded
    it (``launch_adjust.within_to_launch``; None: not recorded, or unreadable, which the
    tests reading the file report)."""
    spreads = []
    for c in levels:
        try:
            entry = store.get(EntryKey(hardware, config, workload_key, c), mark_used=False)
        except BaselineFileError:
            return None
        tput = entry.metrics.get("output_throughput") if entry is not None else None
        if tput is not None and tput.launch_residual is not None:
            spreads.append(tput.launch_residual)
    return within_to_launch(spreads)


def first_pass(
    by_launch: Mapping[str, Mapping[int, Sequence[LevelResult]]], levels: Sequence[int]
) -> tuple[float | None, float] | None:
    """The earliest launch's start-up and the duration of its first pass over ``levels``
    (None until that launch has measured every level once)."""
    for got in by_launch.values():
        if not all(got.get(c) for c in levels):
            return None
        firsts = [got[c][0] for c in levels]
        return firsts[0].startup_s, sum(lv.duration for lv in firsts)
    return None
