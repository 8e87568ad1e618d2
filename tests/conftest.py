"""Root conftest of the plugin's own tests: pytester drives the plugin in subprocesses.

``pytest tests`` runs its files on ``WORKERS`` xdist worker, one: most of the run is end-to-end
sweeps that measure a simulated server in real time, and on a 2-core machine a second worker's
tests starve a measuring session's load generator (event-loop lag over the plugin's 10 ms
limit). The plugin then rightly calls points too busy, invalid or undecided: verdicts about the
box, not about the workflow a test checks. The worker keeps the tests out of pytest's own
process. Real-time sweeps marked ``slow`` are left out of this run (``addopts`` in
pyproject.toml) and run on their own: ``pytest tests -m slow -n 0``.
Tests about a busy machine make their load themselves (``tests/plugin/test_busy_machine.py``).

Given ``-n`` (``-n 0``: in this process; ``-n 2`` on a bigger machine) or ``--pdb``, or only
files to run, that choice is the caller's; the defaults are set here, not in ``addopts``,
because ``addopts`` would also spread ``pytest perf_tests`` over workers (one server, and one
GPU slice, per worker).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

WORKERS = 1

# The HTML report's figures cost 2-4 s of matplotlib per measuring session and hundreds of
# sessions run here; tests/report/test_html_report.py asks for them where it checks them.
os.environ.setdefault("LLMPERF_HTML_REPORT", "tables")


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which turns -n into workers
def pytest_cmdline_main(config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or config.getoption("usepdb"):
        return
    if getattr(config.option, "numprocesses", 0) is not None:  # -n given, or xdist not loaded
        return
    if all(Path(arg.split("::")[0]).is_file() for arg in config.args):
        return  # a file or a test: quicker without starting workers
    config.option.numprocesses = WORKERS
    config.option.dist = "loadfile"
