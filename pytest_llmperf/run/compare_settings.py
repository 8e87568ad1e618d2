"""What ``llmperf compare --gates llmperf.toml`` takes from a suite file, as plain values.

The suite file is read here (``run/``), above ``report/``, and handed down as
``CompareSettings``, so the command judges a results file with the tolerances, metrics, gates
and crossovers the pytest run used.
"""

from __future__ import annotations

from pathlib import Path

from pytest_llmperf.report.results_file import CompareSettings
from pytest_llmperf.run.suite import load_suite
from pytest_llmperf.verdicts.crossover import CrossoverRule

__all__ = ["compare_settings"]


def compare_settings(path: Path) -> CompareSettings:
    """The suite's ``[sweep]`` tolerance, metrics and adjust, ``[[gate]]``s, ``[[crossover]]``s."""
    suite = load_suite(path)
    return CompareSettings(
        tolerances=dict(suite.sweep.get("tolerance") or {}) or None,
        metrics=suite.sweep.get("metrics"),
        gates=list(suite.gates),
        crossovers=[
            CrossoverRule(config=c.config, reference=c.reference, metric=c.metric, name=c.name)
            for c in suite.crossovers
        ],
        adjust=suite.sweep.get("adjust") or "none",
    )
