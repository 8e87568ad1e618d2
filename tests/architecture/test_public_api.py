"""The public API is what ``pytest_llmperf.__all__`` says, resolved lazily and cheaply."""

from __future__ import annotations

import subprocess
import sys

import pytest

import pytest_llmperf

PINNED = [
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


def test_former_engine_exports_still_resolve_with_a_deprecation_warning() -> None:
    from pytest_llmperf.run.perfrun import PerfRun

    with pytest.warns(DeprecationWarning, match=r"import it from pytest_llmperf\.run\.perfrun"):
        assert pytest_llmperf.PerfRun is PerfRun  # type: ignore[attr-defined]
    assert "PerfRun" not in pytest_llmperf.__all__


def test_every_fixture_hands_a_test_an_object_of_a_public_type() -> None:
    from pytest_llmperf.plugin.kinds import ab, crossover, gate, point, slo

    for module in (point, gate, crossover, slo, ab):
        fixture = getattr(module, module.KIND.fixture)
        returned = fixture.__wrapped__.__annotations__["return"]
        assert returned in pytest_llmperf.__all__, (module.KIND.fixture, returned)
        assert getattr(pytest_llmperf, returned) is getattr(module, returned)
