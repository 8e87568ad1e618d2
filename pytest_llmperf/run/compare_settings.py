"""What ``llmperf compare --gates llmperf.toml`` takes from a suite file, as plain values.

The suite file is read here (``run/``), above ``report/``, and handed down as
``CompareSettings``, so the command judges a results file with the tolerances, metrics, gates
and crossovers the pytest run used.
"""

from __future__ import annotations

from pathlib import Path

from pytest_llmperf.report.results_file import CompareSettings
from pytest_llmperf.run.settings import resolve
from pytest_llmperf.run.suite import load_suite
from pytest_llmperf.verdicts.crossover import CrossoverRule

__all__ = ["compare_settings"]


def compare_settings(path: Path) -> CompareSettings:
    """The suite's ``[sweep]`` tolerance, metrics and adjust, ``[[gate]]``s, ``[[crossover]]``s;
    ``adjust`` as pytest resolves it from the suite (its declared default where unset; the
    environment is not read, as the command judges a file, not this shell's run)."""
    suite = load_suite(path)
    return CompareSettings(
        tolerances=dict(suite.sweep.get("tolerance") or {}) or None,
        metrics=suite.sweep.get("metrics"),
        gates=list(suite.gates),
        crossovers=[
            CrossoverRule(config=c.config, reference=c.reference, metric=c.metric, name=c.name)
            for c in suite.crossovers
        ],
        adjust=resolve("adjust", suite=suite.sweep, suite_source=str(path), environ={}),
    )
