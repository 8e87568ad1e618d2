"""pytest glue: options, markers, parametrization, fixtures, header, summary, exit status.

Holds no measuring or judging logic: that lives in ``perfrun`` (servers, measurements),
``compare``/``gates`` (verdicts), ``baseline`` (stored expectations) and ``report`` (tables).
Heavy imports happen inside hooks, so having the plugin installed costs other suites nothing.
"""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_llmperf.run.settings import (
    MARKER_KEYS,
    SETTINGS,
    SettingError,
    check_marker_keys,
    resolve,
)

if TYPE_CHECKING:
    from pytest_llmperf.base.results import SweepResult, Workload
    from pytest_llmperf.run.perfrun import PerfRun
    from pytest_llmperf.run.suite import Suite
    from pytest_llmperf.verdicts.baseline import BaselineStore
    from pytest_llmperf.verdicts.compare import PointComparison
    from pytest_llmperf.verdicts.gates import GateResult


class LLMPerfStaleBaselineWarning(UserWarning):
    """A metric improved beyond its tolerance: the baseline no longer describes the server."""


class LLMPerfInconclusiveWarning(UserWarning):
    """A point stayed inconclusive after its re-runs: too noisy to judge either way."""


POINT_FIXTURE = "llmperf_point"
GATE_FIXTURE = "llmperf_gate"
CROSSOVER_FIXTURE = "llmperf_crossover"
SLO_FIXTURE = "llmperf_slo"


# ----------------------------------------------------------------------------- options


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("llmperf", "LLM-serving performance (pytest-llmperf)")
    for s in SETTINGS:
        if s.cli:
            if s.flag:
                group.addoption(
                    s.cli_flag, action="store_true", default=None, dest=s.dest, help=s.help
                )
            else:
                group.addoption(s.cli_flag, action="store", default=None, dest=s.dest, help=s.help)
        if s.ini:
            parser.addini(s.ini_key, help=s.help, type="string", default=None)


@dataclass
class _State:
    """Per-process run state, kept in ``config.stash``."""

    settings: dict[str, Any]
    rootdir: Path
    ini_source: str
    suites: dict[Path, Suite] = field(default_factory=dict)
    run: PerfRun | None = None
    store: BaselineStore | None = None
    points: dict[str, list[PointComparison]] = field(default_factory=dict)
    gates: list[GateResult] = field(default_factory=list)
    crossovers: list[tuple[str, int | None, int | None, str]] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)
    sweeps: list[SweepResult] = field(default_factory=list)
    generated: dict[tuple[Path, str], int] = field(default_factory=dict)
    suite_for_item: dict[str, Path] = field(default_factory=dict)
    worker_payloads: list[dict[str, Any]] = field(default_factory=list)
    unused_failed: bool = False
    xdist_worker: bool = False


STATE = pytest.StashKey[_State]()


def _settings(config: pytest.Config) -> dict[str, Any]:
    ini_source = f"ini file {config.inipath}" if config.inipath else "ini file"
    out: dict[str, Any] = {}
    explicit: set[str] = set()
    for s in SETTINGS:
        cli = config.getoption(s.dest, default=None) if s.cli else None
        ini = config.getini(s.ini_key) if s.ini else None
        out[s.name] = resolve(s.name, cli=cli, ini=ini, ini_source=ini_source)
        if cli not in (None, False) or os.environ.get(s.env_var) or ini not in (None, "", []):
            explicit.add(s.name)
    out["_explicit"] = frozenset(explicit)
    return out


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "llmperf(configs=None, gates=None, levels=None, input_len=None, output_len=None, "
        "requests=None, backend=None, repeat=None, metrics=None, tolerance=None, ...): "
        "narrow or override pytest-llmperf settings for this test",
    )
    try:
        settings = _settings(config)
    except SettingError as exc:
        raise pytest.UsageError(f"pytest-llmperf: {exc}") from None
    ini_source = f"ini file {config.inipath}" if config.inipath else "ini file"
    config.stash[STATE] = _State(
        settings=settings,
        rootdir=Path(config.rootpath),
        ini_source=ini_source,
        xdist_worker=getattr(config, "workerinput", None) is not None,
    )

    if config.pluginmanager.hasplugin("xdist"):
        from pytest_llmperf.plugin.xdist import XdistHooks

        config.pluginmanager.register(XdistHooks(), "llmperf-xdist")
        # Tests that share a server config must run on the worker that owns the server.
        numprocesses = getattr(config.option, "numprocesses", None)
        if numprocesses and getattr(config.option, "dist", "no") in ("no", "load"):
            config.option.dist = "loadgroup"

    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and workerinput.get("llmperf_loadgroup"):
        config.option.loadgroup = True
    if workerinput is None:
        from pytest_llmperf.launch.launcher import install_cleanup_signal_handlers

        install_cleanup_signal_handlers()


