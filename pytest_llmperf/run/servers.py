"""The servers of one run: each config's mode decided once, its GPUs planned, its server
launched or attached (one launched server at a time per worker, since two real servers rarely
fit on one GPU slice), probed, watched and stopped."""

from __future__ import annotations

import secrets
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pytest_llmperf.base.errors import InputError, LLMPerfError
from pytest_llmperf.base.results import Backend, Mode, ServerFacts
from pytest_llmperf.base.values import reveal
from pytest_llmperf.core import control_http
from pytest_llmperf.core.server_probe import (
    ServerAnswerError,
    ServerKind,
    get_server_info,
    server_facts,
)
from pytest_llmperf.core.sweep import run_in_own_loop
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
from pytest_llmperf.run.options import RunOptions, parse_url_map, sim_args_for
from pytest_llmperf.run.suite import Suite

PROBE_TIMEOUT_S = 30.0

# Chat prompts carry their ordinal as 6 digits (core/workload.py): distinct below 10**6, so the
# base leaves room for a long run after it.
PROMPT_ORDINALS = 900_000


def fresh_prompt_base() -> int:
    """A random first ordinal, so an earlier run's prompts are unlikely to come back to a
    server that keeps them (llama.cpp's host-memory prompt cache holds thousands): two runs of
    n prompts each repeat prompts with odds of about 2n / PROMPT_ORDINALS (1 in 9000 for
    n = 50), where 27000 ordinals made that 1 in 270 a pair and a long-lived server met it
    within a few dozen runs. A prompt past ordinal 29000 shares its first token with an
    earlier one and differs from the second on (llama.cpp, vLLM's 16-token blocks: no hit)."""
    return secrets.randbelow(PROMPT_ORDINALS)


class PointError(LLMPerfError, RuntimeError):
    """A point could not be measured (server failed to start, died, or the level errored)."""


@dataclass
class ConfigState:
    """One config's server as the run knows it."""

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

    @property
    def live(self) -> bool:
        return self.handle is not None and not self.handle.closed


