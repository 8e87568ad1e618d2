"""Every setting of the plugin, declared once: its parser, default, help and where it may be
given; resolved marker > CLI > env > ini > the suite's ``[sweep]`` > default by one function.

Modelled on pytest-timeout: each value is parsed and validated where it comes from, and a bad
value is an error that names its source (the flag, the environment variable, the ini key, the
suite file or the marker), so a user never has to guess which place holds the typo. What is
derived from these declarations: the pytest options (``plugin/__init__.py``), the suite file's
``[sweep]`` model (``run/suite.py``), the marker's keys, ``llmperf sweep``'s flags (``cli.py``)
and the table of docs/settings.md (``run/settings_doc.py``). The bounds of a value are its
parser's (``base/values.py``), which the ``Workload`` fields run as well.

The command line, environment and ini file carry how a run is made (which server, which
baselines, record or judge, where output goes, which levels and lengths for a quick run);
what a test measures and when a measurement counts (workload shape, verdict and validity
limits) is the suite's, written in ``[sweep]`` or a marker.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pytest_llmperf.base.results import parse_backend
from pytest_llmperf.base.values import (
    DEFAULT_IDLE_TIMEOUT_S,
    parse_bool,
    parse_choice,
    parse_history,
    parse_idle_timeout,
    parse_int,
    parse_levels,
    parse_metrics,
    parse_nonneg_int,
    parse_positive_float,
    parse_positive_int,
    parse_request_count,
    parse_secret,
    parse_str,
    parse_token_count,
    parse_tolerances,
)
from pytest_llmperf.run.passes import AUTO, parse_passes
from pytest_llmperf.run.setting import (
    SUITE_TABLE,
    TEST,
    WORKLOAD_FIELDS,
    Setting,
    SettingError,
)
from pytest_llmperf.run.test_settings import TEST_SETTINGS

__all__ = [
    "MARKER_KEYS",
    "SETTINGS",
    "SETTINGS_BY_NAME",
    "SUITE_KEYS",
    "SUITE_TABLE",
    "WORKLOAD_FIELDS",
    "Resolved",
    "Setting",
    "SettingError",
    "check_marker_keys",
    "check_not_given_elsewhere",
    "resolve",
    "resolve_from",
]


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "config",
        parse_str,
        None,
        "suite file declaring servers, sweep and gates (default: nearest llmperf.toml)",
    ),
    Setting(
        "url",
        parse_str,
        None,
        "attach to a running SGLang server at this URL instead of launching one",
    ),
    Setting(
        "api_key",
        parse_secret,
        None,
        "API key for an attached server (prefer the env var LLMPERF_API_KEY)",
    ),
    # Levels and lengths stay on the command line as well: narrowing a run to a few levels
    # (bisecting, recording one point) or shortening it for a smoke run is how a run is made.
    Setting(
        "levels",
        parse_levels,
        (1, 4, 16, 32, 64, 128),
        "concurrency levels, e.g. 1,4,16",
        marker=True,
        suite=True,
        sweep_flag="--concurrency",
    ),
    Setting(
        "input_len",
        parse_token_count,
        1000,
        "prompt tokens per request",
        marker=True,
        suite=True,
        sweep_flag="--input-len",
    ),
    Setting(
        "output_len",
        parse_token_count,
        1000,
        "output tokens per request (ignore_eos)",
        marker=True,
        suite=True,
        sweep_flag="--output-len",
    ),
    Setting(
        "requests",
        parse_request_count,
        None,
        "requests per level (default: 4 at C=1, 2*C above)",
        sweep_flag="--requests",
        **TEST,
    ),
    Setting(
        "backend",
        parse_backend,
        "sglang",
        "API to load: sglang (/generate), openai, openai-chat",
        sweep_flag="--backend",
        **TEST,
    ),
    Setting("seed", parse_int, 0, "seed of the deterministic prompts", sweep_flag="--seed", **TEST),
    Setting(
        "request_timeout",
        parse_positive_float,
        600.0,
        "total deadline of one request, seconds",
        sweep_flag="--timeout",
        **TEST,
    ),
    Setting(
        "idle_timeout",
        parse_idle_timeout,
        DEFAULT_IDLE_TIMEOUT_S,
        "seconds a request may wait for its next stream event (or its response) before it fails "
        "as stalled; at most the request timeout applies (0.1 to 86400)",
        sweep_flag="--idle-timeout",
        **TEST,
    ),
    Setting(
        "request_rate",
        parse_positive_float,
        None,
        "open-loop Poisson arrivals in req/s, each level capping requests in flight at C "
        "(default: closed loop, exactly C in flight)",
        sweep_flag="--request-rate",
        **TEST,
    ),
    Setting(
        "client_processes",
        parse_positive_int,
        1,
        "client processes that share each closed-loop level (C and requests split, records "
        "merged on one clock); raise it when a level says the load generator was the bottleneck",
        sweep_flag="--client-processes",
    ),
    Setting(
        "probes",
        parse_nonneg_int,
        32,
        "greedy probe prompts each launch answers outside the timed levels (A/B rounds, baseline "
        "recordings, a run against a baseline that holds answers); changed answers beyond the "
        "old side's own launch-to-launch spread fail (docs/consistency.md; 0 turns them off)",
    ),
    Setting(
        "probe_every_launch",
        parse_bool,
        False,
        "every launch answers the probes and results.json keeps its answers, also where no "
        "baseline entry holds any (llmperf calibrate --record gives it to its runs, so the "
        "entries it writes carry them)",
        flag=True,
    ),
    Setting(
        "probe_tokens",
        parse_positive_int,
        16,
        "max_new_tokens of each greedy probe answer",
    ),
    Setting(
        "repeat",
        parse_positive_int,
        1,
        "measure each point N times (noise-aware verdicts)",
        **TEST,
    ),
    # A recording run (--llmperf-update) says how many samples it takes: part of how it is made.
    Setting(
        "baseline_repeat",
        parse_positive_int,
        3,
        "samples per point when recording a baseline (--llmperf-update), each in a fresh "
        "server launch where --llmperf-relaunch allows: the baseline then carries its own noise",
        marker=True,
        suite=True,
    ),
    Setting(
        "baseline_passes",
        parse_passes,
        AUTO,
        "passes of the sweep each recording launch measures, its levels interleaved "
        "(1, 4, 16, 1, 4, 16), when adjusting: a launch-adjusted point is judged on the median "
        "of its passes, so drift within a launch counts less; later runs measure as many "
        "passes as their baseline recorded. auto: 2 x sqrt(start-up / a pass's time) (a "
        "re-recording: at the pass-to-launch noise ratio its entries show), at most the passes "
        "that fit in the start-up time, chosen from the first launch; 1 for a launch that "
        "starts in under two passes' time",
        marker=True,
        suite=True,
    ),
    Setting(
        "adjust",
        parse_choice("none", "launch", "auto"),
        "auto",
        "launch: also judge with each launch's speed removed (each launch measures the whole "
        "sweep; 3+ levels); auto: per metric, the sharper of plain and launch-adjusted by the "
        "baseline's recorded noise; none: plain only",
        **TEST,
    ),
    Setting(
        "judge_against",
        parse_choice("baseline", "history"),
        "baseline",
        "what a point is judged against: the baseline file, or the window of earlier runs in "
        "the history database (needs history; the drift rule, docs/drift.md)",
        **TEST,
    ),
    Setting(
        "history_window",
        parse_positive_int,
        10,
        "judge_against = history: how many earlier good runs the window holds (at least 5, "
        "the fewest it judges on; docs/drift.md)",
        **TEST,
    ),
    Setting(
        "sequential",
        parse_bool,
        True,
        "judge by the sequential rule (docs/verdicts.md): one more launch of a config measures "
        "its undecided points until all are decided or the budget is spent ([[ab]]: one more "
        "round, rounds being the budget); false: max_reruns, and [[ab]]'s fixed rounds",
        **TEST,
    ),
    Setting(
        "launch_budget",
        parse_positive_int,
        6,
        "most launches per config to decide (and [[ab]] rounds when it sets no rounds); a "
        "recording that adjusts adds launches beyond baseline_repeat up to it while its "
        "noise would leave a later run's last look unable to decide a point between the "
        "tolerance and twice it",
        **TEST,
    ),
    Setting(
        "time_budget", parse_positive_float, None, "minutes per config or [[ab]] to decide", **TEST
    ),
    Setting(
        "relaunch",
        parse_choice("rerun", "never"),
        "rerun",
        "restart a launched (or simulated) server before each re-run and each extra baseline "
        "sample, so samples are independent of one launch's speed (rerun, default), or never; "
        "attached servers are never restarted and their samples count as one launch",
    ),
    Setting(
        "max_reruns",
        parse_nonneg_int,
        2,
        "re-runs of an inconclusive point before it is judged",
        **TEST,
    ),
    Setting(
        "metrics",
        parse_metrics,
        None,
        "metrics compared with the baseline (default: throughput, per-request tok/s, "
        "TTFT/ITL p50, accept length, and where recorded the cache hit rate and a launched "
        "server's startup_s, at 50 %)",
        **TEST,
    ),
    Setting(
        "tolerance",
        parse_tolerances,
        {},
        "per-metric tolerances, e.g. output_throughput=5%,median_ttft_ms=15%",
        **TEST,
    ),
    Setting(
        "baseline_dir",
        parse_str,
        "baselines",
        "directory of baseline JSON files (relative to the rootdir)",
    ),
    Setting(
        "hardware",
        parse_str,
        None,
        "hardware key for baselines (default: detected GPUs, or sim-<profile>)",
    ),
    Setting(
        "update",
        parse_bool,
        False,
        "record new or changed baselines and delete unused ones",
        flag=True,
    ),
    Setting(
        "rerecord",
        parse_bool,
        False,
        "re-record every measured point, passing or not (implies --llmperf-update): after "
        "changing baseline_repeat, or to give old one-launch baselines their own noise",
        flag=True,
    ),
    Setting("warn_unused", parse_bool, False, "only warn about unused baseline entries", flag=True),
    Setting(
        "require_real",
        parse_bool,
        False,
        "refuse to fall back to the simulated server (GPU CI)",
        flag=True,
    ),
    Setting(
        "simulate",
        parse_bool,
        False,
        "always launch the simulated server, even if SGLang is installed",
        flag=True,
        sweep_flag="--simulate",
    ),
    Setting(
        "sim_profile", parse_str, None, "simulator profile for every server (overrides the suite)"
    ),
    Setting(
        "sim_args",
        parse_str,
        None,
        "extra flags for simulated servers, e.g. '--sim-jitter 0.03' (all) or "
        "'mtp: --max-running-requests 40' (one config); parts separated by ';'",
    ),
    Setting(
        "launch_timeout",
        parse_positive_float,
        None,
        "seconds a launched server has to become healthy (default 600)",
    ),
    Setting(
        "output_dir", parse_str, "llmperf-results", "where results JSON, server logs and plots go"
    ),
    Setting(
        "history",
        parse_history,
        None,
        "append this run's points, samples and verdicts to a history database: off (default), "
        "default (.llmperf/history.sqlite under the rootdir), a SQLite file path or a database "
        "URL (password from LLMPERF_HISTORY_PASSWORD; docs/history.md)",
        sweep_flag="--history",
    ),
    Setting(
        "invalid",
        parse_choice("fail", "skip"),
        "fail",
        "what an invalid measurement (client saturated, lengths off, failed requests) does to "
        "its test: fail (default, like llmperf compare) or skip; a point the machine was too "
        "busy to measure (client starved by other processes or the hypervisor) is re-measured "
        "up to max_reruns times, then skipped with one summary line, and fail makes the exit "
        "status 1",
    ),
    Setting(
        "undecided",
        parse_choice("warn", "fail", "exit"),
        "warn",
        "what a check still inconclusive after its re-runs does: warn (it passes; one warning "
        "for the session), fail (its test fails), or exit (its test is skipped and the session "
        "exits 6 when nothing failed; 125 with --llmperf-bisect)",
    ),
    Setting(
        "plots",
        parse_bool,
        False,
        "write PNG plots to the output dir (needs matplotlib)",
        flag=True,
    ),
    Setting(
        "html_report",
        parse_choice("plots", "tables", "off"),
        "plots",
        "report.html and pr-comment.md in the output dir: plots (with its figures, needs "
        "matplotlib, 2-4 s), tables (no figures) or off",
    ),
    Setting(
        "details",
        parse_bool,
        False,
        "keep per-request details in the results JSON",
        flag=True,
        sweep_flag="--details",
    ),
    Setting(
        "bisect",
        parse_bool,
        False,
        "exit status for `git bisect run`: 0 no regression, 1 regression, 125 cannot measure "
        "(a server did not start or a level was invalid)",
        flag=True,
    ),
    Setting(
        "scrape_metrics",
        parse_bool,
        False,
        "scrape the server's /metrics during each level",
        flag=True,
        sweep_flag="--scrape-metrics",
    ),
    Setting(
        "gpu_telemetry",
        parse_choice("nvml", "off"),
        "nvml",
        "sample the server's GPUs through NVML during each level (clocks, throttle reasons, "
        "power, temperature; a throttled level is re-measured): nvml (default) or off",
    ),
    Setting("gpu_telemetry_interval", parse_positive_float, 0.2, "seconds between GPU samples"),
    Setting(
        "nvml_module",
        parse_str,
        "pynvml",
        "for tests: the module imported for NVML (default pynvml, from nvidia-ml-py)",
    ),
)


SETTINGS += TEST_SETTINGS  # when a measurement counts, and what it is: run/test_settings.py
SETTINGS_BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
MARKER_KEYS: frozenset[str] = frozenset(s.name for s in SETTINGS if s.marker)
SUITE_KEYS: tuple[str, ...] = tuple(s.name for s in SETTINGS if s.suite)
# Marker keys that are not settings: which configs and gates a test applies to.
MARKER_SELECTORS: frozenset[str] = frozenset({"configs", "gates"})

Source = Literal["marker", "cli", "env", "ini", "suite", "default"]


@dataclass(frozen=True)
class Resolved:
    """A setting's typed value and the place it came from."""

    value: Any
    source: Source

    @property
    def given(self) -> bool:
        """Set somewhere, not left at its default."""
        return self.source != "default"