def _state(config: pytest.Config) -> _State:
    return config.stash[STATE]


# ----------------------------------------------------------------------------- suite


def _suite_path(state: _State, start: Path) -> Path | None:
    from pytest_llmperf.run.suite import find_suite_file

    explicit = state.settings.get("config")
    if explicit:
        p = Path(explicit)
        return p if p.is_absolute() else state.rootdir / p
    return find_suite_file(start, state.rootdir)


def _suite(state: _State, start: Path) -> Suite:
    from pytest_llmperf.run.suite import SuiteError, load_suite

    path = _suite_path(state, start)
    if path is None:
        raise pytest.UsageError(
            f"pytest-llmperf: no llmperf.toml found from {start} up to {state.rootdir}; "
            "create one next to your perf tests or pass --llmperf-config"
        )
    path = path.resolve()
    if path not in state.suites:
        try:
            state.suites[path] = load_suite(path)
        except SuiteError as exc:
            raise pytest.UsageError(f"pytest-llmperf: {exc}") from None
    return state.suites[path]


def _marker_kwargs(node: Any) -> dict[str, Any]:
    """All ``llmperf`` markers merged, the closest one winning (as pytest-httpx does)."""
    merged: dict[str, Any] = {}
    for mark in node.iter_markers("llmperf"):
        merged = {**mark.kwargs, **merged}
    return merged


def _effective(state: _State, suite: Suite, marker: dict[str, Any], name: str, where: str) -> Any:
    """A setting for one test: marker > CLI > env > ini > the suite's [sweep] > default."""
    from pytest_llmperf.run.settings import SETTINGS_BY_NAME

    setting = SETTINGS_BY_NAME[name]
    if name in marker:
        return resolve(name, marker=marker, marker_source=f"{where}: @pytest.mark.llmperf")
    value = state.settings[name]
    suite_values = suite.sweep.as_settings()
    if value == setting.default and name in suite_values and not _explicit(state, name):
        return suite_values[name]
    return value


def _explicit(state: _State, name: str) -> bool:
    """Whether a setting was given on the CLI, env or ini (so it beats the suite file)."""
    return name in state.settings["_explicit"]


def _workload(state: _State, suite: Suite, marker: dict[str, Any], where: str) -> Workload:
    from pytest_llmperf.base.results import Workload

    return Workload(
        backend=_effective(state, suite, marker, "backend", where),
        input_len=_effective(state, suite, marker, "input_len", where),
        output_len=_effective(state, suite, marker, "output_len", where),
        seed=_effective(state, suite, marker, "seed", where),
        requests_per_level=_effective(state, suite, marker, "requests", where),
        request_timeout_s=_effective(state, suite, marker, "request_timeout", where),
        request_rate=_effective(state, suite, marker, "request_rate", where),
        openai_extensions=_effective(state, suite, marker, "openai_extensions", where),  # client
    )


# ----------------------------------------------------------------------------- parametrize


@dataclass(frozen=True)
class PointParam:
    config: str
    concurrency: int
    suite_path: Path


@dataclass(frozen=True)
class GateParam:
    gate_index: int
    concurrency: int
    suite_path: Path


@dataclass(frozen=True)
class CrossoverParam:
    index: int
    suite_path: Path


@dataclass(frozen=True)
class SloParam:
    config: str
    suite_path: Path


def _gate_id(gate: Any) -> str:
    if gate.name:
        return str(gate.name)
    return f"{gate.config}-vs-{gate.reference}"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    error = None
    try:
        _generate_tests(metafunc)
    except pytest.UsageError as exc:
        error = str(exc)
    if error is not None:
        # A collection error that reads like a lint message, not a traceback into the plugin
        # (raised outside the except block, so no chained exception is printed either).
        pytest.fail(error, pytrace=False)


