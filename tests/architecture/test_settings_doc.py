"""docs/settings.md's table is generated from run/settings.py's declarations and must match."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pytest_llmperf.base.errors import InputError
from pytest_llmperf.run.setting import SUITE
from pytest_llmperf.run.settings import SETTINGS, Setting
from pytest_llmperf.run.settings_doc import (
    BEGIN,
    END,
    REGENERATE,
    generated_block,
    render_table,
    replace_block,
)

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "settings.md"


def test_docs_settings_table_is_the_rendered_declarations() -> None:
    block = generated_block(PAGE.read_text(encoding="utf-8"), str(PAGE))
    assert block == render_table(), (
        f"docs/settings.md's settings table is out of date: run `{REGENERATE}` from the "
        "repository root and commit docs/settings.md"
    )


def test_every_setting_and_cli_flag_has_exactly_one_row() -> None:
    rows = render_table().splitlines()[2:]
    assert [row.split("`")[1] for row in rows] == [s.name for s in SETTINGS]
    flags = [row.split(" | ")[1] for row in rows]
    documented = [f.strip("`").split("=")[0] for f in flags if f != "—"]
    assert sorted(documented) == sorted(s.cli_flag for s in SETTINGS if s.cli)


def test_rows_say_where_a_setting_may_be_given() -> None:
    table = render_table(
        [
            Setting("x_switch", bool, False, "a switch", flag=True),
            Setting("x_value", int, (1, 2), "a | value", marker=True, ini=False),
            Setting("x_suite", int, None, "in [sweep]", **SUITE),
        ]
    ).splitlines()
    assert table[2] == (
        "| `x_switch` | `--llmperf-x-switch` | `LLMPERF_X_SWITCH` | `llmperf_x_switch` | no | no "
        "| off | a switch |"
    )
    assert table[3] == (
        "| `x_value` | `--llmperf-x-value=…` | `LLMPERF_X_VALUE` | — | yes | no | 1,2 "
        "| a \\| value |"
    )
    assert table[4] == "| `x_suite` | — | — | — | no | yes | — | in [sweep] |"


def test_replace_block_keeps_the_hand_written_text() -> None:
    page = f"intro\n{BEGIN}\nstale row\n{END}\noutro\n"
    assert replace_block(page, "| new |\n", "p.md") == f"intro\n{BEGIN}\n| new |\n{END}\noutro\n"
    with pytest.raises(InputError, match="p.md: needs exactly one line"):
        replace_block("intro\nno markers\n", "| new |\n", "p.md")


def test_the_command_regenerates_and_checks_a_page(tmp_path: Path) -> None:
    page = tmp_path / "settings.md"
    page.write_text(f"# S\n{BEGIN}\nold\n{END}\ntail\n", encoding="utf-8")
    cmd = [sys.executable, "-m", "pytest_llmperf.run.settings_doc"]
    stale = subprocess.run([*cmd, "--check", str(page)], capture_output=True, text=True)
    assert stale.returncode == 1
    assert REGENERATE in stale.stderr
    done = subprocess.run([*cmd, str(page)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert page.read_text(encoding="utf-8") == f"# S\n{BEGIN}\n{render_table()}{END}\ntail\n"
    current = subprocess.run([*cmd, "--check", str(page)], capture_output=True, text=True)
    assert current.returncode == 0, current.stderr
    missing = subprocess.run([*cmd, str(tmp_path / "nope.md")], capture_output=True, text=True)
    assert missing.returncode == 2
    assert "nope.md" in missing.stderr
