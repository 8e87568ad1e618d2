"""Workload settings reach the Workload alike from a marker, the command line and [sweep]."""

from __future__ import annotations

import pytest

from pytest_llmperf.run.settings import SETTINGS_BY_NAME, SettingError, resolve
from pytest_llmperf.run.suite import SweepSection


def test_marker_cli_and_env_resolve_the_workload_settings() -> None:
    marker = {"workload": "shared-prefix", "prefix_len": "1000", "prefix_groups": 8}
    assert resolve("workload", marker=marker) == "shared-prefix"
    assert resolve("prefix_len", marker=marker) == 1000
    assert resolve("prefix_groups", cli="8", environ={}) == 8
    assert resolve("workload", environ={"LLMPERF_WORKLOAD": "shared-prefix"}) == "shared-prefix"
    assert resolve("hit_rate_slack", cli="5%", environ={}) == pytest.approx(0.05)
    assert SETTINGS_BY_NAME["workload"].default == "random"


def test_a_bad_workload_names_its_source() -> None:
    with pytest.raises(SettingError, match="command line --llmperf-workload=radix"):
        resolve("workload", cli="radix", environ={})


def test_the_suite_sweep_section_takes_the_workload_keys() -> None:
    sweep = SweepSection(workload="shared-prefix", prefix_len=1000, prefix_groups=8)
    assert sweep.as_settings() == {
        "workload": "shared-prefix",
        "prefix_len": 1000,
        "prefix_groups": 8,
    }


def test_a_workload_combination_no_setting_rejects_is_a_usage_error(pytester) -> None:
    """shared-prefix without a prefix length: one sentence naming the test, no traceback."""
    from .conftest import SUITE, SWEEP_TEST, run

    pytester.makefile(".toml", llmperf=SUITE)
    pytester.makepyfile(test_perf=SWEEP_TEST)
    result = run(pytester, "--llmperf-workload", "shared-prefix")
    assert result.ret == 4  # pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*the command line, environment, ini or [[]sweep[]]: the workload settings do not fit:*"]
    )
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


def test_length_mix_dataset_and_multi_turn_settings_resolve_from_every_source() -> None:
    marker = {"range_ratio": "0.5", "range_convention": "vllm", "turns": 4}
    assert resolve("range_ratio", marker=marker) == 0.5
    assert resolve("range_convention", marker=marker) == "vllm"
    assert resolve("turns", marker=marker) == 4
    assert resolve("think_time", cli="0.25", environ={}) == 0.25
    assert resolve("dataset", environ={"LLMPERF_DATASET": "d.jsonl"}) == "d.jsonl"
    assert resolve("dataset_output_len", cli="64", environ={}) == 64
    assert resolve("workload", cli="multi-turn", environ={}) == "multi-turn"
    with pytest.raises(SettingError, match="--llmperf-range-ratio=1.5: must be between 0 and 1"):
        resolve("range_ratio", cli="1.5", environ={})
    with pytest.raises(SettingError, match="--llmperf-range-convention=hf"):
        resolve("range_convention", cli="hf", environ={})
    sweep = SweepSection(workload="multi-turn", turns=4, think_time=0.1, range_ratio=0.2)
    assert sweep.as_settings() == {
        "workload": "multi-turn",
        "turns": 4,
        "think_time": 0.1,
        "range_ratio": 0.2,
    }


def test_a_bad_dataset_file_is_a_usage_error_naming_file_and_entry(pytester) -> None:
    from .conftest import SUITE, SWEEP_TEST, run

    pytester.makefile(".toml", llmperf=SUITE)
    pytester.makepyfile(test_perf=SWEEP_TEST)
    pytester.path.joinpath("chats.json").write_text('[{"conversations": [{"from": "human"}]}]')
    result = run(pytester, "--llmperf-dataset", "chats.json")
    assert result.ret == 4  # pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*chats.json: entry 0: field conversations.0.value: *"])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


def test_a_dataset_in_the_suite_file_is_relative_to_that_file(pytester) -> None:
    """`dataset = "data/chats.json"` in perf/llmperf.toml means perf/data/chats.json, from
    wherever pytest runs (here: the directory above, where no such file exists)."""
    from .conftest import SUITE, SWEEP_TEST, run

    perf = pytester.mkdir("perf")
    (perf / "data").mkdir()
    (perf / "data" / "chats.json").write_text('[{"conversations": [{"from": "human"}]}]')
    suite = SUITE.replace("[sweep]", '[sweep]\ndataset = "data/chats.json"')
    (perf / "llmperf.toml").write_text(suite)
    (perf / "test_perf.py").write_text(SWEEP_TEST)
    result = run(pytester, "perf")
    # The file was found (and read): the error is about its content, not a missing file.
    result.stderr.fnmatch_lines(["*perf/data/chats.json: entry 0: field conversations.0.value*"])
