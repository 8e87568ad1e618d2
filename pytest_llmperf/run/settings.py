"""Every setting of the plugin, resolved marker > CLI > env > ini > default in one place.

Modelled on pytest-timeout: each value is parsed and validated where it comes from, and a bad
value is an error that names its source (the flag, the environment variable, the ini key or
the marker), so a user never has to guess which of five places holds the typo.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_llmperf.base.errors import InputError
from pytest_llmperf.base.values import (
    DEFAULT_IDLE_TIMEOUT_S,
    parse_bool,
    parse_choice,
    parse_idle_timeout,
    parse_int,
    parse_levels,
    parse_metrics,
    parse_nonneg_float,
    parse_nonneg_int,
    parse_positive_float,
    parse_positive_int,
    parse_request_count,
    parse_secret,
    parse_slack,
    parse_str,
    parse_token_count,
    parse_tolerances,
    parse_unit_float,
)


class SettingError(InputError):
    """A setting has a bad value; the message names where it came from."""


@dataclass(frozen=True)
class Setting:
    """One setting and where it may come from."""

    name: str
    parse: Callable[[Any], Any]
    default: Any
    help: str
    cli: bool = True
    env: bool = True
    ini: bool = True
    marker: bool = False
    flag: bool = False  # a CLI switch without a value

    @property
    def cli_flag(self) -> str:
        return "--llmperf-" + self.name.replace("_", "-")

    @property
    def env_var(self) -> str:
        return "LLMPERF_" + self.name.upper()

    @property
    def ini_key(self) -> str:
        return "llmperf_" + self.name

    @property
    def dest(self) -> str:
        return "llmperf_" + self.name


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
        cli=True,
    ),
    Setting(
        "levels",
        parse_levels,
        (1, 4, 16, 32, 64, 128),
        "concurrency levels, e.g. 1,4,16",
        marker=True,
    ),
    Setting("input_len", parse_token_count, 1000, "prompt tokens per request", marker=True),
    Setting(
        "output_len",
        parse_token_count,
        1000,
        "output tokens per request (ignore_eos)",
        marker=True,
    ),
    Setting(
        "requests",
        parse_request_count,
        None,
        "requests per level (default: 4 at C=1, 2*C above)",
        marker=True,
    ),
    Setting(
        "backend",
        parse_choice("sglang", "openai", "openai-chat"),
        "sglang",
        "API to load: sglang (/generate), openai, openai-chat",
        marker=True,
    ),
    Setting("seed", parse_int, 0, "seed of the deterministic prompts", marker=True),
    Setting(
        "request_timeout",
        parse_positive_float,
        600.0,
        "total deadline of one request, seconds",
        marker=True,
    ),
    Setting(
        "idle_timeout",
        parse_idle_timeout,
        DEFAULT_IDLE_TIMEOUT_S,
        "seconds a request may wait for its next stream event (or its response) before it fails "
        "as stalled; at most the request timeout applies (0.1 to 86400)",
        marker=True,
    ),
    Setting(
        "request_rate",
        parse_positive_float,
        None,
        "open-loop Poisson arrivals in req/s, each level capping requests in flight at C "
        "(default: closed loop, exactly C in flight)",
        marker=True,
    ),
    Setting(
        "client_processes",
        parse_positive_int,
        1,
        "client processes that share each closed-loop level (C and requests split, records "
        "merged on one clock); raise it when a level says the load generator was the bottleneck",
    ),
    Setting(
        "repeat",
        parse_positive_int,
        1,
        "measure each point N times (noise-aware verdicts)",
        marker=True,
    ),
    Setting(
        "baseline_repeat",
        parse_positive_int,
        3,
        "samples per point when recording a baseline (--llmperf-update), each in a fresh "
        "server launch where --llmperf-relaunch allows: the baseline then carries its own noise",
        marker=True,
    ),
    Setting(
        "adjust",
        parse_choice("none", "launch"),
        "none",
        "launch: also judge each point with its launch's speed removed (every launch measures "
        "the whole sweep; needs 3+ levels): for boxes where each launch runs at its own speed",
        marker=True,
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
        marker=True,
    ),
    Setting(
        "metrics",
        parse_metrics,
        None,
        "metrics compared with the baseline (default: throughput, per-request tok/s, "
        "TTFT/ITL p50, accept length)",
        marker=True,
    ),
    Setting(
        "tolerance",
        parse_tolerances,
        {},
        "per-metric tolerances, e.g. output_throughput=5%,median_ttft_ms=15%",
        marker=True,
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
        "invalid",
        parse_choice("fail", "skip"),
        "fail",
        "what an invalid measurement (client saturated, lengths off, failed requests) does to "
        "its test: fail (default, like llmperf compare) or skip; a point the machine was too "
        "busy to measure (client starved by other processes) is re-measured up to max_reruns "
        "times, then skipped with one summary line, and fail makes the exit status 1",
    ),
    Setting(
        "plots",
        parse_bool,
        False,
        "write PNG plots to the output dir (needs matplotlib)",
        flag=True,
    ),
    Setting(
        "details", parse_bool, False, "keep per-request details in the results JSON", flag=True
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
    ),
    # Validity thresholds (verdicts/validity.py ValidityPolicy); defaults are its constants.
    Setting(
        "max_failed",
        parse_nonneg_int,
        0,
        "failed requests a level may have and still be judged",
        marker=True,
    ),
    Setting(
        "length_slack",
        parse_slack,
        0.0,
        "relative slack on delivered vs requested token totals, e.g. 1% (default 0: exact)",
        marker=True,
    ),
    Setting(
        "max_cached_tokens",
        parse_nonneg_int,
        0,
        "prompt tokens per request the server may serve from its prefix cache (chat templates "
        "are allowed on top)",
        marker=True,
    ),
    Setting(
        "loop_lag_limit",
        parse_positive_float,
        10.0,
        "client event-loop lag p99 in ms above which a level is invalid (client saturated)",
    ),
    Setting(
        "cpu_limit",
        parse_positive_float,
        90.0,
        "client CPU in % of one core above which a level is invalid (client saturated)",
    ),
    Setting(
        "coalesced_limit",
        parse_unit_float,
        0.5,
        "share of ITL gaps from one network read (events the client read together) above "
        "which a level is invalid",
    ),
    Setting(
        "openai_extensions",
        parse_bool,
        True,
        "send the non-standard OpenAI-API fields ignore_eos and continuous_usage_stats "
        "(on/off; turn off for strict servers that answer 400/422 to them)",
        marker=True,
    ),
    # workloads: what the prompts are (core/workload.py); recorded in the baseline key.
    Setting(
        "workload",
        parse_choice("random", "shared-prefix", "multi-turn"),
        "random",
        "prompts: random (fresh, no cache can serve them), shared-prefix (prefix_groups "
        "prefixes of prefix_len tokens, primed in the prefix cache; its hit rate is measured) "
        "or multi-turn (conversations of `turns` turns re-sending their history)",
        marker=True,
    ),
    Setting(
        "range_ratio",
        parse_unit_float,
        None,
        "length mix: draw each request's input/output length around input_len/output_len "
        "(see range_convention), a number in [0, 1]",
        marker=True,
    ),
    Setting(
        "range_convention",
        parse_choice("sglang", "vllm"),
        "sglang",
        "length mix: sglang draws from [r*L, L] (bench_serving --random-range-ratio), vllm "
        "from [(1-r)*L, (1+r)*L] (vLLM's RandomDataset)",
        marker=True,
    ),
    Setting(
        "dataset",
        parse_str,
        None,
        "a ShareGPT .json/.jsonl file: prompts are each entry's first human turn",
        marker=True,
    ),
    Setting(
        "dataset_output_len",
        parse_positive_int,
        None,
        "dataset: output tokens of every request (default: the reply's words x 1.3)",
        marker=True,
    ),
    Setting(
        "turns",
        parse_positive_int,
        None,
        "multi-turn: turns per conversation (>= 2); a level runs `requests` conversations",
        marker=True,
    ),
    Setting(
        "think_time",
        parse_nonneg_float,
        0.0,
        "multi-turn: the most seconds a conversation waits between turns (seeded, uniform)",
        marker=True,
    ),
    Setting(
        "prefix_len",
        parse_positive_int,
        None,
        "shared-prefix: tokens of each group's common prefix (below input_len)",
        marker=True,
    ),
    Setting(
        "prefix_groups",
        parse_positive_int,
        None,
        "shared-prefix: number of distinct prefixes (prompt n uses prefix n mod G)",
        marker=True,
    ),
    Setting(
        "hit_rate_slack",
        parse_slack,
        0.1,
        "shared-prefix workloads: how far (absolute) the measured cache hit rate may be from the "
        "expected one before a level is invalid, e.g. 10%",
        marker=True,
    ),
)

SETTINGS_BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
MARKER_KEYS: frozenset[str] = frozenset(s.name for s in SETTINGS if s.marker)


def _parse(setting: Setting, value: Any, source: str) -> Any:
    try:
        return setting.parse(value)
    except ValueError as exc:
        raise SettingError(f"{source}: {exc}") from None


def resolve(
    name: str,
    *,
    marker: Mapping[str, Any] | None = None,
    marker_source: str = "marker @pytest.mark.llmperf",
    cli: Any = None,
    environ: Mapping[str, str] | None = None,
    ini: Any = None,
    ini_source: str = "ini file",
) -> Any:
    """Resolve one setting: marker > CLI > env > ini > default.

    ``cli`` and ``ini`` are the raw values pytest holds (None when not given).
    """
    setting = SETTINGS_BY_NAME[name]
    env = os.environ if environ is None else environ
    if setting.marker and marker and name in marker:
        return _parse(setting, marker[name], f"{marker_source}({name}=...)")
    if setting.cli and cli not in (None, False):
        label = setting.cli_flag if setting.flag else f"{setting.cli_flag}={cli}"
        return _parse(setting, cli, f"command line {label}")
    if setting.env and env.get(setting.env_var, "") != "":
        return _parse(setting, env[setting.env_var], f"environment variable {setting.env_var}")
    if setting.ini and ini not in (None, "", []):
        return _parse(setting, ini, f"{ini_source} option {setting.ini_key}")
    return setting.default


def check_marker_keys(kwargs: Mapping[str, Any], where: str) -> None:
    """Unknown keys in ``@pytest.mark.llmperf(...)`` are errors, not silently ignored."""
    allowed = MARKER_KEYS | {"configs", "gates"}
    unknown = sorted(set(kwargs) - allowed)
    if unknown:
        raise SettingError(
            f"{where}: unknown llmperf marker argument(s) {', '.join(unknown)}; "
            f"allowed: {', '.join(sorted(allowed))}"
        )
