"""The state of one perf run: which servers are up, what each point measured.

This is the core behind the pytest fixtures, usable without pytest: a test asks for a point
(config, workload, C); the run launches that config's server if needed (one server at a time,
since two real servers rarely fit on one GPU slice), measures the level once and caches it, so
several tests asserting on one point cost one measurement.
"""

from __future__ import annotations

import secrets
import shlex
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from pydantic import SecretStr

from pytest_llmperf.base.errors import InputError, LLMPerfError
from pytest_llmperf.base.results import (
    Backend,
    LevelResult,
    Mode,
    ServerFacts,
    SweepResult,
    Workload,
)
from pytest_llmperf.base.values import reveal
from pytest_llmperf.core.server_probe import (
    ServerAnswerError,
    ServerKind,
    get_server_info,
    server_facts,
)
from pytest_llmperf.core.slo import Slo
from pytest_llmperf.core.sweep import Progress, run_in_own_loop, run_level
from pytest_llmperf.launch import gpus
from pytest_llmperf.launch.hardware import detect_gpus, hardware_key
from pytest_llmperf.launch.launcher import (
    LaunchError,
    ServerHandle,
    attach,
    launch,
    sglang_available,
)
from pytest_llmperf.launch.server_config import ServerConfig
from pytest_llmperf.run.suite import Suite

PROBE_TIMEOUT_S = 30.0


def fresh_prompt_base() -> int:
    """A random first ordinal, so an earlier run's prompts are unlikely to come back to a
    server that keeps them (llama.cpp's host-memory prompt cache holds thousands): two runs of
    n prompts each repeat prompts with odds of about 2n / PROMPT_ORDINALS (1 in 9000 for
    n = 50), where 27000 ordinals made that 1 in 270 a pair and a long-lived server met it
    within a few dozen runs. A prompt past ordinal 29000 shares its first token with an
    earlier one and differs from the second on (llama.cpp, vLLM's 16-token blocks: no hit)."""
    return secrets.randbelow(PROMPT_ORDINALS)


# Chat prompts carry their ordinal as 6 digits (core/workload.py): distinct below 10**6, so the
# base leaves room for a long run after it.
PROMPT_ORDINALS = 900_000


class PointError(LLMPerfError, RuntimeError):
    """A point could not be measured (server failed to start, died, or the level errored)."""


def parse_url_map(text: str | None) -> tuple[str | None, dict[str, str]]:
    """``--llmperf-url``: one URL for every config, or ``plain=URL,mtp=URL`` per config."""
    if not text:
        return None, {}
    if "=" not in text.split("://", 1)[0]:
        return text.rstrip("/"), {}
    out: dict[str, str] = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, url = part.partition("=")
        if not sep or not url.strip():
            raise ValueError(f"{part!r} is not config=URL (e.g. plain=http://127.0.0.1:30000)")
        out[name.strip()] = url.strip().rstrip("/")
    return None, out


def sim_args_for(text: str | None, config: str) -> list[str]:
    """Extra simulator flags for ``config`` from ``--llmperf-sim-args``.

    ``"--sim-jitter 0.03"`` applies to every server; ``"mtp: --max-running-requests 40"``
    only to ``mtp``; several parts are separated by ``;``. This is how a suite injects an
    "upgrade" or a fault into one config of the simulated run.
    """
    out: list[str] = []
    for part in (text or "").split(";"):
        part = part.strip()
        if not part:
            continue
        head, sep, rest = part.partition(":")
        if sep and not head.strip().startswith("-") and " " not in head.strip():
            if head.strip() != config:
                continue
            part = rest
        out += shlex.split(part)
    return out


@dataclass
class _ConfigState:
    handle: ServerHandle | None = None
    facts: ServerFacts | None = None
    error: str | None = None
    warmed: bool = False
    # Where this run's prompt ordinals start: 0 (the same prompts every run) on servers that
    # reset their prefix cache; a random block on those that cannot (llama.cpp, vLLM without
    # dev mode), so an earlier run's cached prompts cannot flatter this one.
    prompt_base: int = 0
    prompts_sent: int = 0  # measured requests sent to this config (ordinals used)
    launch_id: str | None = None  # which launch measured a sample (honest n)
    first_request_ms: float | None = None  # the warm-up of the server's first measurement


