"""Which of the package's JSON files a path holds, so a command given the wrong one says so.

``llmperf merge`` and ``llmperf compare`` read the ``results.json`` of a pytest run; handed
the file ``llmperf sweep --json`` writes (one sweep) or an ``ab.json``, a list of schema errors
("hardware: Field required", "re-run to recreate") would send the user the wrong way.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["not_a_results_file"]

_WHERE = (
    "llmperf merge and llmperf compare read the results.json a pytest run writes in its "
    "--llmperf-output-dir (default llmperf-results/)"
)


def not_a_results_file(path: str | os.PathLike[str]) -> str | None:
    """A sentence naming what ``path`` holds when it is another of the package's JSON files;
    None when it may be a results file (validating it then says what, if anything, is wrong)."""
    try:
        data = json.loads(Path(path).read_bytes())
    except (OSError, ValueError):
        return None  # the loader reports an unreadable or malformed file with its reason
    if not isinstance(data, dict) or "sweeps" in data:
        return None
    if "levels" in data and "workload" in data:
        what = "one sweep (written by `llmperf sweep --json`)"
        return f"{path}: this is {what}, not a results file; {_WHERE}"
    if "points" in data:
        return f"{path}: this is an A/B file (ab.json), not a results file; {_WHERE}"
    return None