def _generate_tests(metafunc: pytest.Metafunc) -> None:
    names = metafunc.fixturenames
    if not {POINT_FIXTURE, GATE_FIXTURE, CROSSOVER_FIXTURE, SLO_FIXTURE} & set(names):
        return
    state = _state(metafunc.config)
    where = metafunc.definition.nodeid
    suite = _suite(state, Path(str(metafunc.definition.path)))
    assert suite.path is not None
    suite_path = suite.path.resolve()
    marker = _marker_kwargs(metafunc.definition)
    try:
        check_marker_keys(marker, f"{where}: @pytest.mark.llmperf")
        for name in sorted(MARKER_KEYS & set(marker)):  # bad values fail here, once per test
            _effective(state, suite, marker, name, where)
        levels: tuple[int, ...] = _effective(state, suite, marker, "levels", where)
    except SettingError as exc:
        raise pytest.UsageError(f"pytest-llmperf: {exc}") from None
    configs = marker.get("configs") or [s.name for s in suite.servers]
    for name in configs:
        suite.server(name) if name in {s.name for s in suite.servers} else _unknown_config(
            suite, name, where
        )

    if POINT_FIXTURE in names:
        params = [PointParam(c, lv, suite_path) for c in configs for lv in levels]
        for p in params:
            state.generated[(suite_path, p.config)] = (
                state.generated.get((suite_path, p.config), 0) + 1
            )
        metafunc.parametrize(
            POINT_FIXTURE,
            params,
            ids=[f"{p.config}-C{p.concurrency}" for p in params],
            indirect=True,
        )
    if GATE_FIXTURE in names:
        wanted = marker.get("gates")
        gparams = []
        for i, gate in enumerate(suite.gates):
            if wanted and _gate_id(gate) not in wanted:
                continue
            gparams += [GateParam(i, lv, suite_path) for lv in levels if gate.applies(lv)]
        metafunc.parametrize(
            GATE_FIXTURE,
            gparams,
            ids=[f"{_gate_id(suite.gates[p.gate_index])}-C{p.concurrency}" for p in gparams],
            indirect=True,
        )
    if CROSSOVER_FIXTURE in names:
        cparams = [CrossoverParam(i, suite_path) for i in range(len(suite.crossovers))]
        for cp in cparams:
            cross = suite.crossovers[cp.index]
            for cfg in (cross.config, cross.reference):
                state.generated[(suite_path, cfg)] = state.generated.get((suite_path, cfg), 0) + 1
        metafunc.parametrize(
            CROSSOVER_FIXTURE,
            cparams,
            ids=[suite.crossovers[p.index].label for p in cparams],
            indirect=True,
        )

    if SLO_FIXTURE in names:
        if suite.slo is None:
            raise pytest.UsageError(
                f"pytest-llmperf: {where} uses {SLO_FIXTURE}, but {suite.path} has no [slo] "
                "section (e.g. [slo] p99_ttft_ms = 2000, p99_tpot_ms = 80)"
            )
        sparams = [SloParam(c, suite_path) for c in configs]
        for sp in sparams:
            state.generated[(suite_path, sp.config)] = (
                state.generated.get((suite_path, sp.config), 0) + 1
            )
        metafunc.parametrize(SLO_FIXTURE, sparams, ids=[p.config for p in sparams], indirect=True)


def _unknown_config(suite: Suite, name: str, where: str) -> None:
    known = ", ".join(s.name for s in suite.servers)
    raise pytest.UsageError(
        f"pytest-llmperf: {where}: @pytest.mark.llmperf(configs=...) names {name!r}, "
        f"which {suite.path} does not declare (servers: {known})"
    )


def _item_param(item: pytest.Item) -> Any:
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    for name in (POINT_FIXTURE, GATE_FIXTURE, CROSSOVER_FIXTURE, SLO_FIXTURE):
        if name in callspec.params:
            return callspec.params[name]
    return None


def _configs_of(state: _State, param: Any) -> list[str]:
    suite = state.suites[param.suite_path]
    if isinstance(param, PointParam | SloParam):
        return [param.config]
    if isinstance(param, GateParam):
        g = suite.gates[param.gate_index]
        return [g.config, g.reference]
    c = suite.crossovers[param.index]
    return [c.config, c.reference]


