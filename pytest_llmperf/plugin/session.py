"""The plugin's session state: the settings, suites, run, store and results of one pytest run.

What is done with it lives beside it: ``collection`` (parametrization, xdist grouping, the
selected baseline entries) and ``reports`` (the header, the summary, the files and the exit
status), over the check kinds of ``plugin/kinds/``. One instance per pytest process lives in
``config.stash``; an xdist worker has its own and ships its results to the controller.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from pydantic import ValidationError

from pytest_llmperf.plugin.options import SettingSources, progress_printer, resolve_settings
from pytest_llmperf.run.settings import WORKLOAD_FIELDS, Resolved, SettingError

if TYPE_CHECKING:
    from pytest_llmperf.base.probes import LaunchProbes
    from pytest_llmperf.base.results import SweepResult, Workload
    from pytest_llmperf.report.results_file import Judgement
    from pytest_llmperf.run.busy import BusyPoint
    from pytest_llmperf.run.checks import SweepCheckResult
    from pytest_llmperf.run.perfrun import PerfRun
    from pytest_llmperf.run.plan_time import ConfigSpent, Plan
    from pytest_llmperf.run.suite import Suite
    from pytest_llmperf.verdicts.baseline import BaselineStore
    from pytest_llmperf.verdicts.compare import PointComparison
    from pytest_llmperf.verdicts.gates import GateResult
    from pytest_llmperf.verdicts.validity import ValidityPolicy


def usage_error(message: str) -> pytest.UsageError:
    return pytest.UsageError(f"pytest-llmperf: {message}")


@dataclass
class LLMPerfSession:
    """Per-process run state and the operations on it."""

    settings: dict[str, Any]
    rootdir: Path
    xdist_worker: bool = False
    sources: SettingSources = field(default_factory=SettingSources.empty)
    suites: dict[Path, Suite] = field(default_factory=dict)
    run: PerfRun | None = None
    _store: BaselineStore | None = None
    points: dict[str, list[PointComparison]] = field(default_factory=dict)
    gates: list[GateResult] = field(default_factory=list)
    sweep_checks: list[SweepCheckResult] = field(default_factory=list)
    checks: list[Judgement] = field(default_factory=list)  # what each test judged, how
    hardware: dict[str, str] = field(default_factory=dict)  # config -> its hardware key
    invalid: list[str] = field(default_factory=list)
    busy: list[BusyPoint] = field(default_factory=list)  # points too busy a machine left open
    sweeps: list[SweepResult] = field(default_factory=list)
    generated: dict[tuple[Path, str], int] = field(default_factory=dict)
    worker_payloads: list[dict[str, Any]] = field(default_factory=list)
    baseline_lines: list[str] = field(default_factory=list)
    report_errors: list[str] = field(default_factory=list)  # reports that could not be written
    history_lines: list[str] = field(default_factory=list)  # the history store's append
    unmeasured: dict[str, str] = field(default_factory=dict)
    # What a kind collects that no shared table holds (A/B's points), by kind name.
    kind_results: dict[str, list[Any]] = field(default_factory=dict)
    plan: Plan | None = None  # the header's prediction of launches and time
    # what the header's prediction was made from, to make it again for the selected tests
    plan_from: tuple[Any, ...] | None = None
    spent: dict[str, ConfigSpent] = field(default_factory=dict)  # config -> what it took
    probes: list[LaunchProbes] = field(default_factory=list)  # each launch's probe answers

    @classmethod
    def from_config(cls, config: pytest.Config) -> LLMPerfSession:
        sources = SettingSources.from_config(config)
        try:
            settings = resolve_settings(sources)
        except SettingError as exc:
            raise usage_error(str(exc)) from None
        return cls(
            settings=settings,
            rootdir=Path(config.rootpath),
            xdist_worker=getattr(config, "workerinput", None) is not None,
            sources=sources,
        )

    # -- the suite file and per-test settings ---------------------------------------------
    def suite_path(self, start: Path) -> Path | None:
        from pytest_llmperf.run.suite import find_suite_file

        explicit = self.settings.get("config")  # --llmperf-config: the flag names the suite file
        if explicit:
            p = Path(explicit)
            return p if p.is_absolute() else self.rootdir / p
        return find_suite_file(start, self.rootdir)

    def suite(self, start: Path) -> Suite:
        from pytest_llmperf.run.suite import SuiteError, load_suite

        path = self.suite_path(start)
        if path is None:
            raise usage_error(
                f"no llmperf.toml found from {start} up to {self.rootdir}; "
                "create one next to your perf tests or pass --llmperf-config"
            )
        path = path.resolve()
        if path not in self.suites:
            try:
                self.suites[path] = load_suite(path)
            except SuiteError as exc:
                raise usage_error(str(exc)) from None
        return self.suites[path]

    def resolved(self, suite: Suite, marker: dict[str, Any], name: str, where: str) -> Resolved:
        """A setting for one test and where it came from: marker > CLI > env > ini > the
        suite's [sweep] > default."""
        return self.sources.resolve(
            name,
            marker=marker,
            marker_source=f"{where}: @pytest.mark.llmperf",
            suite=suite.sweep.as_settings(),
            suite_source=str(suite.path or "llmperf.toml"),
        )

    def effective(self, suite: Suite, marker: dict[str, Any], name: str, where: str) -> Any:
        """A setting's value for one test (``resolved`` without the source)."""
        return self.resolved(suite, marker, name, where).value

    def validity_policy(self, suite: Suite, marker: dict[str, Any], where: str) -> ValidityPolicy:
        """Validity thresholds (failed requests, length slack, cache hits, client limits)."""
        from pytest_llmperf.verdicts.validity import policy_from_settings

        return policy_from_settings(lambda name: self.effective(suite, marker, name, where))

    def workload(
        self, suite: Suite, marker: dict[str, Any], where: str, config: str | None = None
    ) -> Workload:
        """The workload of one test; for an attached server that is not SGLang and a backend
        nobody chose, the backend the server takes (only SGLang serves ``/generate``)."""
        from pytest_llmperf.base.results import Workload

        given = {name: self.resolved(suite, marker, name, where) for name in WORKLOAD_FIELDS}
        fields = {WORKLOAD_FIELDS[name]: r.value for name, r in given.items()}
        fields["dataset"] = self._dataset_path(suite, given["dataset"])
        if config is not None and not given["backend"].given:
            run = self.perf_run(suite)
            if run.url_for(config):  # attached: ask the server which API it speaks
                fields["backend"] = run.suggested_backend(config) or fields["backend"]
        try:
            return Workload(**fields)
        except ValidationError as exc:  # a combination no single setting could reject
            problems = "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())
            raise usage_error(f"{where}: the workload settings do not fit: {problems}") from None

    @staticmethod
    def _dataset_path(suite: Suite, dataset: Resolved) -> str | None:
        """A relative ``dataset`` written in llmperf.toml is relative to that file (like the
        rest of the suite); given in a marker, to the cwd."""
        value: str | None = dataset.value
        if value is None or Path(value).is_absolute() or suite.path is None:
            return value
        return str(suite.path.parent / value) if dataset.source == "suite" else value

    # -- the run and the store ---------------------------------------------------------------
    @property
    def store(self) -> BaselineStore:
        from pytest_llmperf.verdicts.baseline import BaselineStore

        if self._store is None:
            d = Path(self.settings["baseline_dir"])
            self._store = BaselineStore(
                d if d.is_absolute() else self.rootdir / d,
                replace_broken=bool(self.settings["update"]),
            )
        return self._store

    @property
    def has_store(self) -> bool:
        return self._store is not None

    @property
    def output_dir(self) -> Path:
        d = Path(self.settings["output_dir"])
        return d if d.is_absolute() else self.rootdir / d

    def perf_run(self, suite: Suite) -> PerfRun:
        from pytest_llmperf.run.perfrun import PerfRun, RunOptions

        if self.run is None:
            try:
                self.run = PerfRun(
                    suite,
                    self.output_dir,
                    RunOptions.from_settings(self.settings, suite.slo),
                    progress=progress_printer(),
                    env=self.environment(),
                )
            except ValueError as exc:
                raise usage_error(str(exc)) from None
        return self.run

    def environment(self) -> dict[str, str]:
        """The environment a run slices GPUs and ports by; xdist's worker id only if we are one.

        A pytest started from inside an xdist worker (pytester, a nested run) inherits the
        parent's PYTEST_XDIST_WORKER and would otherwise take that worker's GPU slice and ports.
        """
        env = dict(os.environ)
        if not self.xdist_worker:
            env.pop("PYTEST_XDIST_WORKER", None)
            env.pop("PYTEST_XDIST_WORKER_COUNT", None)
        return env

    def safe_hardware(self, config: str) -> str:
        # Under xdist the controller runs nothing: the workers said which key each config had.
        if config in self.hardware:
            return self.hardware[config]
        try:
            return self.run.hardware_for(config) if self.run else "unknown"
        except Exception:
            return "unknown"

    def close(self) -> None:
        if self.run is not None:
            self.run.close()
            self.sweeps = self.run.all_sweeps()
            self.unmeasured.update(self.run.unmeasured())
            self.spent.update(self.run.spent)
            from pytest_llmperf.run.probing import answered

            self.probes = answered(self.run)
            self.hardware = {s.config: self.safe_hardware(s.config) for s in self.sweeps}


SESSION = pytest.StashKey[LLMPerfSession]()
