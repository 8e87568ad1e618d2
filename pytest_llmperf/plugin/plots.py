"""The session's PNG plots: each config's baseline band, the crossover, INVALID levels."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_llmperf.base.results import SweepResult
    from pytest_llmperf.run.checks import SweepCheckResult
    from pytest_llmperf.run.suite import CrossoverSpec
    from pytest_llmperf.verdicts.baseline import BaselineEntry, EntryKey
    from pytest_llmperf.verdicts.compare import PointComparison


def write_plots(
    directory: Path,
    sweeps: Sequence[SweepResult],
    points: Mapping[str, Sequence[PointComparison]],
    sweep_checks: Sequence[SweepCheckResult],
    crossovers: Sequence[CrossoverSpec],
    hardware_for: Callable[[str], str],
    baseline: Callable[[EntryKey], BaselineEntry | None],
) -> None:
    """PNGs with each config's baseline band (value ± tolerance) and the crossover marked."""
    from pytest_llmperf.report.html_plots import baseline_bands
    from pytest_llmperf.report.plots import PlotsUnavailable, plot_all
    from pytest_llmperf.verdicts.verdict import Verdict

    bands = baseline_bands(sweeps, hardware_for, baseline)
    invalid: dict[tuple[str, str], set[int]] = {}
    for pcs in points.values():
        for pc in pcs:
            if pc.verdict == Verdict.INVALID:
                invalid.setdefault((pc.config, pc.workload), set()).add(pc.concurrency)
    crossover = None
    measured = [r for r in sweep_checks if r.metric == "crossover_concurrency"]
    specs = list(crossovers)
    if measured and specs:
        spec = next((c for c in specs if f"crossover {c.label}" == measured[0].label), None)
        if spec is not None:
            crossover = (spec.config, spec.reference, measured[0].value)
    try:
        plot_all(sweeps, directory, bands=bands, crossover=crossover, invalid=invalid)
    except PlotsUnavailable as exc:
        import warnings

        from pytest_llmperf.plugin.warnings import LLMPerfWarning

        warnings.warn(LLMPerfWarning(f"pytest-llmperf: plots skipped: {exc}"), stacklevel=1)