def _set_nodeid(item: pytest.Item, nodeid: str) -> None:
    """Tag a test id with its xdist group, as xdist's worker does for ``--dist loadgroup``.

    xdist 3.8 assigns ``item._nodeid``, which pytest 9.2 no longer reads (ids became structured
    ``_id`` objects), so its loadgroup silently degrades to plain load balancing there. The
    scheduler groups by the text after the last "@".
    """
    if hasattr(item, "_id"):
        from _pytest.nodeid import NodeId  # pytest >= 9.2

        item._id = NodeId.parse(nodeid)
    else:
        item._nodeid = nodeid  # type: ignore[attr-defined]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Group llmperf tests per server (one launch each) and pin each group to one xdist worker."""
    state = _state(config)
    slots: list[int] = []
    perf: list[pytest.Item] = []
    for i, item in enumerate(items):
        param = _item_param(item)
        if param is None:
            continue
        slots.append(i)
        perf.append(item)
        suite = state.suites[param.suite_path]
        group = suite.linked_groups()[_configs_of(state, param)[0]]
        item.add_marker(pytest.mark.xdist_group(name=group))
        if getattr(config.option, "loadgroup", False) and "@" not in item.nodeid:
            _set_nodeid(item, f"{item.nodeid}@{group}")

    def key(item: pytest.Item) -> tuple[Any, ...]:
        param = _item_param(item)
        suite = state.suites[param.suite_path]
        order = [s.name for s in suite.servers]
        cfgs = _configs_of(state, param)
        group = suite.linked_groups()[cfgs[0]]
        kind = {PointParam: 0, GateParam: 1, CrossoverParam: 2, SloParam: 3}[type(param)]
        conc = getattr(param, "concurrency", 0)
        return (str(param.suite_path), group, kind, order.index(cfgs[0]), conc)

    for slot, item in zip(slots, sorted(perf, key=key), strict=True):
        items[slot] = item


def pytest_collection_finish(session: pytest.Session) -> None:
    """Tell the baseline store what was selected, so only those entries can be 'unused'."""
    state = _state(session.config)
    selected: dict[tuple[Path, str], int] = {}
    points: list[tuple[PointParam, Workload]] = []
    for item in session.items:
        param = _item_param(item)
        if param is None:
            continue
        for cfg in _configs_of(state, param) if not isinstance(param, GateParam) else []:
            selected[(param.suite_path, cfg)] = selected.get((param.suite_path, cfg), 0) + 1
        if isinstance(param, PointParam):
            suite = state.suites[param.suite_path]
            points.append((param, _workload(state, suite, _marker_kwargs(item), item.nodeid)))
    if not points and not selected:
        return
    from pytest_llmperf.run.perfrun import PointError

    store = _store(state)
    run = _run(state, next(iter(state.suites.values())))
    try:
        for (suite_path, cfg), n in selected.items():
            hw = run.hardware_for(cfg)
            if n == state.generated.get((suite_path, cfg), -1):
                store.select(hw, cfg)  # the whole config ran: any entry nobody used is unused
        for param, wl in points:
            store.select(run.hardware_for(param.config), param.config, wl.key(), param.concurrency)
    except PointError as exc:  # e.g. --llmperf-require-real without SGLang: launch nothing
        if hasattr(session.config, "workerinput"):
            return  # an xdist worker cannot stop the session cleanly: each test reports it
        raise pytest.UsageError(f"pytest-llmperf: {exc}") from None


# ----------------------------------------------------------------------------- run state


def _store(state: _State) -> BaselineStore:
    from pytest_llmperf.verdicts.baseline import BaselineStore

    if state.store is None:
        d = Path(state.settings["baseline_dir"])
        state.store = BaselineStore(d if d.is_absolute() else state.rootdir / d)
    return state.store


def _output_dir(state: _State) -> Path:
    d = Path(state.settings["output_dir"])
    return d if d.is_absolute() else state.rootdir / d


def _run(state: _State, suite: Suite) -> PerfRun:
    from pytest_llmperf.run.perfrun import PerfRun

    if state.run is None:
        s = state.settings
        try:
            state.run = PerfRun(
                suite=suite,
                output_dir=_output_dir(state),
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
                progress=_progress_printer(),
                env=_environment(state),
                slo=suite.slo,
            )
        except ValueError as exc:
            raise pytest.UsageError(f"pytest-llmperf: {exc}") from None
    return state.run


