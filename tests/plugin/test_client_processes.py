"""--llmperf-client-processes: resolved like every setting, sharding each closed-loop level,
named in the header and in the advice of a level whose client was the bottleneck."""

from __future__ import annotations

import json

import pytest

from pytest_llmperf.run.settings import SettingError, resolve
from pytest_llmperf.verdicts.validity import check_level

from ..verdicts import WORKLOAD, make_level
from .conftest import SWEEP_TEST, assert_no_servers_left, light, run


def test_client_processes_resolve_cli_over_env_over_ini() -> None:
    assert resolve("client_processes", environ={}) == 1
    assert resolve("client_processes", ini="3", environ={}) == 3
    env = {"LLMPERF_CLIENT_PROCESSES": "4"}
    assert resolve("client_processes", ini="3", environ=env) == 4
    assert resolve("client_processes", cli="2", ini="3", environ=env) == 2


@pytest.mark.parametrize("bad", ["0", "two"])
def test_a_bad_client_processes_names_its_source(bad: str) -> None:
    with pytest.raises(SettingError, match=f"command line --llmperf-client-processes={bad}"):
        resolve("client_processes", cli=bad, environ={})
    env = {"LLMPERF_CLIENT_PROCESSES": bad}
    with pytest.raises(SettingError, match="environment variable LLMPERF_CLIENT_PROCESSES"):
        resolve("client_processes", environ=env)


def test_a_saturated_level_says_how_many_client_processes_it_needs() -> None:
    level = make_level(128, 2800, saturated=True)
    assert level.client is not None
    level.client = level.client.model_copy(update={"processes_needed": 3})
    (reason,) = check_level(level, WORKLOAD)
    assert "needs at least 3 client processes: run with --llmperf-client-processes 3" in reason


ONE_SERVER = """
[[server]]
name = "plain"
model = "sim/qwen-moe"
args = []

[sweep]
levels = [4]
requests = 8
"""


@pytest.mark.slow
def test_a_level_sharded_over_two_client_processes_end_to_end(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", llmperf=light(ONE_SERVER))
    pytester.makepyfile(test_perf=SWEEP_TEST)
    result = run(pytester, "--llmperf-update", "--llmperf-client-processes", "2")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*client 2 processes per closed-loop level*"])
    results = json.loads((pytester.path / "llmperf-results" / "results.json").read_text())
    (sweep,) = results["sweeps"]
    (level,) = sweep["levels"]
    assert level["client"]["transport"].endswith("x2 processes")
    assert level["completed"] == 8 and level["failed"] == 0
    assert level["total_output_tokens"] == 8 * 16  # every shard's records merged
    assert_no_servers_left(pytester.path)
