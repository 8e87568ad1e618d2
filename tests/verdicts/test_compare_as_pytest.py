"""``llmperf compare`` on a run's results.json gives the verdicts that run's pytest gave.

The suite uses what the command used to ignore: per-metric tolerances in ``[sweep]``, a metric
list, ``repeat = 2`` (every sample must reach the results file) and a ``[[crossover]]``. The
second run slows ``mtp`` by about 13 % (inside the suite's 25 % tolerance, outside the 5 %
default) and ``plain`` at C=4 by 2.5x (a failure either way).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_llmperf.cli import main
from pytest_llmperf.report.results_file import judge_recorded, judge_run, load_run
from pytest_llmperf.run.compare_settings import compare_settings
from pytest_llmperf.verdicts.compare import Verdict
from tests.plugin.conftest import FAST, assert_no_servers_left, light

SUITE = """
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
repeat = 2
metrics = ["output_throughput", "per_request_throughput"]
tolerance = { output_throughput = "25%", per_request_throughput = "25%" }

[[gate]]
name = "mtp-wins-low-C"
config = "mtp"
reference = "plain"
factor = 1.0

[[crossover]]
name = "mtp-vs-plain"
config = "mtp"
reference = "plain"
"""

TESTS = """
def test_sweep(llmperf_point):
    llmperf_point.assert_baseline()


def test_gate(llmperf_gate):
    llmperf_gate.check()


def test_crossover(llmperf_crossover):
    llmperf_crossover.assert_baseline()
