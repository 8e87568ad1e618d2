"""Each setting is declared once (run/settings.py); everything else that names it is derived.

The suite file's ``[sweep]`` model, the marker's keys, the ``Workload`` fields' bounds and
``llmperf sweep``'s flags are checked here against the declarations, so a copy that drifts
(a bound, a default, a forgotten key) fails a test instead of disagreeing with the setting.
"""

from __future__ import annotations

import argparse

import pytest
from pydantic import ValidationError

from pytest_llmperf.base.results import Workload
from pytest_llmperf.base.values import LOOP_LAG_P99_LIMIT_MS, parser_of
from pytest_llmperf.cli import build_parser, main
from pytest_llmperf.core import monitor
from pytest_llmperf.run.settings import (
    MARKER_KEYS,
    SETTINGS,
    SETTINGS_BY_NAME,
    WORKLOAD_FIELDS,
    SettingError,
    check_marker_keys,
    check_not_given_elsewhere,
    resolve,
    resolve_from,
)
from pytest_llmperf.run.suite import SuiteError, SweepSection, suite_from_data
from pytest_llmperf.verdicts.validity import ValidityPolicy

SERVER = {"server": [{"name": "plain", "model": "sim/m", "args": []}]}


def test_sweep_table_has_one_field_per_suite_setting_checked_by_its_parser() -> None:
    declared = [s.name for s in SETTINGS if s.suite]
    assert list(SweepSection.model_fields) == declared
    for name in declared:
        assert parser_of(SweepSection, name) is SETTINGS_BY_NAME[name].parse, name
    assert SweepSection.model_config.get("extra") == "forbid"


def test_sweep_table_rejects_like_the_setting_and_names_file_and_key() -> None:
    with pytest.raises(SettingError) as from_cli:
        resolve("levels", cli="0", environ={})
    assert str(from_cli.value) == (
        "command line --llmperf-levels=0: concurrency level '0' is not a positive whole number "
        "(e.g. 1,4,16)"
    )
    with pytest.raises(SuiteError) as from_file:
        suite_from_data({**SERVER, "sweep": {"levels": [0], "cpu_limt": 95}}, source="s.toml")
    text = str(from_file.value)
    assert "s.toml: sweep.levels: concurrency level 0 is not a positive whole number" in text
    assert "s.toml: sweep.cpu_limt: Extra inputs are not permitted" in text


def test_marker_keys_are_the_marker_settings_plus_the_selectors() -> None:
    assert {s.name for s in SETTINGS if s.marker} == MARKER_KEYS
    check_marker_keys({name: None for name in MARKER_KEYS | {"configs", "gates"}}, "t")
    with pytest.raises(SettingError) as info:
        check_marker_keys({"cpu_limit": 95}, "test_x")
    allowed = str(info.value).split("allowed: ")[1].split(", ")
    assert allowed == sorted(MARKER_KEYS | {"configs", "gates"})
    assert "cpu_limit" not in allowed  # a suite-wide limit, not a per-test one


@pytest.mark.parametrize(("setting", "field"), sorted(WORKLOAD_FIELDS.items()))
def test_workload_field_runs_its_settings_parser_and_default(setting: str, field: str) -> None:
    s = SETTINGS_BY_NAME[setting]
    assert parser_of(Workload, field) is s.parse
    assert Workload.model_fields[field].default == s.default


@pytest.mark.parametrize("turns", [1, 65])
def test_turns_bounds_are_one_declaration(turns: int) -> None:
    expected = f"turns per conversation must be from 2 to 64, got {turns}"
    with pytest.raises(SettingError, match=expected):
        resolve("turns", marker={"turns": turns})
    with pytest.raises(ValidationError, match=expected):
        SweepSection(turns=turns)
    with pytest.raises(ValidationError, match=expected):
        Workload(kind="multi-turn", turns=turns)
    assert Workload(kind="multi-turn", turns=64).turns == 64