def _environment(state: _State) -> dict[str, str]:
    """The environment a run slices GPUs and ports by; xdist's worker id only if we are one.

    A pytest started from inside an xdist worker (pytester, a nested run) inherits the parent's
    PYTEST_XDIST_WORKER and would otherwise take that worker's GPU slice and port range.
    """
    env = dict(os.environ)
    if not state.xdist_worker:
        env.pop("PYTEST_XDIST_WORKER", None)
        env.pop("PYTEST_XDIST_WORKER_COUNT", None)
    return env


def _progress_printer() -> Any:
    """A progress line on a terminal (never in CI logs or under xdist workers)."""
    stream = sys.__stderr__
    if stream is None or not stream.isatty() or os.environ.get("PYTEST_XDIST_WORKER"):
        return None

    def show(config: str, p: Any) -> None:
        if p.phase == "level-done":
            stream.write("\r\033[K")
        else:
            stream.write(
                f"\r\033[Kllmperf {config} C={p.concurrency}: {p.done}/{p.total} requests, "
                f"{p.tok_per_s:.0f} tok/s"
            )
        stream.flush()

    return show


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def llmperf_run(request: pytest.FixtureRequest) -> PerfRun:
    """The session's servers and measurements (launches nothing until a point needs it)."""
    state = _state(request.config)
    suite = next(iter(state.suites.values()), None)
    if suite is None:
        suite = _suite(state, Path(str(request.node.path)))
    run = _run(state, suite)
    request.addfinalizer(run.close)
    return run


@pytest.fixture
def llmperf_point(request: pytest.FixtureRequest, llmperf_run: PerfRun) -> Any:
    """One (config, concurrency) point, measured once per session however many tests use it."""
    from pytest_llmperf.plugin.checks import Point
    from pytest_llmperf.verdicts.validity import policy_from_settings  # client

    param: PointParam = request.param
    state = _state(request.config)
    suite = state.suites[param.suite_path]
    _run(state, suite)
    marker = _marker_kwargs(request.node)
    where = request.node.nodeid
    try:
        workload = _workload(state, suite, marker, where)
        repeat = _effective(state, suite, marker, "repeat", where)
        point = Point(
            config=param.config,
            concurrency=param.concurrency,
            workload=workload,
            run=llmperf_run,
            store=_store(state),
            repeat=repeat,
            max_reruns=_effective(state, suite, marker, "max_reruns", where),
            metrics=_effective(state, suite, marker, "metrics", where),
            tolerances=_effective(state, suite, marker, "tolerance", where),
            update=bool(state.settings["update"]),
            invalid_policy=state.settings["invalid"],
            policy=policy_from_settings(
                lambda n: _effective(state, suite, marker, n, where)
            ),  # client
            node=request.node,
            on_compared=lambda pc: state.points.setdefault(pc.config, []).append(pc),
            on_invalid=state.invalid.append,
        )
    except SettingError as exc:
        raise pytest.UsageError(f"pytest-llmperf: {exc}") from None
    point.measure()
    return point


@pytest.fixture
def llmperf_gate(request: pytest.FixtureRequest, llmperf_run: PerfRun) -> Any:
    """One cross-config gate at one concurrency, e.g. mtp ≥ 1.1 × plain at C=4."""
    from pytest_llmperf.plugin.checks import GateCheck

    param: GateParam = request.param
    state = _state(request.config)
    suite = state.suites[param.suite_path]
    _run(state, suite)
    workload = _workload(state, suite, _marker_kwargs(request.node), request.node.nodeid)
    return GateCheck(
        gate=suite.gates[param.gate_index],
        concurrency=param.concurrency,
        workload=workload,
        run=llmperf_run,
        node=request.node,
        on_result=state.gates.append,
        invalid_policy=state.settings["invalid"],
    )


