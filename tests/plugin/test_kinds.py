"""A check kind is one module of ``plugin/kinds/``: a new one, added as a single file, is
parametrized, run, counted and summarized by the real plugin with nothing else changed."""

from __future__ import annotations

import pytest

from .conftest import SUITE, run

# The whole new kind: one test per config, handing the test its server config. Dropped into
# the kinds package's search path (a conftest adds the folder, as a new file in
# pytest_llmperf/plugin/kinds/ would be found), it touches no other module.
NEW_KIND = """
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_llmperf.plugin.kinds.base import KindDefaults, Parametrization, settings_for


@dataclass(frozen=True)
class ConfigParam:
    config: str
    suite_path: Path


class ConfigKind(KindDefaults):
    name = "config"
    fixture = "llmperf_config"
    order = 9

    def parametrize(self, c):
        params = [ConfigParam(cfg, c.suite_path) for cfg in c.configs]
        return Parametrization(params, [p.config for p in params], "no config")

    def summary_lines(self, llm):
        return [f"CONFIG KIND saw {name}" for name in llm.kind_results.get(self.name, [])]


KIND = ConfigKind()


@pytest.fixture
def llmperf_config(request):
    llm, suite, _ = settings_for(request)
    llm.kind_results.setdefault(KIND.name, []).append(request.param.config)
    return suite.server(request.param.config)
"""

CONFTEST = """
from pathlib import Path

import pytest_llmperf.plugin.kinds as kinds

kinds.__path__.append(str(Path(__file__).parent / "new_kinds"))
"""

TESTS = """
import pytest


def test_model(llmperf_config):
    assert llmperf_config.model == "sim/qwen-moe"


@pytest.mark.llmperf(configs=["mtp"])
def test_mtp_only(llmperf_config):
    assert llmperf_config.name == "mtp"
"""


def test_a_new_kind_is_one_file(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", llmperf=SUITE)
    (pytester.path / "new_kinds").mkdir()
    (pytester.path / "new_kinds" / "configkind.py").write_text(NEW_KIND)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_perf=TESTS)
    result = run(pytester, "-v")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        [
            "*test_model[[]plain[]] PASSED*",
            "*test_model[[]mtp[]] PASSED*",
            "*test_mtp_only[[]mtp[]] PASSED*",
        ]
    )
    out = result.stdout.str()
    assert "CONFIG KIND saw plain" in out and out.count("CONFIG KIND saw mtp") == 2


def test_every_fixture_object_asserts_with_check_and_keeps_its_older_names() -> None:
    from pytest_llmperf.plugin.kinds import ab, crossover, gate, point, slo

    objects = (point.PointCheck, gate.GateCheck, crossover.CrossoverCheck, slo.SloCheck, ab.ABCheck)
    for cls in objects:
        assert callable(getattr(cls, "check", None)), cls
    for cls in (point.PointCheck, gate.GateCheck, ab.ABCheck):
        assert callable(getattr(cls, "evaluate", None)), cls
    assert point.PointCheck.assert_baseline is point.PointCheck.check
    assert point.PointCheck.compare is point.PointCheck.evaluate
    assert crossover.CrossoverCheck.assert_baseline is crossover.CrossoverCheck.check
    assert slo.SloCheck.assert_baseline is slo.SloCheck.check
