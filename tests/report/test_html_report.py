"""The HTML report as a reader sees it: a real (short, simulated) pytest session writes
``report.html``, headless Chromium renders it, and the test reads the page's text and looks at
the screenshot's pixels (the verdict colours are drawn, the page is not blank)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from pytest_llmperf.report.html import ReportData, render_html
from pytest_llmperf.report.html_plots import TrendSeries
from pytest_llmperf.verdicts.compare import PointComparison
from pytest_llmperf.verdicts.verdict import Verdict
from tests.plugin.conftest import FAST, SUITE, TESTS, assert_no_servers_left, light
from tests.verdicts import PLAIN, make_sweep

CHROMIUM = next((p for n in ("chromium", "chromium-browser") if (p := shutil.which(n))), None)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no chromium binary on PATH (apt-get install chromium; .ci/run installs it)",
)
# A gate no server can meet: its failure sentence must reach the page in full.
IMPOSSIBLE = SUITE.replace("factor = 1.0", "factor = 10.0").replace("mtp-wins-low-C", "mtp-10x")


def _chromium(*args: str, profile: Path) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu"]
    cmd += ["--disable-background-networking", "--disable-component-update", "--disable-sync"]
    cmd += ["--no-first-run", "--hide-scrollbars", f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True)


class _Visible(HTMLParser):
    """The text a reader sees: everything in <body> but style and script."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._skip = 0
        self._body = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._body = self._body or tag == "body"
        self._skip += tag in ("style", "script", "head")

    def handle_endtag(self, tag: str) -> None:
        self._skip -= tag in ("style", "script", "head")

    def handle_data(self, data: str) -> None:
        if self._body and not self._skip:
            self.parts.append(data)

    def text(self) -> str:
        return " ".join(" ".join(self.parts).split())


def _colours(png: Path) -> set[tuple[int, ...]]:
    from PIL import Image

    with Image.open(png) as img:
        return {c for _n, c in img.convert("RGB").getcolors(maxcolors=1 << 20) or []}