def _sweep_check_kwargs(request: pytest.FixtureRequest, run: PerfRun) -> dict[str, Any]:
    """What every whole-sweep check (crossover, SLO) needs: its levels, workload and store."""
    state = _state(request.config)
    suite = state.suites[request.param.suite_path]
    _run(state, suite)
    marker = _marker_kwargs(request.node)
    where = request.node.nodeid
    return {
        "levels": _effective(state, suite, marker, "levels", where),
        "workload": _workload(state, suite, marker, where),
        "run": run,
        "store": _store(state),
        "update": bool(state.settings["update"]),
        "node": request.node,
        "on_result": state.crossovers.append,
    }


@pytest.fixture
def llmperf_slo(request: pytest.FixtureRequest, llmperf_run: PerfRun) -> Any:
    """The largest swept C whose level meets the suite's [slo], held to its baseline."""
    from pytest_llmperf.plugin.checks import SloCheck

    param: SloParam = request.param
    suite = _state(request.config).suites[param.suite_path]
    kwargs = _sweep_check_kwargs(request, llmperf_run)
    return SloCheck(config_name=param.config, slo=suite.slo, **kwargs)


@pytest.fixture
def llmperf_crossover(request: pytest.FixtureRequest, llmperf_run: PerfRun) -> Any:
    """The largest C where a config still beats its reference, held to its baseline."""
    from pytest_llmperf.plugin.checks import CrossoverCheck

    param: CrossoverParam = request.param
    suite = _state(request.config).suites[param.suite_path]
    kwargs = _sweep_check_kwargs(request, llmperf_run)
    return CrossoverCheck(spec=suite.crossovers[param.index], **kwargs)


