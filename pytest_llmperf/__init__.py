"""pytest-llmperf: LLM-serving performance as pytest assertions.

Importing this package is cheap: no server, no network, no heavy imports. The public API
below is what a test author touches: the objects the fixtures hand a test and what their
``.evaluate()`` returns, the measured data, the warnings and the errors. It is resolved
lazily on first attribute access; ``tests/architecture/test_public_api.py`` pins it. The
engine (servers, stores, the suite loader, the judges) is importable from its own module and
is not part of it.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from pytest_llmperf.base.version import __version__

if TYPE_CHECKING:
    from pytest_llmperf.base.errors import InputError, LLMPerfError
    from pytest_llmperf.base.results import LevelResult, ServerFacts, SweepResult, Workload
    from pytest_llmperf.core.sweep import run_sweep
    from pytest_llmperf.launch.launcher import LaunchError
    from pytest_llmperf.plugin.kinds.ab import ABCheck
    from pytest_llmperf.plugin.kinds.crossover import CrossoverCheck
    from pytest_llmperf.plugin.kinds.gate import GateCheck
    from pytest_llmperf.plugin.kinds.point import PointCheck
    from pytest_llmperf.plugin.kinds.slo import SloCheck
    from pytest_llmperf.plugin.warnings import (
        LLMPerfInconclusiveWarning,
        LLMPerfStaleBaselineWarning,
        LLMPerfWarning,
    )
    from pytest_llmperf.report.ab_table import ABPoint
    from pytest_llmperf.run.setting import SettingError
    from pytest_llmperf.run.suite import SuiteDeprecationWarning, SuiteError
    from pytest_llmperf.verdicts.baseline_file import BaselineFileError
    from pytest_llmperf.verdicts.compare import PointComparison
    from pytest_llmperf.verdicts.gates import GateResult
    from pytest_llmperf.verdicts.verdict import Verdict

_EXPORTS: dict[str, str] = {
    # the objects the fixtures hand a test, and what their .evaluate() returns
    "PointCheck": "pytest_llmperf.plugin.kinds.point",
    "GateCheck": "pytest_llmperf.plugin.kinds.gate",
    "CrossoverCheck": "pytest_llmperf.plugin.kinds.crossover",
    "SloCheck": "pytest_llmperf.plugin.kinds.slo",
    "ABCheck": "pytest_llmperf.plugin.kinds.ab",
    "PointComparison": "pytest_llmperf.verdicts.compare",
    "GateResult": "pytest_llmperf.verdicts.gates",
    "ABPoint": "pytest_llmperf.report.ab_table",
    "Verdict": "pytest_llmperf.verdicts.verdict",
    # measured data, and the sweep as a Python API (docs/cli.md)
    "Workload": "pytest_llmperf.base.results",
    "LevelResult": "pytest_llmperf.base.results",
    "SweepResult": "pytest_llmperf.base.results",
    "ServerFacts": "pytest_llmperf.base.results",
    "run_sweep": "pytest_llmperf.core.sweep",
    # warnings
    "LLMPerfWarning": "pytest_llmperf.plugin.warnings",
    "LLMPerfStaleBaselineWarning": "pytest_llmperf.plugin.warnings",
    "LLMPerfInconclusiveWarning": "pytest_llmperf.plugin.warnings",
    "SuiteDeprecationWarning": "pytest_llmperf.run.suite",
    # errors: one root, and the subclasses a test run reports
    "LLMPerfError": "pytest_llmperf.base.errors",
    "InputError": "pytest_llmperf.base.errors",
    "SuiteError": "pytest_llmperf.run.suite",
    "SettingError": "pytest_llmperf.run.setting",
    "BaselineFileError": "pytest_llmperf.verdicts.baseline_file",
    "LaunchError": "pytest_llmperf.launch.launcher",
}

# Engine names this package exported before; still resolved, with a DeprecationWarning that
# names the module to import them from.
_FORMER: dict[str, str] = {
    "METRICS": "pytest_llmperf.base.metric_defs",
    "run_level": "pytest_llmperf.core.sweep",
    "ServerConfig": "pytest_llmperf.launch.server_config",
    "ServerHandle": "pytest_llmperf.launch.launcher",
    "launch": "pytest_llmperf.launch.launcher",
    "attach": "pytest_llmperf.launch.launcher",
    "BaselineStore": "pytest_llmperf.verdicts.baseline",
    "compare_point": "pytest_llmperf.verdicts.compare",
    "Gate": "pytest_llmperf.verdicts.gates",
    "evaluate_gate": "pytest_llmperf.verdicts.gates",
    "Suite": "pytest_llmperf.run.suite",
    "load_suite": "pytest_llmperf.run.suite",
    "PerfRun": "pytest_llmperf.run.perfrun",
}

__all__ = [
    "ABCheck",
    "ABPoint",
    "BaselineFileError",
    "CrossoverCheck",
    "GateCheck",
    "GateResult",
    "InputError",
    "LLMPerfError",
    "LLMPerfInconclusiveWarning",
    "LLMPerfStaleBaselineWarning",
    "LLMPerfWarning",
    "LaunchError",
    "LevelResult",
    "PointCheck",
    "PointComparison",
    "ServerFacts",
    "SettingError",
    "SloCheck",
    "SuiteDeprecationWarning",
    "SuiteError",
    "SweepResult",
    "Verdict",
    "Workload",
    "__version__",
    "run_sweep",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None and name in _FORMER:
        module = _FORMER[name]
        warnings.warn(
            f"pytest_llmperf.{name} is not public API any more; import it from {module}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(module), name)
    if module is None:
        raise AttributeError(f"module 'pytest_llmperf' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # resolve once
    return value


def __dir__() -> list[str]:
    return __all__
