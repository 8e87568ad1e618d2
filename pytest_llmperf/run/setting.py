"""What a setting is: its parser, default, help and the places it may be given.

The declarations themselves, and the one function that resolves them, are in
``run/settings.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypedDict

from pytest_llmperf.base.errors import InputError

__all__ = ["SUITE", "SUITE_TABLE", "TEST", "WORKLOAD_FIELDS", "Setting", "SettingError"]


class SettingError(InputError):
    """A setting has a bad value, or is given where it cannot be; the message names where."""


SUITE_TABLE = "[sweep] of llmperf.toml"


@dataclass(frozen=True)
class Setting:
    """One setting and where it may be given."""

    name: str
    parse: Callable[[Any], Any]
    default: Any
    help: str
    cli: bool = True
    env: bool = True
    ini: bool = True
    marker: bool = False
    suite: bool = False  # a key of the suite file's [sweep] table
    flag: bool = False  # a CLI switch without a value
    sweep_flag: str | None = None  # `llmperf sweep`'s flag for it, if it has one

    @property
    def cli_flag(self) -> str:
        return "--llmperf-" + self.name.replace("_", "-")

    @property
    def env_var(self) -> str:
        return "LLMPERF_" + self.name.upper()

    @property
    def ini_key(self) -> str:
        return "llmperf_" + self.name

    @property
    def dest(self) -> str:
        return "llmperf_" + self.name

    @property
    def where(self) -> str:
        """Where it goes now, for a setting that the command line no longer takes."""
        places = [f"set {self.name} in {SUITE_TABLE}"] if self.suite else []
        if self.marker:
            places.append(f"@pytest.mark.llmperf({self.name}=...) for one test")
        return " (or ".join(places) + (")" if len(places) > 1 else "")


class _Where(TypedDict, total=False):
    cli: bool
    env: bool
    ini: bool
    suite: bool
    marker: bool


# Where the settings that say what a suite measures may be given (the others: command line,
# environment and ini file, the dataclass's defaults).
SUITE: _Where = {"cli": False, "env": False, "ini": False, "suite": True}
TEST: _Where = {**SUITE, "marker": True}  # ... and what one test may override


# The settings a ``Workload`` is made of: setting name -> Workload field (``run/settings.py``
# declares them). Each field runs the
# setting's parser (base/results.py), so their bounds cannot differ.
WORKLOAD_FIELDS: dict[str, str] = {
    "backend": "backend",
    "input_len": "input_len",
    "output_len": "output_len",
    "seed": "seed",
    "requests": "requests_per_level",
    "request_timeout": "request_timeout_s",
    "idle_timeout": "idle_timeout_s",
    "request_rate": "request_rate",
    "openai_extensions": "openai_extensions",
    "workload": "kind",
    "prefix_len": "prefix_len",
    "prefix_groups": "prefix_groups",
    "range_ratio": "range_ratio",
    "range_convention": "range_convention",
    "dataset": "dataset",
    "dataset_output_len": "dataset_output_len",
    "turns": "turns",
    "think_time": "think_time_s",
}