def _parse(setting: Setting, value: Any, source: str) -> Any:
    try:
        return setting.parse(value)
    except ValueError as exc:
        raise SettingError(f"{source}: {exc}") from None


def resolve_from(
    name: str,
    *,
    marker: Mapping[str, Any] | None = None,
    marker_source: str = "marker @pytest.mark.llmperf",
    cli: Any = None,
    environ: Mapping[str, str] | None = None,
    ini: Any = None,
    ini_source: str = "ini file",
    suite: Mapping[str, Any] | None = None,
    suite_source: str = "llmperf.toml",
) -> Resolved:
    """Resolve one setting: marker > CLI > env > ini > the suite's ``[sweep]`` > default.

    ``cli`` and ``ini`` are the raw values pytest holds (None when not given), ``suite`` the
    ``[sweep]`` keys the suite file sets. A place the setting may not be given is not read.
    """
    setting = SETTINGS_BY_NAME[name]
    env = os.environ if environ is None else environ
    if setting.marker and marker and name in marker:
        return Resolved(_parse(setting, marker[name], f"{marker_source}({name}=...)"), "marker")
    if setting.cli and cli not in (None, False):
        label = setting.cli_flag if setting.flag else f"{setting.cli_flag}={cli}"
        return Resolved(_parse(setting, cli, f"command line {label}"), "cli")
    if setting.env and env.get(setting.env_var, "") != "":
        where = f"environment variable {setting.env_var}"
        return Resolved(_parse(setting, env[setting.env_var], where), "env")
    if setting.ini and ini not in (None, "", []):
        return Resolved(_parse(setting, ini, f"{ini_source} option {setting.ini_key}"), "ini")
    # ``suite``: a mapping or the suite's ``SweepSection``, which has ``get`` but no ``[]``
    value = suite.get(name) if setting.suite and suite else None
    if value is not None:
        return Resolved(_parse(setting, value, f"{suite_source}: [sweep] {name}"), "suite")
    return Resolved(setting.default, "default")


