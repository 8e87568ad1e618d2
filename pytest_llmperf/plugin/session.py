"""The plugin's session object: the state of one pytest run and everything done with it.

The hooks in ``plugin/__init__.py`` stay thin and call methods here (pytest-xdist's
``DSession`` and syrupy's ``SnapshotSession`` are the models). One instance per pytest process
lives in ``config.stash``; an xdist worker has its own and ships its results to the controller.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from pydantic import ValidationError

from pytest_llmperf.plugin.options import (
    SettingSources,
    client_text,
    progress_printer,
    resolve_settings,
)
from pytest_llmperf.plugin.params import (
    AB_FIXTURE,
    CROSSOVER_FIXTURE,
    GATE_FIXTURE,
    KIND_ORDER,
    POINT_FIXTURE,
    SLO_FIXTURE,
    ABParam,
    CrossoverParam,
    GateParam,
    Param,
    PointParam,
    SloParam,
    gate_id,
    item_param,
    marker_kwargs,
    parametrize,
)
from pytest_llmperf.run.settings import (
    MARKER_KEYS,
    WORKLOAD_FIELDS,
    Resolved,
    SettingError,
    check_marker_keys,
)

if TYPE_CHECKING:
    from pytest_llmperf.base.results import SweepResult, Workload
    from pytest_llmperf.report.ab_table import ABPoint
    from pytest_llmperf.report.results_file import Judgement
    from pytest_llmperf.run.ab import ABRun
    from pytest_llmperf.run.busy import BusyPoint
    from pytest_llmperf.run.checks import SweepCheckResult
    from pytest_llmperf.run.perfrun import PerfRun
    from pytest_llmperf.run.suite import Suite
    from pytest_llmperf.verdicts.baseline import BaselineStore
    from pytest_llmperf.verdicts.compare import PointComparison
    from pytest_llmperf.verdicts.gates import GateResult
    from pytest_llmperf.verdicts.validity import ValidityPolicy


# A flag or env var that narrows the levels of a session: the project's tests define more
# points than it measures. (A workload flag measures another workload; scopes are per workload.)
_NARROWING = frozenset({"levels"})


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
    unmeasured: dict[str, str] = field(default_factory=dict)
    ab_runs: dict[tuple[Path, int, Workload, tuple[int, ...]], ABRun] = field(  # ab
        default_factory=dict
    )
    ab_points: list[ABPoint] = field(default_factory=list)  # ab

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

        explicit = self.settings.get("config")
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

    # -- parametrization --------------------------------------------------------------------
    def generate_tests(self, metafunc: pytest.Metafunc) -> None:
        names = set(metafunc.fixturenames)
        if not {POINT_FIXTURE, GATE_FIXTURE, CROSSOVER_FIXTURE, SLO_FIXTURE, AB_FIXTURE} & names:
            return
        where = metafunc.definition.nodeid
        suite = self.suite(Path(str(metafunc.definition.path)))
        assert suite.path is not None
        suite_path = suite.path.resolve()
        marker = marker_kwargs(metafunc.definition)
        for mark in metafunc.definition.iter_markers("llmperf"):
            if mark.args:
                raise usage_error(
                    f"{where}: @pytest.mark.llmperf takes keywords only, got positional "
                    f"{', '.join(repr(a) for a in mark.args)} "
                    '(write e.g. @pytest.mark.llmperf(configs=["plain"], levels=[4]))'
                )
        try:
            check_marker_keys(marker, f"{where}: @pytest.mark.llmperf")
            for name in sorted(MARKER_KEYS & set(marker)):  # bad values fail here, once per test
                self.effective(suite, marker, name, where)
            levels: tuple[int, ...] = self.effective(suite, marker, "levels", where)
        except SettingError as exc:
            raise usage_error(str(exc)) from None
        declared = [s.name for s in suite.servers]
        configs = marker.get("configs") or declared
        for name in configs:
            if name not in declared:
                raise usage_error(
                    f"{where}: @pytest.mark.llmperf(configs=...) names {name!r}, which "
                    f"{suite.path} does not declare (servers: {', '.join(declared)})"
                )

        def count(cfgs: list[str]) -> None:
            for cfg in cfgs:
                key = (suite_path, cfg)
                self.generated[key] = self.generated.get(key, 0) + 1

        if POINT_FIXTURE in names:
            params = [PointParam(c, lv, suite_path) for c in configs for lv in levels]
            count([p.config for p in params])
            ids = [f"{p.config}-C{p.concurrency}" for p in params]
            parametrize(metafunc, POINT_FIXTURE, params, ids, "no config x level to measure")
        if GATE_FIXTURE in names:
            wanted = marker.get("gates")
            gparams = [
                GateParam(i, lv, suite_path)
                for i, gate in enumerate(suite.gates)
                if not wanted or gate_id(gate) in wanted
                for lv in levels
                if gate.applies(lv)
            ]
            ids = [f"{gate_id(suite.gates[p.gate_index])}-C{p.concurrency}" for p in gparams]
            parametrize(
                metafunc,
                GATE_FIXTURE,
                gparams,
                ids,
                f"{suite.path} declares no [[gate]] that applies to levels {list(levels)}"
                + (f" and is named in gates={wanted}" if wanted else ""),
            )
        if CROSSOVER_FIXTURE in names:
            cparams = [CrossoverParam(i, suite_path) for i in range(len(suite.crossovers))]
            for cp in cparams:
                cross = suite.crossovers[cp.index]
                count([cross.config, cross.reference])
            ids = [suite.crossovers[p.index].label for p in cparams]
            parametrize(
                metafunc,
                CROSSOVER_FIXTURE,
                cparams,
                ids,
                f"{suite.path} has no [[crossover]] entry",
            )
        if SLO_FIXTURE in names:
            if suite.slo is None:
                raise usage_error(
                    f"{where} uses {SLO_FIXTURE}, but {suite.path} has no [slo] "
                    "section (e.g. [slo] p99_ttft_ms = 2000, p99_tpot_ms = 80)"
                )
            sparams = [SloParam(c, suite_path) for c in configs]
            count([p.config for p in sparams])
            ids = [p.config for p in sparams]
            parametrize(metafunc, SLO_FIXTURE, sparams, ids, "no config to check")
        if AB_FIXTURE in names:  # ab: one test per [[compare]] x level, id new-vs-old-C64
            if not suite.compares:
                raise usage_error(
                    f"{where} uses {AB_FIXTURE}, but {suite.path} has no [[compare]] entry "
                    '(e.g. [[compare]] candidate = "new"  reference = "old"  rounds = 4)'
                )
            aparams = [
                ABParam(i, lv, suite_path)
                for i, cmp in enumerate(suite.compares)
                for lv in (cmp.levels or levels)
            ]
            ids = [f"{suite.compares[p.index].label}-C{p.concurrency}" for p in aparams]
            parametrize(metafunc, AB_FIXTURE, aparams, ids, "no [[compare]] level to measure")

    def configs_of(self, param: Param) -> list[str]:
        suite = self.suites[param.suite_path]
        if isinstance(param, PointParam | SloParam):
            return [param.config]
        if isinstance(param, GateParam):
            g = suite.gates[param.gate_index]
            return [g.config, g.reference]
        if isinstance(param, ABParam):  # ab
            a = suite.compares[param.index]
            return [a.reference, a.candidate]
        c = suite.crossovers[param.index]
        return [c.config, c.reference]

    def group_of(self, param: Param) -> str:
        """The xdist group: configs linked by a gate or crossover share one worker."""
        return self.suites[param.suite_path].linked_groups()[self.configs_of(param)[0]]

    def sort_key(self, param: Param) -> tuple[Any, ...]:
        """One launch per server: a group's tests together, points first, by config and C."""
        order = [s.name for s in self.suites[param.suite_path].servers]
        first = self.configs_of(param)[0]
        conc = getattr(param, "concurrency", 0)
        kind = KIND_ORDER[type(param)]
        return (str(param.suite_path), self.group_of(param), kind, order.index(first), conc)

    def select_baselines(self, items: list[pytest.Item], is_worker: bool) -> None:
        """Tell the store what was selected: only entries no selected test could compare are
        unused, and ``--llmperf-update`` deletes nothing a selected test could have compared,
        whether that test later passed, errored, was skipped or its server never started."""
        from pytest_llmperf.run.perfrun import PointError
        from pytest_llmperf.verdicts.baseline import SWEEP_LEVEL, EntryKey

        selected: dict[tuple[Path, str], int] = {}
        workloads: dict[str, set[str]] = {}  # config -> workload keys its selected tests use
        covered: list[tuple[str, str, int, Workload]] = []  # (config, scope, C, workload)
        for item in items:
            param = item_param(item)
            if param is None or isinstance(param, ABParam):  # ab
                continue
            if not isinstance(param, GateParam):
                for cfg in self.configs_of(param):
                    selected[(param.suite_path, cfg)] = selected.get((param.suite_path, cfg), 0) + 1
            suite = self.suites[param.suite_path]
            wl = self.workload(suite, marker_kwargs(item), item.nodeid, self.configs_of(param)[0])
            for cfg in self.configs_of(param):
                workloads.setdefault(cfg, set()).add(wl.key())
            if isinstance(param, PointParam):
                covered.append((param.config, "point", param.concurrency, wl))
            elif isinstance(param, CrossoverParam | SloParam):
                covered.append((self.configs_of(param)[0], "sweep", SWEEP_LEVEL, wl))
        if not covered and not selected:
            return
        store = self.store
        run = self.perf_run(next(iter(self.suites.values())))
        try:
            # A sweep narrowed for this session measures a part of what the project's tests
            # define: only its own points can be unused. Otherwise, with every test of a
            # config selected, an entry of one of their workloads that no test measured is a
            # level the suite no longer has.
            narrowed = any(
                self.sources.resolve(name).source in ("cli", "env") for name in _NARROWING
            )
            for (suite_path, cfg), n in selected.items():
                if not narrowed and n == self.generated.get((suite_path, cfg), -1):
                    for wl_key in sorted(workloads.get(cfg, ())):
                        store.select(run.hardware_for(cfg), cfg, wl_key)
            for cfg, scope, conc, wl in covered:
                key = EntryKey(run.hardware_for(cfg), cfg, wl.key(), conc)
                if scope == "point":
                    store.select(*key)
                store.mark_used(key)
        except PointError as exc:  # e.g. --llmperf-require-real without SGLang: launch nothing
            if is_worker:
                return  # an xdist worker cannot stop the session cleanly: each test reports it
            if self.settings["bisect"]:  # git bisect run: this commit cannot be measured
                self.unmeasured["every config"] = str(exc)  # the exit status stays 125
                pytest.exit(f"pytest-llmperf: {exc} (--llmperf-bisect: exit 125, skip)", 125)
            raise usage_error(str(exc)) from None

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
        from pytest_llmperf.run.perfrun import PerfRun

        if self.run is None:
            s = self.settings
            try:
                self.run = PerfRun(
                    suite=suite,
                    output_dir=self.output_dir,
                    url=s["url"],
                    api_key=s["api_key"],
                    simulate=bool(s["simulate"]),
                    require_real=bool(s["require_real"]),
                    sim_profile=s["sim_profile"],
                    sim_args=s["sim_args"],
                    launch_timeout_s=s["launch_timeout"],
                    hardware_override=s["hardware"],
                    details=bool(s["details"]),
                    scrape_metrics=bool(s["scrape_metrics"]),
                    client_processes=int(s["client_processes"]),
                    progress=progress_printer(),
                    env=self.environment(),
                    slo=suite.slo,
                    relaunch=s["relaunch"],  # noise
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
            self.hardware = {s.config: self.safe_hardware(s.config) for s in self.sweeps}

    def bisect_status(self, session: pytest.Session) -> int:
        """``git bisect run``'s contract: 125 when this commit cannot be measured (a server did
        not start, a level was invalid), 1 on a regression or any failed test, else 0."""
        from pytest_llmperf.verdicts.compare import Verdict

        if self.unmeasured or self.invalid:
            return 125
        verdicts = [p.verdict for ps in self.points.values() for p in ps]
        verdicts += [g.verdict for g in self.gates]
        failed = Verdict.FAIL in verdicts or any(r.verdict == "fail" for r in self.sweep_checks)
        return 1 if failed or session.testsfailed else 0

    # -- the end of the session --------------------------------------------------------------
    def header_lines(self, config: pytest.Config) -> list[str] | None:
        """Everything needed to reproduce the run: server mode, URL, hardware, levels, workload."""
        s = self.settings
        args = [a for a in config.args if not a.startswith("-")] or [str(self.rootdir)]
        first = Path(args[0]).resolve() if Path(args[0]).exists() else self.rootdir
        path = self.suite_path(first)
        if path is None:
            return None
        try:
            suite = self.suite(path)
        except pytest.UsageError:
            return None  # reported properly at collection
        run = self.perf_run(suite)
        lines = [f"llmperf: suite {path}"]
        for cfg in suite.servers:
            try:
                mode = run.mode_for(cfg.name)
            except Exception as exc:  # e.g. --llmperf-require-real without SGLang
                lines.append(f"llmperf: server {cfg.name}: {exc}")
                continue
            where = run.url_for(cfg.name) if mode == "attached" else "launched on a free port"
            extra = f", profile {run.sim_profile_for(cfg)}" if mode == "simulated" else ""
            lines.append(
                f"llmperf: server {cfg.name}: {mode.upper()} ({where}{extra}), model {cfg.model}, "
                f"hardware key {run.hardware_for(cfg.name)}"
            )
            workers = getattr(config.option, "numprocesses", None)
            workers = workers if isinstance(workers, int) and workers > 0 else None
            lines.append(f"llmperf:   {run.gpu_text(cfg.name, workers)}")
        if any(run.mode_for(c.name) == "simulated" for c in suite.servers if not s["require_real"]):
            lines.append(
                "llmperf: NOTE: SGLang is not in use; the numbers come from the SIMULATED server "
                "(pass --llmperf-require-real on GPU runners)"
            )
        levels = self.effective(
            suite, {}, "levels", "the command line, environment, ini or [sweep]"
        )
        # the first server's workload: for an attached server that is not SGLang the backend
        # it takes (the header said "sglang-..." against llama-server's OpenAI API)
        first_config = suite.servers[0].name if suite.servers else None
        wl = self.workload(suite, {}, "the command line, environment, ini or [sweep]", first_config)
        lines.append(
            f"llmperf: levels {','.join(map(str, levels))}; workload {wl.key()} seed={wl.seed}; "
            f"client {client_text(int(s['client_processes']))}; baselines {self.store.directory}"
            + ("; UPDATING baselines" if s["update"] else "")
        )
        return lines

    def finish(self, session: pytest.Session) -> None:
        """Write results, flush baselines once, and decide the exit status."""
        self._write_and_flush(session)
        if self.settings["bisect"]:
            session.exitstatus = self.bisect_status(session)

    def _write_and_flush(self, session: pytest.Session) -> None:
        """Flush baselines once (first: a report that cannot be written must not cost the
        recordings), fail the session on unused entries, then write the reports."""
        order = [s.name for suite in self.suites.values() for s in suite.servers]
        self.sweeps.sort(key=lambda s: order.index(s.config) if s.config in order else len(order))
        self._flush_baselines(session)
        from pytest_llmperf.plugin.reports import write_reports

        self.report_errors += write_reports(self)

    def _flush_baselines(self, session: pytest.Session) -> None:
        from pytest_llmperf.verdicts.baseline import BaselineFileError

        if self._store is None:
            return
        update = bool(self.settings["update"])
        try:
            unused = self._store.unused()
            report = self._store.flush(delete_unused=update)
        except BaselineFileError as exc:
            # Already reported by the tests that read the file; never lose the session to it.
            self.baseline_lines = [f"not written: {exc}"]
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
            return
        lines: list[str] = list(self._store.replaced)
        lines += [report.summary()] if (report.files or update) else []
        lines += [f"not written: {e}" for e in report.errors]
        if report.errors and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if unused and not update:
            warn_only = bool(self.settings["warn_unused"])
            lines.append(
                f"{len(unused)} baseline entr{'y' if len(unused) == 1 else 'ies'} unused: "
                + ", ".join(k.label() for k in unused[:10])
                + ("" if len(unused) <= 10 else ", ...")
                + ". Re-run with --llmperf-update to delete them"
                + ("." if warn_only else " (or --llmperf-warn-unused to only warn).")
            )
            if not warn_only and session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        self.baseline_lines = lines

    def summary_lines(self) -> list[str]:
        """The terminal summary: tables, whole-sweep checks, invalid levels, baselines."""
        from pytest_llmperf.report.tables import render_run

        lines = render_run(self.sweeps, self.points, self.gates).splitlines()
        for r in self.sweep_checks:
            lines.append(f"{r.label}: C={r.value} (baseline {r.baseline}) {r.verdict}")
        if self.ab_points:  # ab
            from pytest_llmperf.plugin.ab import ab_summary_lines

            lines += ab_summary_lines(self.ab_points, self.output_dir)
        lines += [f"INVALID: {line}" for line in self.invalid]
        lines += [f"NOT MEASURED: {c}: {why}" for c, why in self.unmeasured.items()]
        lines += [f"baselines: {line}" for line in self.baseline_lines]
        lines += [f"WARNING: {line}" for line in self.report_errors]
        lines.append(f"results: {self.output_dir / 'results.json'}")
        if self.settings["plots"]:
            lines.append(f"plots: {self.output_dir / 'plots'}")
        return lines


SESSION = pytest.StashKey[LLMPerfSession]()
