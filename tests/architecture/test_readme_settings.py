"""The README is the user's guide: every setting the plugin accepts has its row there."""

from __future__ import annotations

from pathlib import Path

from pytest_llmperf.run.settings import SETTINGS

README = Path(__file__).resolve().parents[2] / "README.md"


def test_every_setting_has_a_readme_row() -> None:
    rows = [line for line in README.read_text().splitlines() if line.startswith("| `--llmperf-")]
    documented = {row.split("`")[1].split("=")[0] for row in rows}
    flags = {"--llmperf-" + s.name.replace("_", "-") for s in SETTINGS if s.cli}
    assert sorted(flags - documented) == []
    assert sorted(documented - flags) == []  # no row for a flag that no longer exists