def resolve(name: str, **sources: Any) -> Any:
    """The value alone of ``resolve_from(name, **sources)``."""
    return resolve_from(name, **sources).value


def check_not_given_elsewhere(cli: Mapping[str, Any], environ: Mapping[str, str]) -> None:
    """A suite setting given as a flag (kept as a hidden option for this) or an environment
    variable is an error that says where it goes now: ignoring it would measure or judge with
    other values than the ones the user wrote, and a warning scrolls by unread in CI logs."""
    problems = []
    for s in SETTINGS:
        if not s.cli and cli.get(s.name) not in (None, False):
            problems.append(f"{s.cli_flag} is no longer a command-line setting: {s.where}")
        if not s.env and environ.get(s.env_var, "") != "":
            problems.append(f"environment variable {s.env_var} is no longer read: {s.where}")
    if problems:
        raise SettingError("; ".join(problems))


def check_marker_keys(kwargs: Mapping[str, Any], where: str) -> None:
    """Unknown keys in ``@pytest.mark.llmperf(...)`` are errors, not silently ignored."""
    allowed = MARKER_KEYS | MARKER_SELECTORS
    unknown = sorted(set(kwargs) - allowed)
    if unknown:
        raise SettingError(
            f"{where}: unknown llmperf marker argument(s) {', '.join(unknown)}; "
            f"allowed: {', '.join(sorted(allowed))}"
        )