"""

SLOWER = "mtp: --sim-slowdown 1-64:1.15; plain: --sim-slowdown 2-4:2.5"
ARGS = [*FAST, "--llmperf-output-len", "128"]


def _junit(path: Path) -> dict[str, tuple[str, dict[str, str]]]:
    """test name → (outcome, llmperf properties) from a JUnit XML report."""
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome = "passed"
        if case.find("failure") is not None or case.find("error") is not None:
            outcome = "failed"
        elif case.find("skipped") is not None:
            outcome = "skipped"
        props = {p.get("name", ""): p.get("value", "") for p in case.iter("property")}
        out[case.get("name", "")] = (outcome, props)
    return out


@pytest.mark.slow
def test_compare_gives_the_verdicts_of_the_pytest_run(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    pytester.makefile(".toml", llmperf=light(SUITE))
    pytester.makepyfile(test_perf=TESTS)
    suite = pytester.path / "llmperf.toml"
    baselines = pytester.path / "baselines"
    results = pytester.path / "llmperf-results" / "results.json"

    record = pytester.runpytest_subprocess(*ARGS, "--llmperf-update", timeout=300)
    record.assert_outcomes(passed=4 + 2 + 1)
    after = pytester.runpytest_subprocess(
        *ARGS, "--llmperf-sim-args", SLOWER, "--junitxml=junit.xml", timeout=300
    )
    assert_no_servers_left(pytester.path)
    junit = _junit(pytester.path / "junit.xml")

    # Every sample reached the results file: repeat = 2 (plus any re-runs of a noisy point).
    run = load_run(results)
    for sweep in run.sweeps:
        for c in (1, 4):
            assert len(sweep.samples(c)) >= 2, (sweep.config, c)

    verdicts = judge_run(
        run,
        baselines,
        compare_settings(suite).tolerances,
        compare_settings(suite).gates,
        metrics=compare_settings(suite).metrics,
        crossovers=compare_settings(suite).crossovers,
    )
    # Points: the plugin's verdict (JUnit property) is the command's, point by point.
    pytest_points = {
        name.removeprefix("test_sweep[").rstrip("]"): props["llmperf.verdict"]
        for name, (_, props) in junit.items()
        if name.startswith("test_sweep[")
    }
    cli_points = {
        f"{p.config}-C{p.concurrency}": p.verdict.value
        for ps in verdicts.points.values()
        for p in ps
    }
    assert cli_points == pytest_points, after.stdout.str()[-3000:]
    # The slowdowns did what they are for: the 10 % one passes only under the suite's tolerance.
    assert cli_points["plain-C4"] == Verdict.FAIL
    assert cli_points["mtp-C1"] in (Verdict.PASS, Verdict.INCONCLUSIVE)
    # Gates, per concurrency.
    pytest_gates = {
        name: outcome for name, (outcome, _) in junit.items() if name.startswith("test_gate[")
    }
    cli_gates = {
        f"test_gate[mtp-wins-low-C-C{p.concurrency}]": p.verdict
        for g in verdicts.gates
        for p in g.points
    }
    assert set(cli_gates) == set(pytest_gates)
    for name, verdict in cli_gates.items():
        assert (verdict == Verdict.PASS) == (pytest_gates[name] == "passed"), name
    # The crossover: same number, same baseline, same outcome.
    (cross,) = verdicts.crossovers
    outcome, props = junit["test_crossover[mtp-vs-plain]"]
    assert str(cross.value) == props["llmperf.crossover_concurrency"]
    assert str(cross.baseline) == props["llmperf.crossover_concurrency.baseline"]
    assert (cross.verdict == Verdict.PASS) == (outcome == "passed")

    # The command itself: same exit status, and the tables pytest printed.
    capsys.readouterr()
    status = main(["compare", str(results), "--baselines", str(baselines), "--gates", str(suite)])
    printed = capsys.readouterr().out
    assert status == after.ret == 1
    tables = printed.split("problems:")[0]
    pytest_out = after.stdout.str()
    for line in tables.splitlines():
        assert line in pytest_out, line
    assert cross.line() in printed and cross.line() in pytest_out
    # Without the suite file the 5 % default fails the slower mtp.
    default = judge_run(run, baselines)
    assert Verdict.FAIL in {p.verdict for p in default.points["mtp"]}
    assert Verdict.PASS not in {p.verdict for p in default.points["mtp"]}


SHIPPED = Path(__file__).resolve().parents[2] / "perf_tests"
# The shipped suite as it is (its markers, gates and crossover), on fewer and shorter levels for
# the unmarked tests; the marked workloads keep their own settings, as in `pytest perf_tests`.
SHIPPED_ARGS = [
    "-p", "no:randomly", "--llmperf-levels", "1,4", "--llmperf-input-len", "64",
    "--llmperf-output-len", "64", "--llmperf-baseline-repeat", "1",
]  # fmt: skip
BAD = {Verdict.FAIL, Verdict.INVALID, Verdict.MISSING}


def _nodeid(classname: str, name: str) -> str:
    return f"{classname.replace('.', '/')}.py::{name}"


def _compare(
    results: Path, baselines: Path, suite: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    capsys.readouterr()
    status = main(["compare", str(results), "--baselines", str(baselines), "--gates", str(suite)])
    return status, capsys.readouterr().out


@pytest.mark.slow
def test_compare_agrees_with_pytest_on_the_shipped_suite(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    for f in [SHIPPED / "llmperf.toml", *SHIPPED.glob("test_*.py")]:
        (pytester.path / f.name).write_text(f.read_text())
    suite = pytester.path / "llmperf.toml"
    baselines = pytester.path / "baselines"
    results = pytester.path / "llmperf-results" / "results.json"

    record = pytester.runpytest_subprocess(*SHIPPED_ARGS, "--llmperf-update", timeout=600)
    assert record.ret == 0, record.stdout.str()[-3000:]

    for sim_args, expect_red in [(None, False), ("plain: --sim-slowdown 4-4:2.0", True)]:
        extra = ["--llmperf-sim-args", sim_args] if sim_args else []
        run = pytester.runpytest_subprocess(
            *SHIPPED_ARGS, *extra, "--junitxml=junit.xml", timeout=600
        )
        assert_no_servers_left(pytester.path)
        junit = {
            _nodeid(case.get("classname", ""), case.get("name", "")): outcome
            for case, outcome in _cases(pytester.path / "junit.xml")
        }
        point_props = _point_verdicts(pytester.path / "junit.xml")
        recorded = load_run(results)
        verdicts = judge_recorded(recorded, baselines)
        # Every judged test of the run is judged by the command, with the same outcome...
        assert set(verdicts.by_test) <= set(junit)
        judged = {k for k in junit if not k.split("::")[1].startswith("test_no_failed")}
        assert set(verdicts.by_test) == judged
        for nodeid, verdict in verdicts.by_test.items():
            assert (verdict in BAD) == (junit[nodeid] == "failed"), (nodeid, verdict)
        # ...and each point the same verdict, marker-restricted workloads included.
        for nodeid, verdict in point_props.items():
            assert verdicts.by_test[nodeid].value == verdict, nodeid
        status, printed = _compare(results, baselines, suite, capsys)
        # Agreement, not greenness: the unslowed run re-measures timings the recording run took
        # on a shared CPU (startup_s, TTFT, ITL of a few ms, one baseline launch each), which a
        # busy machine moves past their tolerances; the plugin fails such a point rightly, and
        # the command must say the same. Only the injected slowdown's red is certain.
        assert status == run.ret, printed + run.stdout.str()[-3000:]
        if expect_red:
            assert status == 1, printed
        # Each workload's table shows its own points only.
        for block in printed.split("\n\n"):
            if block.startswith("plain (sglang-in1100-out64-sp8x1000)"):
                assert [row.split()[0] for row in block.splitlines()[3:]] == ["1", "8"]
        if expect_red:
            failed = {k for k, outcome in junit.items() if outcome == "failed"}
            assert "test_sweep.py::test_sweep[plain-C4]" in failed
            assert {k for k, v in verdicts.by_test.items() if v in BAD} == failed


def _cases(path: Path) -> list[tuple[ET.Element, str]]:
    out = []
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome = "passed"
        if case.find("failure") is not None or case.find("error") is not None:
            outcome = "failed"
        elif case.find("skipped") is not None:
            outcome = "skipped"
        out.append((case, outcome))
    return out


def _point_verdicts(path: Path) -> dict[str, str]:
    """test id -> the plugin's verdict (the ``llmperf.verdict`` JUnit property) of each point."""
    out = {}
    for case, _ in _cases(path):
        props = {p.get("name", ""): p.get("value", "") for p in case.iter("property")}
        if "llmperf.verdict" in props:
            out[_nodeid(case.get("classname", ""), case.get("name", ""))] = props["llmperf.verdict"]
    return out
