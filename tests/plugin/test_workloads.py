"""Workload settings reach the Workload alike from a marker and the suite's [sweep]."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from pytest_llmperf.run.settings import SETTINGS_BY_NAME, SettingError, resolve
from pytest_llmperf.run.suite import SweepSection


def test_marker_and_sweep_resolve_the_workload_settings() -> None:
    marker = {"workload": "shared-prefix", "prefix_len": "1000", "prefix_groups": 8}
    assert resolve("workload", marker=marker) == "shared-prefix"
    assert resolve("prefix_len", marker=marker) == 1000
    assert resolve("prefix_groups", environ={}, suite={"prefix_groups": "8"}) == 8
    assert resolve("workload", environ={}, suite={"workload": "shared-prefix"}) == "shared-prefix"
    assert resolve("hit_rate_slack", environ={}, suite={"hit_rate_slack": "5%"}) == 0.05
    assert SETTINGS_BY_NAME["workload"].default == "random"


def test_a_bad_workload_names_its_source() -> None:
    with pytest.raises(SettingError, match=r"marker @pytest.mark.llmperf\(workload=...\): 'radix'"):
        resolve("workload", marker={"workload": "radix"})
    with pytest.raises(ValidationError, match="'radix' is not one of random, shared-prefix"):
        SweepSection(workload="radix")


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

    sweep = "[sweep]\nlevels = [1, 4]\n"
    pytester.makefile(".toml", llmperf=SUITE.replace(sweep, sweep + 'workload = "shared-prefix"\n'))
    pytester.makepyfile(test_perf=SWEEP_TEST)
    result = run(pytester)
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
    sweep_keys = {"think_time": 0.25, "dataset": "d.jsonl", "dataset_output_len": 64}
    assert resolve("think_time", environ={}, suite=sweep_keys) == 0.25
    assert resolve("dataset", environ={}, suite=sweep_keys) == "d.jsonl"
    assert resolve("dataset_output_len", environ={}, suite=sweep_keys) == 64
    assert resolve("workload", marker={"workload": "multi-turn"}) == "multi-turn"
    with pytest.raises(SettingError, match=r"\(range_ratio=...\): must be between 0 and 1"):
        resolve("range_ratio", marker={"range_ratio": "1.5"})
    with pytest.raises(SettingError, match=r"\(range_convention=...\): 'hf'"):
        resolve("range_convention", marker={"range_convention": "hf"})
    sweep = SweepSection(workload="multi-turn", turns=4, think_time=0.1, range_ratio=0.2)
    assert sweep.as_settings() == {
        "workload": "multi-turn",
        "turns": 4,
        "think_time": 0.1,
        "range_ratio": 0.2,
    }


def test_a_bad_dataset_file_is_a_usage_error_naming_file_and_entry(pytester) -> None:
    from .conftest import SUITE, SWEEP_TEST, run

    sweep = "[sweep]\nlevels = [1, 4]\n"
    pytester.makefile(".toml", llmperf=SUITE.replace(sweep, sweep + 'dataset = "chats.json"\n'))
    pytester.makepyfile(test_perf=SWEEP_TEST)
    pytester.path.joinpath("chats.json").write_text('[{"conversations": [{"from": "human"}]}]')
    result = run(pytester)
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