def test_loop_lag_limit_default_is_declared_once() -> None:
    assert SETTINGS_BY_NAME["loop_lag_limit"].default == LOOP_LAG_P99_LIMIT_MS
    assert ValidityPolicy().loop_lag_p99_limit_ms == LOOP_LAG_P99_LIMIT_MS
    assert monitor.LOOP_LAG_P99_LIMIT_MS is LOOP_LAG_P99_LIMIT_MS


def test_resolve_reports_the_source_and_the_suite_comes_last() -> None:
    suite = {"levels": (1, 2), "cpu_limit": 80.0}
    assert resolve_from("levels", environ={}, suite=suite).source == "suite"
    r = resolve_from("levels", cli="4", environ={}, suite=suite)
    assert (r.value, r.source) == ((4,), "cli")
    r = resolve_from("levels", marker={"levels": [8]}, cli="4", environ={}, suite=suite)
    assert (r.value, r.source) == ((8,), "marker")
    # a suite setting is read from nowhere else, even when an env var of its name is set
    r = resolve_from("cpu_limit", environ={"LLMPERF_CPU_LIMIT": "5"}, suite=suite)
    assert (r.value, r.source) == (80.0, "suite")
    r = resolve_from("cpu_limit", environ={})
    assert (r.value, r.source, r.given) == (90.0, "default", False)


def test_a_suite_setting_given_as_flag_or_env_says_where_it_goes() -> None:
    with pytest.raises(SettingError) as info:
        check_not_given_elsewhere(
            {"cpu_limit": "95", "tolerance": "x", "levels": "1"}, {"LLMPERF_SEED": "3"}
        )
    assert str(info.value).split("; ") == [  # in declaration order, levels not among them
        "environment variable LLMPERF_SEED is no longer read: set seed in [sweep] of "
        "llmperf.toml (or @pytest.mark.llmperf(seed=...) for one test)",
        "--llmperf-tolerance is no longer a command-line setting: set tolerance in [sweep] of "
        "llmperf.toml (or @pytest.mark.llmperf(tolerance=...) for one test)",
        "--llmperf-cpu-limit is no longer a command-line setting: set cpu_limit in [sweep] "
        "of llmperf.toml",
    ]


def _sweep_parser() -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["sweep"]


def test_sweep_flags_are_the_declared_ones_with_their_defaults() -> None:
    actions = {a.dest: a for a in _sweep_parser()._actions}
    declared = [s for s in SETTINGS if s.sweep_flag]
    assert {"levels", "input_len", "turns", "request_timeout"} <= {s.name for s in declared}
    for s in declared:
        action = actions[s.name]
        assert s.sweep_flag in action.option_strings
        assert action.default == s.default
    assert actions["levels"].option_strings == ["-c", "--concurrency"]


def test_sweep_flag_rejects_with_the_settings_words(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["sweep", "--url", "http://127.0.0.1:1", "--turns", "65"])
    assert exc.value.code == 2
    assert "--turns: turns per conversation must be from 2 to 64, got 65" in capsys.readouterr().err


def test_removed_flag_through_pytest_is_a_clear_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", llmperf="[[server]]\nname = 'a'\nmodel = 'sim/m'\nargs = []\n")
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("--llmperf-cpu-limit", "95", "-p", "no:randomly")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert (
        "ERROR: pytest-llmperf: --llmperf-cpu-limit is no longer a command-line setting: set "
        "cpu_limit in [sweep] of llmperf.toml\n"
    ) in err
    assert "unrecognized arguments" not in err


def test_removed_env_var_through_pytest_is_a_clear_usage_error(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    monkeypatch.setenv("LLMPERF_TOLERANCE", "output_throughput=5%")
    result = pytester.runpytest_subprocess("-p", "no:randomly")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert (
        "environment variable LLMPERF_TOLERANCE is no longer read: set tolerance in [sweep] of "
        "llmperf.toml (or @pytest.mark.llmperf(tolerance=...) for one test)"
    ) in result.stderr.str()
