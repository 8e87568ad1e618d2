"""Root conftest of the plugin's own tests: pytester drives the plugin in subprocesses.

``pytest tests`` runs its files on ``WORKERS`` xdist workers: most of the run is end-to-end
sweeps that wait on a simulated server in real time, so workers overlap that waiting even on a
2-core machine. A file stays on one worker (``--dist loadfile``): its tests share module
fixtures and servers. Real-time sweeps marked ``slow`` are left out of this run (``addopts`` in
pyproject.toml) and run on their own, serially: ``pytest tests -m slow -n 0``.

Given ``-n`` (``-n 0``: in this process) or ``--pdb``, or only files to run, that choice is
the caller's; the defaults are set here, not in ``addopts``, because ``addopts`` would also
spread ``pytest perf_tests`` over workers (one server, and one GPU slice, per worker).

Workers overlap waiting, not measuring: the pytest sessions a test starts (pytester's
``runpytest_subprocess``) take turns under one lock per run. Two measuring sessions at once on a
2-core machine starve each other's load generator (event-loop lag over the plugin's 10 ms
limit), and the plugin then rightly calls points too busy, invalid or undecided: verdicts about
the box, not about the workflow a test checks. The other worker still runs everything else.
Tests about a busy machine make their load themselves (``tests/plugin/test_busy_machine.py``).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from filelock import FileLock

pytest_plugins = ["pytester"]

WORKERS = 2
# The longest a session waits for the other worker's: one session of its (a test's timeout is
# 240-300 s) and a margin. Past it the test errors, naming the lock, instead of hanging.
MEASURING_WAIT_S = 900

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


@pytest.fixture(autouse=True)
def _one_measuring_session_at_a_time(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Under xdist, a pytester session runs only while no other worker's does (module doc)."""
    uid = os.environ.get("PYTEST_XDIST_TESTRUNUID")  # the same in every worker of one run
    if uid is None:
        yield
        return
    lock = FileLock(
        Path(tempfile.gettempdir()) / f"pytest-llmperf-tests-{uid}.lock", timeout=MEASURING_WAIT_S
    )
    original = pytest.Pytester.runpytest_subprocess

    def one_at_a_time(self: pytest.Pytester, *args: object, **kwargs: object) -> pytest.RunResult:
        with lock:
            return original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pytest.Pytester, "runpytest_subprocess", one_at_a_time)
    yield