@dataclass
class PerfRun:
    """Servers and measurements of one session (or one xdist worker)."""

    suite: Suite
    output_dir: Path
    url: str | None = None
    api_key: SecretStr | None = None  # masked in repr: a PerfRun lands in test reports
    simulate: bool = False
    require_real: bool = False
    sim_profile: str | None = None
    sim_args: str | None = None
    launch_timeout_s: float | None = None
    hardware_override: str | None = None
    details: bool = False
    scrape_metrics: bool = False
    client_processes: int = 1  # closed-loop levels sharded over this many client processes
    progress: Callable[[str, Progress], None] | None = None
    # The environment holds secrets (LLMPERF_API_KEY, HF tokens): never in a repr.
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    slo: Slo | None = None  # goodput is computed per level when set
    # "rerun": restart a launched/simulated server before a sample that must be independent
    # of the current launch's speed (``measure(fresh_launch=True)``); "never": reuse it.
    relaunch: str = "never"
    _launches: int = 0
    # Launch ids carry the session's token, so samples of two sessions never look like one
    # launch when their results are merged (``llmperf calibrate --record``): an attached
    # server is one launch per session, its session-to-session noise the one it has.
    _session: str = field(default_factory=lambda: secrets.token_hex(3), repr=False)
    _states: dict[str, _ConfigState] = field(default_factory=dict, repr=False)
    _samples: dict[tuple[str, Workload, int], list[LevelResult]] = field(
        default_factory=dict, repr=False
    )
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    _gpu_names: list[str] | None = None
    _gpu_plans: dict[str, gpus.GpuPlan] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._default_url, self._url_map = parse_url_map(self.url)
        unknown = sorted(set(self._url_map) - {s.name for s in self.suite.servers})
        if unknown:
            raise ValueError(
                f"--llmperf-url names unknown config(s) {', '.join(unknown)}; "
                f"the suite has {', '.join(s.name for s in self.suite.servers)}"
            )

    # -- where and how a config runs ------------------------------------------------------
    def url_for(self, config: str) -> str | None:
        return self._url_map.get(config, self._default_url)

    def mode_for(self, config: str) -> Mode:
        """How ``config``'s server is reached; decided before anything is launched."""
        if self.url_for(config):
            return "attached"
        if self.simulate:
            return "simulated"
        cfg = self.suite.server(config)
        if sglang_available() or cfg.command is not None or cfg.python is not None:  # ab: python
            return "launched"
        if self.require_real:
            raise PointError(
                f"config {config!r}: SGLang is not installed in {sys.executable} and "
                "--llmperf-require-real refuses the simulated server"
            )
        return "simulated"

    def sim_profile_for(self, config: ServerConfig) -> str:
        from pytest_llmperf.sim.profile import DEFAULT_PROFILE

        return self.sim_profile or config.sim_profile or DEFAULT_PROFILE

    def hardware_for(self, config: str) -> str:
        """The baseline key of the hardware this config runs on: the GPUs its server uses."""
        cfg = self.suite.server(config)
        if self.hardware_override:
            return hardware_key([], override=self.hardware_override)
        if self.mode_for(config) == "simulated":
            profile = Path(self.sim_profile_for(cfg)).stem
            return hardware_key([], sim_profile=profile.removeprefix("sim-"))
        plan = self.gpu_plan(config)
        return hardware_key(plan.names, plan.need.count if plan.names else None)

    def _visible_gpu_names(self) -> list[str]:
        if self._gpu_names is None:
            self._gpu_names = [g.name for g in detect_gpus(env=self.env or None)]
        return self._gpu_names

    def gpu_plan(self, config: str) -> gpus.GpuPlan:
        """How many GPUs ``config``'s server needs and which it gets; never launches anything.

        A plan with ``error`` set means the server will not be launched (``server`` raises).
        """
        with self._lock:
            if config in self._gpu_plans:
                return self._gpu_plans[config]
            cfg = self.suite.server(config)
            mode = self.mode_for(config)
            try:
                if cfg.gpus is not None:
                    need = gpus.GpuNeed(cfg.gpus, f"gpus = {cfg.gpus} in the config")
                else:
                    flags, where = (cfg.command, "command") if cfg.command else (cfg.args, "args")
                    need = gpus.gpus_from_flags(flags, where=f"server {config!r} {where}")
            except InputError as exc:
                plan = gpus.GpuPlan(gpus.GpuNeed(1, "unknown"), None, [], str(exc), str(exc))
            else:
                simulated = mode == "simulated"
                visible = [] if simulated else self._visible_gpu_names()
                plan = gpus.plan_gpus(
                    need, visible, self.env, simulate=simulated, attached=mode == "attached"
                )
            self._gpu_plans[config] = plan
            return plan

    def gpu_text(self, config: str, xdist_workers: int | None = None) -> str:
        """For the header: the GPUs ``config``'s server needs, why, and which it gets.

        The xdist controller passes ``xdist_workers`` (its own environment names no worker), so
        the header shows the slice of each worker, or the error every worker will raise.
        """
        plan = self.gpu_plan(config)
        if not xdist_workers or gpus.worker_index(self.env) is not None or plan.ids is not None:
            return plan.text
        if plan.error or self.mode_for(config) == "attached":
            return plan.text
        n = xdist_workers
        simulated = self.mode_for(config) == "simulated"
        visible = [] if simulated else self._visible_gpu_names()
        head = f"GPUs: {plan.need.count} ({plan.need.source})"
        try:
            slices = [
                gpus.gpu_ids_for_worker(i, n, len(visible), plan.need.count, simulate=simulated)
                for i in range(n)
            ]
        except gpus.GpuSliceError as exc:
            return f"{head}; {exc}"
        shown = "; ".join(
            f"gw{i}: {','.join(map(str, ids)) or 'none'}" for i, ids in enumerate(slices)
        )
        return f"{head}; per xdist worker: {shown}"

    # -- servers ----------------------------------------------------------------------------
    def _state(self, config: str) -> _ConfigState:
        return self._states.setdefault(config, _ConfigState())

    def _launch_config(self, cfg: ServerConfig, mode: Mode) -> ServerConfig:
        if mode != "simulated":
            return cfg
        extra = ["--sim-profile", self.sim_profile_for(cfg)]
        extra += sim_args_for(self.sim_args, cfg.name)
        args = (*cfg.args, *cfg.sim_args, *extra)  # the CLI's --llmperf-sim-args win
        return cfg.model_copy(update={"args": args, "sim_profile": None, "sim_args": ()})

    def server(self, config: str) -> ServerHandle:
        """The live server of ``config``, launching it (and stopping any other) if needed."""
        with self._lock:
            state = self._state(config)
            if state.error:
                raise PointError(state.error)
            if state.handle is not None and not state.handle.closed:
                code = state.handle.poll()
                if code is None:
                    return state.handle
                state.error = self._died_message(config, state.handle, code)
                raise PointError(state.error)
            cfg = self.suite.server(config)
            mode = self.mode_for(config)
            try:
                if mode == "attached":
                    url = self.url_for(config)
                    assert url is not None
                    handle = attach(url, api_key=reveal(self.api_key))
                else:
                    plan = self.gpu_plan(config)
                    if plan.error:  # said before anything of this config is launched
                        state.error = f"config {config!r}: server not launched: {plan.error}"
                        raise PointError(state.error)
                    self.stop_all()  # one launched server at a time per worker
                    handle = launch(
                        self._launch_config(cfg, mode),
                        log_dir=self.output_dir / "logs",
                        simulate=mode == "simulated",
                        require_real=self.require_real,
                        gpu_ids=plan.ids,
                        health_timeout_s=self.launch_timeout_s,
                        secrets=(reveal(self.api_key),),
                    )
            except (LaunchError, ValueError) as exc:
                state.error = f"config {config!r}: server did not start: {exc}"
                raise PointError(state.error) from None
            state.handle = handle
            self._launches += 1
            where = f"#{self._launches}" if mode != "attached" else ""
            state.launch_id = f"{config}{where}@{self._session}"
            try:
                state.facts = self._probe(handle, mode)
            except ServerAnswerError as exc:
                self.stop(config)
                state.error = f"config {config!r}: {exc}"
                raise PointError(state.error) from None
            if handle.kind is not None and handle.kind.cache_reset_route is None:
                state.prompt_base = fresh_prompt_base()
            return handle

    def can_relaunch(self, config: str) -> bool:
        """Whether a re-run of ``config`` can get a fresh launch (attached servers cannot)."""
        return self.relaunch == "rerun" and self.mode_for(config) != "attached"

    def relaunch_config(self, config: str) -> bool:
        """Stop ``config``'s server so the next measurement launches it afresh; False when the
        setting or the mode does not allow it (the next sample then shares the launch)."""
        with self._lock:
            if not self.can_relaunch(config):
                return False
            state = self._states.get(config)
            if state is not None and state.handle is not None and not state.handle.closed:
                self.stop(config)
            return True

    def _died_message(self, config: str, handle: ServerHandle, code: int) -> str:
        return (
            f"config {config!r}: the server exited with code {code} during the run; "
            f"log: {handle.log_path}\n--- last lines of the server log ---\n{handle.log_tail(30)}"
        )

    def _probe(self, handle: ServerHandle, mode: Mode) -> ServerFacts:
        async def probe() -> ServerFacts:
            async with httpx.AsyncClient(
                base_url=handle.url, headers=handle.auth_headers, timeout=PROBE_TIMEOUT_S
            ) as http:
                info = await get_server_info(http)
            return server_facts(info, url=handle.url, mode=mode)

        facts = run_in_own_loop(probe, timeout_s=PROBE_TIMEOUT_S * 3)
        kind = handle.kind
        if kind is not None and kind.kind != "sglang":
            # Recorded with the results: what the server was and how its cache was reset.
            found = {
                "server_kind": kind.kind,
                "served_model": kind.served_model,
                "cache_reset_route": kind.cache_reset_route,
            }
            facts = facts.model_copy(update={"server_args": {**facts.server_args, **found}})
            if facts.model_path is None and kind.served_model:
                facts = facts.model_copy(update={"model_path": kind.served_model})
        return facts

    def server_kind(self, config: str) -> ServerKind | None:
        """What ``config``'s server turned out to be; reaches the server (attaching or
        launching it) if it is not up yet. None when it could not be reached."""
        try:
            return self.server(config).kind
        except PointError:
            return None

    def suggested_backend(self, config: str) -> Backend | None:
        """The backend ``config``'s server takes (only SGLang takes ``/generate``); None when
        the server could not be reached. The plugin uses it when no backend was set."""
        kind = self.server_kind(config)
        return kind.backend if kind is not None else None

    def server_description(self, config: str) -> str | None:
        """For the header: what the running server of ``config`` was found to be (None before
        it is up)."""
        state = self._states.get(config)
        if state is None or state.handle is None or state.handle.kind is None:
            return None
        return state.handle.kind.describe()

    def facts(self, config: str) -> ServerFacts | None:
        return self._state(config).facts

    def stop(self, config: str) -> None:
        state = self._states.get(config)
        if state and state.handle is not None:
            state.handle.close()
            state.warmed = False
            state.first_request_ms = None

    def stop_all(self) -> None:
        for name in list(self._states):
            self.stop(name)

    close = stop_all

    # -- measurements -----------------------------------------------------------------------
    def samples(self, config: str, workload: Workload, concurrency: int) -> list[LevelResult]:
        return list(self._samples.get((config, workload, concurrency), []))

    def measure(
        self,
        config: str,
        workload: Workload,
        concurrency: int,
        *,
        fresh_launch: bool = False,
        keep: bool = True,
    ) -> LevelResult:
        """Measure the level once more and keep the sample; ``fresh_launch`` first restarts
        the server when ``relaunch`` allows, so the sample is a new launch's. ``keep=False``
        (A/B rounds) leaves the sample out of the point's samples and the results file."""
        with self._lock:
            if fresh_launch:
                self.relaunch_config(config)
            handle = self.server(config)
            state = self._state(config)

            def report(p: Progress) -> None:
                if self.progress is not None:
                    self.progress(config, p)

            kind = handle.kind
            if workload.backend == "sglang" and kind is not None and kind.backend != "sglang":
                raise PointError(
                    f"config {config!r}: the server at {handle.url} is {kind.describe()}; it has"
                    " no /generate, so the sglang backend cannot measure it: set the backend to"
                    f" {kind.backend!r} (--llmperf-backend {kind.backend}, or backend= in the"
                    " suite's [sweep] or the marker)"
                )
            t0 = time.monotonic()
            # Each measurement of a server takes fresh prompt ordinals (no request can hit a
            # prefix cache): those after every request sent to this config so far.
            sent = state.prompt_base + state.prompts_sent
            try:
                level = run_level(
                    handle.url,
                    concurrency,
                    workload,
                    api_key=handle.api_key,
                    progress=report,
                    details=self.details,
                    scrape_metrics=self.scrape_metrics,
                    warmup=not state.warmed,
                    slo=self.slo,
                    prompt_start=sent,  # llmperf-client
                    client_processes=self.client_processes,
                )
                if state.prompt_base:
                    level.notes.append(
                        f"prompts from ordinal {state.prompt_base}: the server cannot reset its "
                        "prefix cache, so this run sends prompts no earlier run sent"
                    )
            except Exception as exc:
                code = handle.poll()
                if code is not None:
                    state.error = self._died_message(config, handle, code)
                    raise PointError(state.error) from None
                refused = any(f"HTTP {status}" in str(exc) for status in (401, 403))
                raise PointError(
                    f"config {config!r} at C={concurrency}: the level could not be measured "
                    f"after {time.monotonic() - t0:.1f} s: {type(exc).__name__}: {exc}"
                    + (
                        "; the server refused the API key: set LLMPERF_API_KEY (or "
                        "--llmperf-api-key) to the key the server was started with"
                        if refused
                        else ""
                    )
                ) from None
            state.warmed = True
            state.prompts_sent += level.num_requests
            level.launch = state.launch_id
            self._stamp_startup(state, handle, level)
            code = handle.poll()
            if code is not None:
                # Requests failed because the server died: say so instead of blaming the numbers.
                state.error = self._died_message(config, handle, code)
                level.notes.append(f"server exited with code {code} during this level")
            if code is None and level.num_requests and not level.completed:
                # A server that completes nothing (stalled, or refusing every request) would
                # cost every further level the same timeouts: this config's sweep ends here.
                first = f": {level.errors[0]}" if level.errors else ""
                state.error = (
                    f"config {config!r}: no request completed at C={concurrency}{first}; "
                    "its remaining levels are not measured"
                )
                level.notes.append(state.error)
            if keep:
                self._samples.setdefault((config, workload, concurrency), []).append(level)
            if code is not None:
                # The level stays in the results (its failed requests), the point errors.
                raise PointError(state.error)
            return level

    @staticmethod
    def _stamp_startup(state: _ConfigState, handle: ServerHandle, level: LevelResult) -> None:
        """Launched servers: start-up time and first-request latency on every level of it."""
        if handle.startup_s is None:  # attached: nobody here saw it start
            level.first_request_ms = None
            return
        if state.first_request_ms is None:
            state.first_request_ms = level.first_request_ms
        level.startup_s = handle.startup_s
        level.first_request_ms = state.first_request_ms

    def ensure(
        self,
        config: str,
        workload: Workload,
        concurrency: int,
        n: int,
        *,
        independent: bool = False,
    ) -> list[LevelResult]:
        """At least ``n`` samples of the point (measuring only what is missing); with
        ``independent``, each sample after the first comes from a fresh launch."""
        for _ in range(max(0, n - len(self.samples(config, workload, concurrency)))):
            fresh = independent and bool(self.samples(config, workload, concurrency))
            self.measure(config, workload, concurrency, fresh_launch=fresh)
        return self.samples(config, workload, concurrency)

    def by_launch(self, config: str, workload: Workload) -> dict[str, dict[int, LevelResult]]:
        """``config``'s samples grouped by the launch that measured them: {launch: {C: first
        sample of that launch}} (launch-adjusted verdicts compare levels of one launch)."""
        out: dict[str, dict[int, LevelResult]] = {}
        for (c, w, cc), samples in self._samples.items():
            if c == config and w == workload:
                for lv in samples:
                    if lv.launch is not None:
                        out.setdefault(lv.launch, {}).setdefault(cc, lv)
        return out

    def ensure_launches(
        self, config: str, workload: Workload, levels: Sequence[int], n: int
    ) -> dict[str, dict[int, LevelResult]]:
        """At least ``n`` launches that each measured every level of ``levels`` (fewer when
        the server cannot be relaunched): the live launch completes its sweep first, then
        each further launch measures the whole sweep. Returns ``by_launch``."""
        need = sorted(set(levels))
        for _ in range(n + 1):  # each pass completes one launch
            by = self.by_launch(config, workload)
            full = [lid for lid, got in by.items() if set(need) <= set(got)]
            state = self._states.get(config)
            live = state is not None and state.handle is not None and not state.handle.closed
            cur = state.launch_id if live and state is not None else None
            if len(full) >= n or (full and not self.can_relaunch(config) and cur in full):
                return by
            fresh = cur is not None and cur in full
            todo = [c for c in need if cur is None or fresh or c not in by.get(cur, {})]
            for i, c in enumerate(todo):
                self.measure(config, workload, c, fresh_launch=fresh and i == 0)
        return self.by_launch(config, workload)

    def sweep(self, config: str, workload: Workload) -> SweepResult:
        """The levels measured so far for ``config``: the first sample of each level in
        ``levels``, the others in ``repeats`` (results files keep every sample)."""
        mine = {
            cc: s for (c, w, cc), s in self._samples.items() if c == config and w == workload and s
        }
        levels = [mine[cc][0] for cc in sorted(mine)]
        repeats = {cc: list(mine[cc][1:]) for cc in sorted(mine) if len(mine[cc]) > 1}
        facts = self.facts(config) or ServerFacts(mode=self.mode_for(config))
        return SweepResult(
            config=config, server=facts, workload=workload, levels=levels, repeats=repeats
        )

    def unmeasured(self) -> dict[str, str]:
        """Configs that could not be measured (server did not start, or died): why."""
        return {c: s.error for c, s in sorted(self._states.items()) if s.error}

    def all_sweeps(self) -> list[SweepResult]:
        keys = sorted({(c, w) for (c, w, _) in self._samples}, key=lambda k: (k[0], k[1].key()))
        return [self.sweep(c, w) for c, w in keys]
