"""The public API is what ``pytest_llmperf.__all__`` says, resolved lazily and cheaply."""

from __future__ import annotations

import subprocess
import sys

import pytest_llmperf

PINNED = [
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


def test_all_is_pinned() -> None:
    assert pytest_llmperf.__all__ == sorted(PINNED)


def test_every_name_resolves() -> None:
    for name in pytest_llmperf.__all__:
        assert getattr(pytest_llmperf, name) is not None, name


def test_unknown_name_is_an_attribute_error() -> None:
    try:
        pytest_llmperf.no_such_thing  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "no_such_thing" in str(exc)
    else:
        raise AssertionError("expected AttributeError")


def test_import_is_cheap() -> None:
    """Importing the package loads none of the heavy layers (pytest plugins import it)."""
    code = (
        "import sys, pytest_llmperf; "
        "heavy = [m for m in ('httpx', 'aiohttp', 'pydantic', 'numpy', 'scipy', "
        "'pytest_llmperf.core', 'pytest_llmperf.launch') if m in sys.modules]; "
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_errors_share_one_root() -> None:
    from pytest_llmperf.launch.launcher import LaunchError
    from pytest_llmperf.run.settings import SettingError
    from pytest_llmperf.run.suite import SuiteError
    from pytest_llmperf.verdicts.baseline import BaselineFileError

    for cls in (LaunchError, SettingError, SuiteError, BaselineFileError):
        assert issubclass(cls, pytest_llmperf.LLMPerfError), cls
