"""A report that cannot be written costs neither the recorded baselines nor the summary."""

from __future__ import annotations

from .conftest import LIGHT, run


def test_unwritable_step_summary_leaves_baselines_written(suite, monkeypatch):
    (suite.path / "summary-dir").mkdir()
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(suite.path / "summary-dir"))
    result = run(
        suite,
        "--llmperf-update",
        "--llmperf-levels",
        "1",
        "-k",
        "test_sweep",
        *LIGHT,
    )
    out = result.stdout.str()
    assert "Traceback" not in out and "INTERNALERROR" not in out
    result.stdout.fnmatch_lines(
        [
            "*= llmperf =*",
            "*baselines: 2 baseline entries created*",
            "*WARNING: step summary GITHUB_STEP_SUMMARY=*summary-dir not written*",
        ]
    )
    assert len(list(suite.path.rglob("baselines/**/*.json"))) == 2