# ----------------------------------------------------------------------------- reporting


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    """Everything needed to reproduce the run: server mode, URL, hardware, levels, workload."""
    state = config.stash.get(STATE, None)
    if state is None:
        return None
    s = state.settings
    args = [a for a in config.args if not a.startswith("-")] or [str(state.rootdir)]
    path = _suite_path(state, Path(args[0]).resolve() if Path(args[0]).exists() else state.rootdir)
    if path is None:
        return None
    try:
        suite = _suite(state, path)
    except pytest.UsageError:
        return None  # reported properly at collection
    run = _run(state, suite)
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
    if any(run.mode_for(c.name) == "simulated" for c in suite.servers if not s["require_real"]):
        lines.append(
            "llmperf: NOTE: SGLang is not in use; the numbers come from the SIMULATED server "
            "(pass --llmperf-require-real on GPU runners)"
        )
    levels = _effective(state, suite, {}, "levels", "header")
    wl = _workload(state, suite, {}, "header")
    lines.append(
        f"llmperf: levels {','.join(map(str, levels))}; workload {wl.key()} seed={wl.seed}; "
        f"client httpx over aiohttp; baselines {_store(state).directory}"
        + ("; UPDATING baselines" if s["update"] else "")
    )
    return lines


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Nothing to do per report: JUnit properties travel in ``report.user_properties``."""


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    state = config.stash.get(STATE, None)
    if state is None:
        return
    if state.run is not None:
        state.run.close()
        state.sweeps = state.run.all_sweeps()
    if hasattr(config, "workerinput"):
        from pytest_llmperf.plugin.xdist import worker_payload

        config.workeroutput["llmperf"] = worker_payload(state)  # type: ignore[attr-defined]
        return
    if state.worker_payloads:
        from pytest_llmperf.plugin.xdist import merge_payloads

        merge_payloads(state)
    order = [s.name for suite in state.suites.values() for s in suite.servers]
    state.sweeps.sort(key=lambda s: order.index(s.config) if s.config in order else len(order))
    _finish(session, state)


def _finish(session: pytest.Session, state: _State) -> None:
    """Write results, flush baselines once, and decide the exit status for unused entries."""
    from pytest_llmperf.report.tables import markdown_summary

    out = _output_dir(state)
    if state.sweeps:
        _write_results(state, out)
        summary_path = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary_path:
            with open(summary_path, "a", encoding="utf-8") as fh:
                fh.write(markdown_summary(state.sweeps, state.points, state.gates) + "\n")
        if state.settings["plots"]:
            _write_plots(state, out / "plots")
    store = state.store
    if store is None:
        return
    from pytest_llmperf.verdicts.baseline import BaselineFileError

    update = bool(state.settings["update"])
    try:
        unused = store.unused()
        report = store.flush(delete_unused=update)
    except BaselineFileError as exc:
        # Already reported by the tests that read the file; never lose the session to it.
        session.config.stash[_BASELINE_LINES] = [f"not written: {exc}"]
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        return
    state_lines: list[str] = [report.summary()] if (report.files or update) else []
    if unused and not update:
        state_lines.append(
            f"{len(unused)} baseline entr{'y' if len(unused) == 1 else 'ies'} unused: "
            + ", ".join(k.label() for k in unused[:10])
            + ("" if len(unused) <= 10 else ", ...")
            + ". Re-run with --llmperf-update to delete them"
            + (
                "."
                if state.settings["warn_unused"]
                else " (or --llmperf-warn-unused to only warn)."
            )
        )
        if not state.settings["warn_unused"]:
            state.unused_failed = True
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
    session.config.stash[_BASELINE_LINES] = state_lines


_BASELINE_LINES = pytest.StashKey[list[str]]()


def _write_results(state: _State, out: Path) -> None:
    """One results file per hardware key (``llmperf compare`` judges it like this run did)."""
    from pytest_llmperf.report.results_file import RunFile, save_run

    by_hw: dict[str, list[SweepResult]] = {}
    for sweep in state.sweeps:
        by_hw.setdefault(_safe_hw(state, sweep.config), []).append(sweep)
    out.mkdir(parents=True, exist_ok=True)
    for i, (hw, sweeps) in enumerate(sorted(by_hw.items())):
        name = "results.json" if i == 0 else f"results-{hw}.json"
        save_run(RunFile(hardware=hw, sweeps=sweeps), out / name)


def _write_plots(state: _State, directory: Path) -> None:
    """PNGs with each config's baseline band (value ± tolerance) and the crossover marked."""
    from pytest_llmperf.report.plots import PlotsUnavailable, plot_all
    from pytest_llmperf.verdicts.baseline import EntryKey
    from pytest_llmperf.verdicts.compare import resolve_tolerance

    bands: dict[str, dict[int, tuple[float, float]]] = {}
    for sweep in state.sweeps:
        for lv in sweep.levels:
            key = EntryKey(
                _safe_hw(state, sweep.config),
                sweep.config,
                sweep.workload.key(),
                lv.max_concurrency,
            )
            entry = state.store.get(key, mark_used=False) if state.store else None
            summary = entry.metrics.get("output_throughput") if entry else None
            if entry is not None and summary is not None:
                tol = resolve_tolerance("output_throughput", entry=entry)
                bands.setdefault(sweep.config, {})[lv.max_concurrency] = (summary.mean, tol)
    crossover = None
    if state.crossovers and state.suites:
        suite = next(iter(state.suites.values()))
        if suite.crossovers:
            spec = suite.crossovers[0]
            crossover = (spec.config, spec.reference, state.crossovers[0][1])
    try:
        plot_all(state.sweeps, directory, bands=bands, crossover=crossover)
    except PlotsUnavailable as exc:
        warnings.warn(f"pytest-llmperf: plots skipped: {exc}", stacklevel=1)


def _safe_hw(state: _State, config: str) -> str:
    try:
        return state.run.hardware_for(config) if state.run else "unknown"
    except Exception:
        return "unknown"


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return
    state = config.stash.get(STATE, None)
    if state is None or not (state.sweeps or state.gates or state.crossovers):
        return
    from pytest_llmperf.report.tables import render_run

    tr = terminalreporter
    tr.write_sep("=", "llmperf")
    for line in render_run(state.sweeps, state.points, state.gates).splitlines():
        tr.write_line(line)
    for label, value, base, verdict in state.crossovers:
        tr.write_line(f"{label}: C={value} (baseline {base}) {verdict}")
    for line in state.invalid:
        tr.write_line(f"INVALID: {line}")
    for line in config.stash.get(_BASELINE_LINES, []):
        tr.write_line(f"baselines: {line}")
    tr.write_line(f"results: {_output_dir(state) / 'results.json'}")
    if state.settings["plots"]:
        tr.write_line(f"plots: {_output_dir(state) / 'plots'}")


def warn_stale(message: str) -> None:
    warnings.warn(LLMPerfStaleBaselineWarning(message), stacklevel=3)


def warn_inconclusive(message: str) -> None:
    warnings.warn(LLMPerfInconclusiveWarning(message), stacklevel=3)
