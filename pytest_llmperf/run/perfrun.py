"""The state of one perf run: which servers are up, what each point measured.

This is the core behind the pytest fixtures, usable without pytest: a test asks for a point
(config, workload, C); the run has its server (``ServerPool``: launched, attached or simulated,
one launched at a time) measure the level once and keeps it (``SampleStore``), so several tests
asserting on one point cost one measurement. How it runs is one frozen ``RunOptions``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_llmperf.base.results import (
    Backend,
    LevelResult,
    Mode,
    ServerFacts,
    SweepResult,
    Workload,
)
from pytest_llmperf.core.server_probe import ServerKind
from pytest_llmperf.core.sweep import Progress, run_level
from pytest_llmperf.launch import gpus
from pytest_llmperf.launch.launcher import ServerHandle
from pytest_llmperf.launch.server_config import ServerConfig
from pytest_llmperf.launch.telemetry import Telemetry, nvml_indices, open_telemetry
from pytest_llmperf.run.options import RunOptions, parse_url_map, sim_args_for
from pytest_llmperf.run.passes import Passes, auto_passes, first_pass, ratio_text
from pytest_llmperf.run.plan_time import ConfigSpent, record_spent
from pytest_llmperf.run.samples import SampleStore
from pytest_llmperf.run.servers import (
    PROMPT_ORDINALS,
    ConfigState,
    PointError,
    ServerPool,
    fresh_prompt_base,
)
from pytest_llmperf.run.suite import Suite

# How long a server whose requests failed may take to show its exit (a launched server runs
# under a keeper that reports the command's exit code a moment after the crash).
EXIT_GRACE_S = 3.0

__all__ = [
    "PROMPT_ORDINALS",
    "PerfRun",
    "PointError",
    "Redo",
    "RunOptions",
    "fresh_prompt_base",
    "parse_url_map",
    "sim_args_for",
]


@dataclass(frozen=True)
class Redo:
    """Samples the moment spoiled (``spoiled``: ``validity.disturbed`` at the test's policy)
    are measured again in their own launch, in at most ``rounds`` more rounds: a launch then
    holds all its passes, as its baseline entry and its judging assume."""

    spoiled: Callable[[LevelResult], bool]
    rounds: int


@dataclass(init=False)
class PerfRun:
    """Servers and measurements of one session (or one xdist worker).

    ``PerfRun(suite, output_dir, options)``; the options' fields may also be given as keywords
    (``PerfRun(suite=s, output_dir=d, url=...)``), as the public API always took them.
    """

    suite: Suite
    output_dir: Path
    options: RunOptions
    progress: Callable[[str, Progress], None] | None = None
    # The environment holds secrets (LLMPERF_API_KEY, HF tokens): never in a repr.
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    servers: ServerPool = field(init=False, repr=False)
    store: SampleStore = field(init=False, repr=False)
    spent: dict[str, ConfigSpent] = field(init=False, repr=False)  # launches and time
    _telemetry: Telemetry | None = field(init=False, repr=False)

    def __init__(
        self,
        suite: Suite,
        output_dir: Path,
        options: RunOptions | None = None,
        *,
        progress: Callable[[str, Progress], None] | None = None,
        env: Mapping[str, str] | None = None,
        **option_fields: Any,
    ) -> None:
        unknown = set(option_fields) - RunOptions.names()
        if unknown:
            raise TypeError(f"PerfRun() got unexpected keyword(s) {', '.join(sorted(unknown))}")
        if options is None:
            options = RunOptions(**option_fields)
        elif option_fields:
            raise TypeError("PerfRun() takes options or their fields, not both")
        self.suite = suite
        self.output_dir = output_dir
        self.options = options
        self.progress = progress
        self.env = dict(env or {})
        self.servers = ServerPool(suite, output_dir, options, self.env)
        self.store = SampleStore()
        self.spent = {}
        self._telemetry = None
        # The accuracy probe's answers per (config, items, seed, backend): run/accuracy.py.
        self.accuracy: dict[tuple[str, int, int, str], tuple[Any, str]] = {}
        # Each launch's consistency probe answers (or why it gave none) per (config, launch,
        # probes, tokens, seed, backend): run/probing.py.
        self.probes: dict[tuple[Any, ...], Any] = {}
        # What each launch of a config must do before a fresh launch replaces it, per (config,
        # purpose): a point judged on consistency probes has every launch answer them.
        self.before_relaunch: dict[tuple[Any, ...], Callable[[], None]] = {}
        # baseline_passes = "auto": the passes chosen per (config, workload), run/passes.py
        self._passes: dict[tuple[str, Workload], int] = {}

    # -- the servers (``ServerPool``) ------------------------------------------------------
    def url_for(self, config: str) -> str | None:
        return self.servers.url_for(config)

    def mode_for(self, config: str) -> Mode:
        """How ``config``'s server is reached; decided once, before anything is launched."""
        return self.servers.mode_for(config)

    def sim_profile_for(self, config: ServerConfig) -> str:
        return self.servers.sim_profile_for(config)

    def hardware_for(self, config: str) -> str:
        """The baseline key of the hardware this config runs on: the GPUs its server uses."""
        return self.servers.hardware_for(config)

    def gpu_plan(self, config: str) -> gpus.GpuPlan:
        return self.servers.gpu_plan(config)

    def gpu_text(self, config: str, xdist_workers: int | None = None) -> str:
        return self.servers.gpu_text(config, xdist_workers)

    def server(self, config: str) -> ServerHandle:
        """The live server of ``config``, launching it (and stopping any other) if needed."""
        return self.servers.server(config)

    def can_relaunch(self, config: str) -> bool:
        return self.servers.can_relaunch(config)

    def relaunch_config(self, config: str) -> bool:
        return self.servers.relaunch_config(config)

    def server_kind(self, config: str) -> ServerKind | None:
        return self.servers.server_kind(config)

    def suggested_backend(self, config: str) -> Backend | None:
        return self.servers.suggested_backend(config)

    def server_description(self, config: str) -> str | None:
        return self.servers.server_description(config)

    def facts(self, config: str) -> ServerFacts | None:
        return self.servers.facts(config)

    def stop(self, config: str) -> None:
        self.servers.stop(config)

    def stop_all(self) -> None:
        self.servers.stop_all()

    def close(self) -> None:
        self.servers.stop_all()

    def unmeasured(self) -> dict[str, str]:
        """Configs that could not be measured (server did not start, or died): why."""
        return self.servers.unmeasured()

    @property
    def telemetry(self) -> Telemetry:
        """GPU telemetry (NVML, or off with its reason), opened on first use."""
        if self._telemetry is None:
            o = self.options
            self._telemetry = open_telemetry(
                o.gpu_telemetry, o.nvml_module, o.gpu_telemetry_interval
            )
        return self._telemetry

    def gpus_sampled(self, config: str) -> list[str]:
        """NVML indices of the GPUs ``config``'s server uses (its plan through
        ``CUDA_VISIBLE_DEVICES``; an attached one: the first it would be given). The simulator
        uses no GPU: what one does beside it says nothing about its levels."""
        if self.mode_for(config) == "simulated":
            return []
        plan = self.gpu_plan(config)
        return nvml_indices(plan.ids, plan.need.count, self.env or os.environ)

    # -- measurements -----------------------------------------------------------------------
    def samples(self, config: str, workload: Workload, concurrency: int) -> list[LevelResult]:
        return self.store.of(config, workload, concurrency)

    def measure(
        self,
        config: str,
        workload: Workload,
        concurrency: int,
        *,
        fresh_launch: bool = False,
        keep: bool = True,
    ) -> LevelResult:
        """``_measure``, its wall time (launching included) and launch added to ``spent``."""
        t0 = time.monotonic()
        try:
            return self._measure(
                config, workload, concurrency, fresh_launch=fresh_launch, keep=keep
            )
        finally:
            live = self.servers.live_launch(config)
            record_spent(self.spent, config, live, time.monotonic() - t0)

    def _measure(
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
        with self.servers.lock:
            if fresh_launch:
                if self.servers.live_launch(config) is not None:
                    for (c, *_), ask in list(self.before_relaunch.items()):
                        if c == config:
                            ask()
                self.relaunch_config(config)
            handle = self.server(config)
            state = self.servers.state(config)

            def report(p: Progress) -> None:
                if self.progress is not None:
                    self.progress(config, p)

            kind = handle.kind
            if workload.backend == "sglang" and kind is not None and kind.backend != "sglang":
                raise PointError(
                    f"config {config!r}: the server at {handle.url} is {kind.describe()}; it has"
                    " no /generate, so the sglang backend cannot measure it: set the backend to"
                    f" {kind.backend!r} (backend = {kind.backend!r} in [sweep] of llmperf.toml,"
                    " or backend= in the marker)"
                )
            t0 = time.monotonic()
            # Each measurement of a server takes fresh prompt ordinals (no request can hit a
            # prefix cache): those after every request sent to this config so far.
            sent = state.prompt_base + state.prompts_sent
            sampler = self.telemetry.start(self.gpus_sampled(config))
            try:
                level = run_level(
                    handle.url,
                    concurrency,
                    workload,
                    api_key=handle.api_key,
                    progress=report,
                    details=self.options.details,
                    scrape_metrics=self.options.scrape_metrics,
                    warmup=not state.warmed,
                    slo=self.options.slo,
                    prompt_start=sent,  # llmperf-client
                    client_processes=self.options.client_processes,
                )
                if sampler is not None:
                    level.gpu, sampler = sampler.stop(), None
                if state.prompt_base:
                    level.notes.append(
                        f"prompts from ordinal {state.prompt_base}: the server cannot reset its "
                        "prefix cache, so this run sends prompts no earlier run sent"
                    )
            except Exception as exc:
                if sampler is not None:
                    sampler.stop()
                code = handle.exit_code_within(EXIT_GRACE_S)
                if code is not None:
                    state.error = self.servers.died_message(config, handle, code)
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
            # Failed requests may be a crash the process table does not show yet.
            code = handle.exit_code_within(EXIT_GRACE_S if level.failed else 0.0)
            if code is not None:
                # Requests failed because the server died: say so instead of blaming the numbers.
                state.error = self.servers.died_message(config, handle, code)
                level.notes.append(f"server exited with code {code} during this level")
            if code is None and level.num_requests and not level.completed:
                # A server that completes nothing (stalled, or refusing every request) would
                # cost every further level the same timeouts: this config's sweep ends here.
                causes = [e for e in level.errors if "not sent: " not in e] or level.errors
                first = f": {causes[0]}" if causes else ""
                state.error = (
                    f"config {config!r}: no request completed at C={concurrency}{first}; "
                    "its remaining levels are not measured"
                )
                level.notes.append(state.error)
            if keep:
                self.store.add(config, workload, concurrency, level)
            if code is not None:
                # The level stays in the results (its failed requests), the point errors.
                raise PointError(state.error)
            return level

    @staticmethod
    def _stamp_startup(state: ConfigState, handle: ServerHandle, level: LevelResult) -> None:
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

    def by_launch(self, config: str, workload: Workload) -> dict[str, dict[int, list[LevelResult]]]:
        """``config``'s samples grouped by the launch that measured them (``SampleStore``)."""
        return self.store.by_launch(config, workload)

    def ensure_launches(
        self,
        config: str,
        workload: Workload,
        levels: Sequence[int],
        n: int,
        passes: Passes = 1,
        ratio: float | None = None,
        redo: Redo | None = None,
    ) -> dict[str, dict[int, list[LevelResult]]]:
        """At least ``n`` launches that each measured every level of ``levels`` ``passes``
        times (fewer launches when the server cannot be relaunched): the live launch completes
        its passes first, then each further launch measures them all. A pass measures every
        level once, so the passes of a launch interleave (1, 4, 16, 1, 4, 16): drift within
        the launch falls on every level alike. ``"auto"``: as many as ``chosen_passes`` says
        after the first launch's first pass (at ``ratio``, ``auto_passes``). ``redo``: a
        spoiled sample does not count toward its launch's passes. Returns ``by_launch``."""
        need = sorted(set(levels))
        if isinstance(passes, str):  # AUTO
            self.ensure_launches(config, workload, need, 1, 1)
            count = self.chosen_passes(config, workload, need, ratio)
        else:
            count = max(1, passes)

        def kept(got: Mapping[int, list[LevelResult]], c: int) -> list[LevelResult]:
            return [s for s in got.get(c, []) if redo is None or not redo.spoiled(s)]

        def full(got: Mapping[int, list[LevelResult]]) -> bool:
            return all(len(kept(got, c)) >= count for c in need)

        # each round completes one launch; a redo round completes the live one again
        for _ in range(n + 1 + (redo.rounds if redo else 0)):
            by = self.by_launch(config, workload)
            done = [lid for lid, got in by.items() if full(got)]
            cur = self.servers.live_launch(config)
            if len(done) >= n or (done and not self.can_relaunch(config) and cur in done):
                return by
            fresh = cur is not None and cur in done
            have = {} if cur is None or fresh else {c: kept(by.get(cur, {}), c) for c in need}
            first = True
            for j in range(count):
                for c in need:
                    if len(have.get(c, [])) <= j:
                        self.measure(config, workload, c, fresh_launch=fresh and first)
                        first = False
        return self.by_launch(config, workload)

    def launch_passes(
        self, config: str, workload: Workload, levels: Sequence[int], passes: Passes
    ) -> int:
        """The passes ``config``'s launches measure at the setting ``passes`` (``"auto"``: as
        ``chosen_passes`` chose them from this session's first launch)."""
        if isinstance(passes, int):
            return passes
        return self.chosen_passes(config, workload, levels)

    def chosen_passes(
        self, config: str, workload: Workload, levels: Sequence[int], ratio: float | None = None
    ) -> int:
        """``baseline_passes = "auto"``: the passes for ``config``'s launches, chosen once from
        its first launch (``run/passes.py``, at ``σ_W / σ_L`` = ``ratio``, None: assumed) and
        noted on that launch's first pass."""
        key = (config, workload)
        if key not in self._passes:
            need = sorted(set(levels))
            by = self.by_launch(config, workload)
            first = first_pass(by, need)
            if first is None:
                return 1  # the first pass was not measured (an error ends the sweep)
            startup, pass_s = first
            self._passes[key] = got = auto_passes(startup, pass_s, ratio)
            start = "unknown (attached)" if startup is None else f"{startup:.0f} s"
            note = (
                f"baseline_passes = auto: {got} pass{'es' if got > 1 else ''} of the sweep a "
                f"launch (start-up {start}, a pass {pass_s:.1f} s, {ratio_text(ratio)})"
            )
            for samples in next(iter(by.values())).values():
                samples[0].notes.append(note)
        return self._passes[key]

    def sweep(self, config: str, workload: Workload) -> SweepResult:
        """The levels measured so far for ``config``: the first sample of each level in
        ``levels``, the others in ``repeats`` (results files keep every sample)."""
        mine = self.store.levels(config, workload)
        levels = [samples[0] for samples in mine.values()]
        repeats = {cc: list(samples[1:]) for cc, samples in mine.items() if len(samples) > 1}
        facts = self.facts(config) or ServerFacts(mode=self.mode_for(config))
        return SweepResult(
            config=config, server=facts, workload=workload, levels=levels, repeats=repeats
        )

    def all_sweeps(self) -> list[SweepResult]:
        return [self.sweep(c, w) for c, w in self.store.sweeps()]
