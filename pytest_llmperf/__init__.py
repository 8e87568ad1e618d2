"""pytest-llmperf: LLM-serving performance as pytest assertions.

Importing this package is cheap: no server, no network, no heavy imports. The public API
below is resolved lazily on first attribute access; ``tests/test_public_api.py`` pins it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from pytest_llmperf.base.version import __version__

if TYPE_CHECKING:
    from pytest_llmperf.base.errors import InputError, LLMPerfError
    from pytest_llmperf.base.metric_defs import METRICS
    from pytest_llmperf.base.results import LevelResult, ServerFacts, SweepResult, Workload
    from pytest_llmperf.core.sweep import run_level, run_sweep
    from pytest_llmperf.launch.launcher import ServerHandle, attach, launch
    from pytest_llmperf.launch.server_config import ServerConfig
    from pytest_llmperf.run.perfrun import PerfRun
    from pytest_llmperf.run.suite import Suite, load_suite
    from pytest_llmperf.verdicts.baseline import BaselineStore
    from pytest_llmperf.verdicts.compare import PointComparison, Verdict, compare_point
    from pytest_llmperf.verdicts.gates import Gate, GateResult, evaluate_gate

_EXPORTS: dict[str, str] = {
    "LLMPerfError": "pytest_llmperf.base.errors",
    "InputError": "pytest_llmperf.base.errors",
    "METRICS": "pytest_llmperf.base.metric_defs",
    "Workload": "pytest_llmperf.base.results",
    "LevelResult": "pytest_llmperf.base.results",
    "SweepResult": "pytest_llmperf.base.results",
    "ServerFacts": "pytest_llmperf.base.results",
    "run_sweep": "pytest_llmperf.core.sweep",
    "run_level": "pytest_llmperf.core.sweep",
    "ServerConfig": "pytest_llmperf.launch.server_config",
    "ServerHandle": "pytest_llmperf.launch.launcher",
    "launch": "pytest_llmperf.launch.launcher",
    "attach": "pytest_llmperf.launch.launcher",
    "BaselineStore": "pytest_llmperf.verdicts.baseline",
    "compare_point": "pytest_llmperf.verdicts.compare",
    "PointComparison": "pytest_llmperf.verdicts.compare",
    "Verdict": "pytest_llmperf.verdicts.compare",
    "Gate": "pytest_llmperf.verdicts.gates",
    "GateResult": "pytest_llmperf.verdicts.gates",
    "evaluate_gate": "pytest_llmperf.verdicts.gates",
    "Suite": "pytest_llmperf.run.suite",
    "load_suite": "pytest_llmperf.run.suite",
    "PerfRun": "pytest_llmperf.run.perfrun",
}

__all__ = [
    "BaselineStore",
    "Gate",
    "GateResult",
    "InputError",
    "LLMPerfError",
    "LevelResult",
    "METRICS",
    "PerfRun",
    "PointComparison",
    "ServerConfig",
    "ServerFacts",
    "ServerHandle",
    "Suite",
    "SweepResult",
    "Verdict",
    "Workload",
    "__version__",
    "attach",
    "compare_point",
    "evaluate_gate",
    "launch",
    "load_suite",
    "run_level",
    "run_sweep",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_llmperf' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # resolve once
    return value


def __dir__() -> list[str]:
    return __all__
