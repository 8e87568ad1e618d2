"""The API key setting: a value an HTTP header cannot carry is refused where it was given."""

from __future__ import annotations

import pytest

from pytest_llmperf.base.values import reveal
from pytest_llmperf.run.settings import SettingError, resolve


def test_api_key_with_a_line_break_names_the_env_var_and_hides_the_value() -> None:
    with pytest.raises(SettingError) as info:
        resolve("api_key", environ={"LLMPERF_API_KEY": "sk-secret\r\nX-Evil: 1"})
    text = str(info.value)
    assert "LLMPERF_API_KEY" in text
    assert "U+000A" in text and "U+000D" in text
    assert "sk-secret" not in text


def test_api_key_trailing_newline_is_trimmed_not_refused() -> None:
    # `export LLMPERF_API_KEY=$(cat key.txt)` keeps no newline, but a value read by hand may
    assert reveal(resolve("api_key", environ={"LLMPERF_API_KEY": "sk-secret\n"})) == "sk-secret"
