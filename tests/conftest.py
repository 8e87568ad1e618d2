"""Root conftest of the plugin's own tests: pytester drives the plugin in subprocesses.

``pytest tests`` runs its files on ``WORKERS`` xdist workers: most of the run is end-to-end
sweeps that wait on a simulated server in real time, so workers overlap that waiting even on a
2-core machine. A file stays on one worker (``--dist loadfile``): its tests share module
fixtures and servers. Real-time sweeps marked ``slow`` are left out of this run (``addopts`` in
pyproject.toml) and run on their own, serially: ``pytest tests -m slow -n 0``.

Given ``-n`` (``-n 0``: in this process) or ``--pdb``, or only files to run, that choice is
the caller's; the defaults are set here, not in ``addopts``, because ``addopts`` would also
spread ``pytest perf_tests`` over workers (one server, and one GPU slice, per worker).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

WORKERS = 2

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
