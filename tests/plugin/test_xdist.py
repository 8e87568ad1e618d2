"""Parallel runs, end to end: two independent configs on two xdist workers.

Each worker launches its own simulated server on its own GPU slice and port range; the workers
ship their pending baseline writes to the controller, which writes each file once and reports.
(Concurrent writers of one baseline file are covered at unit level in tests/verdicts.)
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from .conftest import SWEEP_TEST, assert_no_servers_left, light, read_json, run

HW = "sim-fast-moe"  # the hardware key of the simulator's default profile

# No gate or crossover links the two, so xdist's loadgroup puts them on different workers.
INDEPENDENT = """
[[server]]
name = "plain"
model = "sim/qwen-moe"
args = []

[[server]]
name = "mtp"
model = "sim/qwen-moe"
args = ["--speculative-algorithm", "NEXTN"]

[sweep]
levels = [1, 4]
"""


@pytest.fixture
def independent(pytester: pytest.Pytester) -> Iterator[pytest.Pytester]:
    pytester.makefile(".toml", llmperf=light(INDEPENDENT))
    pytester.makepyfile(test_perf=SWEEP_TEST)
    yield pytester
    assert_no_servers_left(pytester.path)


def test_two_workers_record_both_configs_once(independent: pytest.Pytester) -> None:
    t0 = time.monotonic()
    result = run(independent, "-n", "2", "-v", "--llmperf-update")
    print(f"xdist -n 2 --llmperf-update: whole run {time.monotonic() - t0:.1f} s")
    result.assert_outcomes(passed=4)
    # Each config's points ran on one worker, and the two configs on different workers.
    workers = {}
    for config in ("plain", "mtp"):
        lines = [
            line
            for line in result.outlines
            if line.startswith("[gw") and f"test_sweep[{config}-C" in line and "PASSED" in line
        ]
        assert len(lines) == 2, lines
        (workers[config],) = {line.split("]", 1)[0] for line in lines}
    assert workers["plain"] != workers["mtp"]

    # The controller flushed once for the whole run and the summary lists both configs.
    result.stdout.fnmatch_lines(["baselines: 4 baseline entries created in 2 file(s)"])
    result.stdout.fnmatch_lines(["plain (sglang-in64-out16):"])
    result.stdout.fnmatch_lines(["mtp (sglang-in64-out16):"])
    directory = independent.path / "baselines" / HW
    assert sorted(p.name for p in directory.glob("*.json")) == ["mtp.json", "plain.json"]
    for config in ("plain", "mtp"):
        data = read_json(directory / f"{config}.json")
        assert data["config"] == config
        assert sorted(data["workloads"]["sglang-in64-out16"]) == ["1", "4"]
    assert not [p for p in directory.iterdir() if p.suffix not in (".json", ".lock")]

    # Each worker's server had its own GPU slice and its own port.
    results = read_json(independent.path / "llmperf-results" / "results.json")
    servers = {s["config"]: s["server"] for s in results["sweeps"]}
    assert sorted(servers) == ["mtp", "plain"]
    devices = {c: s["server_args"]["sim_cuda_visible_devices"] for c, s in servers.items()}
    assert sorted(devices.values()) == ["0", "1"], devices
    ports = {int(s["url"].rsplit(":", 1)[1]) for s in servers.values()}
    assert len(ports) == 2  # claimed machine-wide, so workers never share one

    # The workers said what each test judged and on which hardware key: `llmperf compare`
    # agrees with the run (the controller measured nothing, so it cannot know either itself).
    # (whether each point passes depends on this box's noise; that both say the same does not)
    again = run(independent, "-n", "2")
    results = read_json(independent.path / "llmperf-results" / "results.json")
    assert results["hardware"] == HW
    # (xdist's loadgroup names a test `ID@group`)
    judged = {j["nodeid"].split("@")[0]: j["verdict"] for j in results["checks"]}
    assert sorted(judged) == sorted(
        f"test_perf.py::test_sweep[{c}-C{n}]" for c in ("plain", "mtp") for n in (1, 4)
    ), judged
    from pytest_llmperf.cli import main

    status = main(["compare", str(independent.path / "llmperf-results" / "results.json"),
                   "--baselines", str(independent.path / "baselines")])  # fmt: skip
    assert status == again.ret