@dataclass
class ServerPool:
    """Each config's server: its mode, hardware key and GPU plan, and the live handle."""

    suite: Suite
    output_dir: Path
    options: RunOptions
    # The environment holds secrets (LLMPERF_API_KEY, HF tokens): never in a repr.
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    _launches: int = 0
    # Launch ids carry the session's token, so samples of two sessions never look like one
    # launch when their results are merged (``llmperf calibrate --record``): an attached
    # server is one launch per session, its session-to-session noise the one it has.
    _session: str = field(default_factory=lambda: secrets.token_hex(3), repr=False)
    _states: dict[str, ConfigState] = field(default_factory=dict, repr=False)
    _modes: dict[str, Mode | PointError] = field(default_factory=dict, repr=False)
    _gpu_names: list[str] | None = None
    _gpu_plans: dict[str, gpus.GpuPlan] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._default_url, self._url_map = parse_url_map(self.options.url)
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
        """How ``config``'s server is reached, decided once, before anything is launched; the
        launch is then told (it decides nothing again)."""
        if config not in self._modes:
            try:
                self._modes[config] = self._decide_mode(config)
            except PointError as exc:
                self._modes[config] = exc
        mode = self._modes[config]
        if isinstance(mode, PointError):
            raise PointError(str(mode))
        return mode

    def _decide_mode(self, config: str) -> Mode:
        if self.url_for(config):
            return "attached"
        if self.options.simulate:
            if self.options.require_real:
                raise PointError(
                    f"config {config!r}: --llmperf-simulate and --llmperf-require-real "
                    "contradict each other"
                )
            return "simulated"
        cfg = self.suite.server(config)
        # A config's own ``command`` needs no SGLang here; its own ``python`` is trusted to
        # have it (its launch says so if not).
        if sglang_available() or cfg.command is not None or cfg.python is not None:
            return "launched"
        if self.options.require_real:
            raise PointError(
                f"config {config!r}: SGLang is not installed in {sys.executable} and "
                "--llmperf-require-real refuses the simulated server"
            )
        return "simulated"

    def sim_profile_for(self, config: ServerConfig) -> str:
        from pytest_llmperf.sim.profile import DEFAULT_PROFILE

        return self.options.sim_profile or config.sim_profile or DEFAULT_PROFILE

    def hardware_for(self, config: str) -> str:
        """The baseline key of the hardware this config runs on: the GPUs its server uses."""
        cfg = self.suite.server(config)
        if self.options.hardware_override:
            return hardware_key([], override=self.options.hardware_override)
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
        with self.lock:
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
    def state(self, config: str) -> ConfigState:
        return self._states.setdefault(config, ConfigState())

    def live_launch(self, config: str) -> str | None:
        """The launch id of ``config``'s live server (None when none is up)."""
        state = self._states.get(config)
        return state.launch_id if state is not None and state.live else None

    def _launch_config(self, cfg: ServerConfig, mode: Mode) -> ServerConfig:
        if mode != "simulated":
            return cfg
        extra = ["--sim-profile", self.sim_profile_for(cfg)]
        extra += sim_args_for(self.options.sim_args, cfg.name)
        args = (*cfg.args, *cfg.sim_args, *extra)  # the CLI's --llmperf-sim-args win
        return cfg.model_copy(update={"args": args, "sim_profile": None, "sim_args": ()})

    def server(self, config: str) -> ServerHandle:
        """The live server of ``config``, launching it (and stopping any other) if needed."""
        with self.lock:
            state = self.state(config)
            if state.error:
                raise PointError(state.error)
            if state.handle is not None and not state.handle.closed:
                code = state.handle.poll()
                if code is None:
                    return state.handle
                state.error = self.died_message(config, state.handle, code)
                raise PointError(state.error)
            cfg = self.suite.server(config)
            mode = self.mode_for(config)
            api_key = reveal(self.options.api_key)
            try:
                if mode == "attached":
                    url = self.url_for(config)
                    assert url is not None
                    handle = attach(url, api_key=api_key)
                else:
                    plan = self.gpu_plan(config)
                    if plan.error:  # said before anything of this config is launched
                        state.error = f"config {config!r}: server not launched: {plan.error}"
                        raise PointError(state.error)
                    self.stop_all()  # one launched server at a time per worker
                    handle = launch(
                        self._launch_config(cfg, mode),
                        log_dir=self.output_dir / "logs",
                        simulate=mode == "simulated",  # decided above, once
                        gpu_ids=plan.ids,
                        health_timeout_s=self.options.launch_timeout_s,
                        secrets=(api_key,),
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
        return self.options.relaunch == "rerun" and self.mode_for(config) != "attached"

    def relaunch_config(self, config: str) -> bool:
        """Stop ``config``'s server so the next measurement launches it afresh; False when the
        setting or the mode does not allow it (the next sample then shares the launch)."""
        with self.lock:
            if not self.can_relaunch(config):
                return False
            state = self._states.get(config)
            if state is not None and state.live:
                self.stop(config)
            return True

    def died_message(self, config: str, handle: ServerHandle, code: int) -> str:
        return (
            f"config {config!r}: the server exited with code {code} during the run; "
            f"log: {handle.log_path}\n--- last lines of the server log ---\n{handle.log_tail(30)}"
        )

    def _probe(self, handle: ServerHandle, mode: Mode) -> ServerFacts:
        async def probe() -> ServerFacts:
            async with control_http.async_client(
                handle.url, api_key=handle.api_key, read_timeout_s=PROBE_TIMEOUT_S
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
        return self.state(config).facts

    def stop(self, config: str) -> None:
        state = self._states.get(config)
        if state and state.handle is not None:
            state.handle.close()
            state.warmed = False
            state.first_request_ms = None

    def stop_all(self) -> None:
        for name in list(self._states):
            self.stop(name)

    def unmeasured(self) -> dict[str, str]:
        """Configs that could not be measured (server did not start, or died): why."""
        return {c: s.error for c, s in sorted(self._states.items()) if s.error}
