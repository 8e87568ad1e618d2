"""Append one session to the history its setting names, and say so in one line.

The pytest session (``plugin/history.py``) and ``llmperf sweep`` both end here, so the line and
what may show of the URL are the same for both.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import SecretStr

from pytest_llmperf.base.results import SweepResult
from pytest_llmperf.base.values import reveal
from pytest_llmperf.history.from_results import git_commit, record_from_results
from pytest_llmperf.history.records import RunRecord
from pytest_llmperf.history.store import HistoryStore
from pytest_llmperf.launch.hardware import detect_gpus, hardware_key

__all__ = ["append_run", "append_sweep"]


def append_run(setting: SecretStr | str, record: RunRecord, base: Path) -> str:
    """Append ``record`` to the database the ``history`` setting names (``default``: the
    SQLite file under ``base``); the line to print. Raises ``HistoryError``/``InputError``."""
    value = reveal(setting)
    with HistoryStore.open(None if value == "default" else value, base=base) as store:
        run_id = store.append(record)
        n = len(record.points)
        return f"history: run #{run_id} appended to {store.url} ({n} point{'s' * (n != 1)})"


def append_sweep(setting: SecretStr | str, result: SweepResult, base: Path) -> str:
    """``llmperf sweep``'s result as one run: its hardware key as the plugin would name it
    (the simulator's profile, else the GPUs this process sees)."""
    profile = result.server.sim_profile
    if profile is not None:
        key = hardware_key([], sim_profile=Path(profile).stem.removeprefix("sim-"))
    else:
        key = hardware_key([g.name for g in detect_gpus()])
    record = record_from_results(
        [result],
        source="sweep",
        hardware={result.config: key},
        started_at=result.started_at,
        commit=git_commit(base),
    )
    return append_run(setting, record, base)