@needs_chromium
def test_report_of_a_session_as_a_reader_sees_it(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLMPERF_HTML_REPORT", "plots")  # tests/conftest.py leaves them out
    pytester.makefile(".toml", llmperf=light(IMPOSSIBLE))
    pytester.makepyfile(test_perf=TESTS)
    pytester.runpytest_subprocess(*FAST, "--llmperf-update", timeout=240)
    result = pytester.runpytest_subprocess(*FAST, timeout=240)
    assert_no_servers_left(pytester.path)
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # the impossible gate
    page = pytester.path / "llmperf-results" / "report.html"
    assert page.is_file(), result.stdout.str()[-2000:]
    html_text = page.read_text()
    # self-contained: nothing loaded from anywhere, no script
    assert not re.search(r"""(?:src|href)\s*=\s*['"](?!data:)""", html_text)
    assert "<script" not in html_text and "<link" not in html_text

    dom = _chromium("--dump-dom", page.as_uri(), profile=tmp_path / "profile").stdout
    seen = _Visible()
    seen.feed(dom)
    text = seen.text()
    assert "SIMULATED" in text
    for config in ("plain (sglang-in64-out16)", "mtp (sglang-in64-out16)"):
        assert config in text
    assert "fail" in text and "What green means" in text
    # the gate's failure sentence, in full, as the terminal printed it
    sentence = next(
        line.strip()[2:]
        for line in result.stdout.lines
        if line.strip().startswith("- mtp at C=1:") and "needs >= 10 × plain" in line
    )
    assert sentence in text
    # each point's "what green means" sentence, as the terminal summary printed it
    green = [
        line.strip()[2:].split(": ", 1)[1]
        for line in result.stdout.lines
        if line.strip().startswith(("- plain: ", "- mtp: "))
        and " at C=" in line
        and ("no regression larger than" in line or "could only have caught" in line)
    ]
    assert green and all(g in text for g in green), green
    assert "Throughput vs concurrency" in text and "Per-user vs total tok/s" in text

    shot = tmp_path / "report.png"
    _chromium(
        f"--screenshot={shot}", "--window-size=1280,4000", page.as_uri(), profile=tmp_path / "p2"
    )
    assert shot.stat().st_size > 50_000
    colours = _colours(shot)
    assert len(colours) > 500  # text, tables, plots: not a blank page
    assert (0xFF, 0xD7, 0xD5) in colours or (0xD6, 0xF5, 0xDD) in colours  # verdict cells drawn
    print(f"screenshot {shot} {shot.stat().st_size} bytes, {len(colours)} colours")


def test_report_without_matplotlib_keeps_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    page = render_html(ReportData([make_sweep("plain", PLAIN)]))
    assert "pip install &#x27;pytest-llmperf[plots]&#x27;" in page
    assert "<h3>plain (sglang-in1000-out1000)</h3>" in page and "<img" not in page


def test_tables_only_draws_no_figure() -> None:
    """html_report = "tables": the tables stay, no figure is drawn (nor matplotlib asked)."""
    trend = TrendSeries("plain C=1", ["r1", "r2"], [100.0, 90.0], [1], unit="tok/s")
    page = render_html(ReportData([make_sweep("plain", PLAIN)], trends=[trend], plots=False))
    assert "<img" not in page and "plots left out" in page
    assert "<h3>plain (sglang-in1000-out1000)</h3>" in page and "r2" in page


def test_every_text_is_escaped_and_redacted() -> None:
    sweep = make_sweep("plain", {1: 100.0})
    sweep.levels[0].notes.append("<script>alert(1)</script> --api-key sk-secretsecret123")
    sweep.server.url = "http://u:p@host/?token=abcdefabcdef"
    msg = "plain at C=1: Bearer sk-secretsecret123 <img src=x>"
    p = PointComparison("plain", 1, sweep.workload.key(), Verdict.INVALID, messages=[msg])
    page = render_html(ReportData([sweep], {"plain": [p]}, problems=["<b>x</b>"]))
    assert "<script>alert" not in page and "<img src=x>" not in page and "<b>x" not in page
    assert "sk-secret" not in page and "abcdefabcdef" not in page
    assert "&lt;script&gt;" in page and "invalid at C=1: not a measurement of speed" in page


def test_trends_and_change_points_are_drawn() -> None:
    series = TrendSeries("plain C=64 output tok/s", ["a1", "b2", "c3"], [10.0, 10.5, 8.0], [2])
    page = render_html(ReportData([make_sweep("plain", PLAIN)], trends=[series]))
    assert "<h3>plain C=64 output tok/s</h3>" in page and "change points at: c3" in page
    assert page.count("data:image/png;base64,") == 4  # three sweep views and the trend
    with pytest.raises(ValueError, match="3 labels but 2 values"):
        TrendSeries("x", ["a", "b", "c"], [1.0, 2.0])


def test_green_means_from_the_decision() -> None:
    from pytest_llmperf.report.html import green_line
    from pytest_llmperf.verdicts.baseline import summarize
    from pytest_llmperf.verdicts.baseline_file import BaselineEntry
    from pytest_llmperf.verdicts.compare import compare_point

    sweep = make_sweep("plain", {64: 2327.0})
    entry = BaselineEntry(metrics={"output_throughput": summarize("output_throughput", [2330.0])})
    p = compare_point("plain", sweep.levels[0], entry, workload=sweep.workload)
    m = p.metric("output_throughput")
    assert p.verdict == Verdict.PASS and m is not None and m.decision.mde is not None
    line = green_line(p)
    assert line.startswith("pass: no regression larger than ")
    assert line.endswith(" in output_throughput at C=64 (n=1 launch)")
    assert f"{100 * m.decision.mde:.0f} %" in line
    recorded = PointComparison("plain", 64, sweep.workload.key(), Verdict.PASS)
    assert "not recorded in this file" in green_line(recorded)
