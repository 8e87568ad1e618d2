"""Every setting of the plugin, resolved marker > CLI > env > ini > default in one place.

Modelled on pytest-timeout: each value is parsed and validated where it comes from, and a bad
value is an error that names its source (the flag, the environment variable, the ini key or
the marker), so a user never has to guess which of five places holds the typo.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_llmperf.base.metric_defs import METRICS


class SettingError(ValueError):
    """A setting has a bad value; the message names where it came from."""


def _int(text: str) -> int:
    try:
        return int(str(text).strip())
    except ValueError:
        raise ValueError(f"{text!r} is not a whole number") from None


def _positive_int(text: Any) -> int:
    value = text if isinstance(text, int) and not isinstance(text, bool) else _int(str(text))
    if value <= 0:
        raise ValueError(f"must be a positive whole number, got {value}")
    return value


def _nonneg_int(text: Any) -> int:
    value = text if isinstance(text, int) and not isinstance(text, bool) else _int(str(text))
    if value < 0:
        raise ValueError(f"must be zero or more, got {value}")
    return value


def _float(text: Any) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not a finite number")
    return value


def _positive_float(text: Any) -> float:
    value = _float(text)
    if value <= 0:
        raise ValueError(f"must be greater than 0, got {value:g}")
    return value


def _bool(text: Any) -> bool:
    if isinstance(text, bool):
        return text
    lowered = str(text).strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"{text!r} is not a boolean (use true/false)")


def _str(text: Any) -> str:
    value = str(text).strip()
    if not value:
        raise ValueError("must not be empty")
    return value


def parse_levels(text: Any) -> tuple[int, ...]:
    """``"1,4,16"`` or ``[1, 4, 16]`` → ``(1, 4, 16)``; every level a positive integer."""
    items: list[Any]
    if isinstance(text, (list, tuple)):
        items = list(text)
    else:
        items = [part for part in str(text).replace(" ", "").split(",") if part]
    if not items:
        raise ValueError("the list of concurrency levels is empty")
    levels: list[int] = []
    for item in items:
        try:
            level = _positive_int(item)
        except ValueError:
            raise ValueError(
                f"concurrency level {item!r} is not a positive whole number (e.g. 1,4,16)"
            ) from None
        if level not in levels:
            levels.append(level)
    return tuple(levels)


def parse_fraction(text: Any) -> float:
    """A tolerance: a fraction in (0, 1); ``"5%"`` is accepted and means 0.05."""
    raw = str(text).strip()
    value = _float(raw[:-1]) / 100 if raw.endswith("%") else _float(raw)
    if not 0 < value < 1:
        raise ValueError(
            f"a tolerance must be between 0 and 1 (exclusive), e.g. 0.05 or 5%, got {raw}"
        )
    return value


def parse_tolerances(text: Any) -> dict[str, float]:
    """``"output_throughput=5%,median_ttft_ms=0.1"`` or a dict → ``{metric: fraction}``."""
    pairs: list[tuple[str, Any]]
    if isinstance(text, Mapping):
        pairs = list(text.items())
    else:
        pairs = []
        for part in str(text).split(","):
            part = part.strip()
            if not part:
                continue
            if "=" not in part:
                raise ValueError(f"{part!r} is not metric=tolerance (e.g. output_throughput=5%)")
            name, value = part.split("=", 1)
            pairs.append((name.strip(), value.strip()))
    out: dict[str, float] = {}
    for name, value in pairs:
        if name != "*" and name not in METRICS:
            raise ValueError(
                f"unknown metric {name!r}; known metrics: {', '.join(sorted(METRICS))}"
            )
        try:
            out[name] = parse_fraction(value)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
    return out


def parse_metrics(text: Any) -> tuple[str, ...]:
    """A list of metric names, each checked against ``metric_defs``."""
    items = list(text) if isinstance(text, (list, tuple)) else str(text).replace(" ", "").split(",")
    names = tuple(item for item in (str(i).strip() for i in items) if item)
    if not names:
        raise ValueError("the list of metrics is empty")
    for name in names:
        if name not in METRICS:
            raise ValueError(
                f"unknown metric {name!r}; known metrics: {', '.join(sorted(METRICS))}"
            )
    return names


def _choice(*choices: str) -> Callable[[Any], str]:
    def parse(text: Any) -> str:
        value = str(text).strip()
        if value not in choices:
            raise ValueError(f"{value!r} is not one of {', '.join(choices)}")
        return value

    return parse


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
        _str,
        None,
        "suite file declaring servers, sweep and gates (default: nearest llmperf.toml)",
    ),
    Setting(
        "url", _str, None, "attach to a running SGLang server at this URL instead of launching one"
    ),
    Setting(
        "api_key",
        _str,
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
    Setting("input_len", _positive_int, 1000, "prompt tokens per request", marker=True),
    Setting(
        "output_len", _positive_int, 1000, "output tokens per request (ignore_eos)", marker=True
    ),
    Setting(
        "requests",
        _positive_int,
        None,
        "requests per level (default: 4 at C=1, 2*C above)",
        marker=True,
    ),
    Setting(
        "backend",
        _choice("sglang", "openai", "openai-chat"),
        "sglang",
        "API to load: sglang (/generate), openai, openai-chat",
        marker=True,
    ),
    Setting("seed", _int, 0, "seed of the deterministic prompts", marker=True),
    Setting(
        "request_timeout",
        _positive_float,
        600.0,
        "total deadline of one request, seconds",
        marker=True,
    ),
    Setting(
        "request_rate",
        _positive_float,
        None,
        "open-loop Poisson arrivals in req/s, each level capping requests in flight at C "
        "(default: closed loop, exactly C in flight)",
        marker=True,
    ),
    Setting(
        "repeat", _positive_int, 1, "measure each point N times (noise-aware verdicts)", marker=True
    ),
    Setting(
        "max_reruns",
        _nonneg_int,
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
        _str,
        "baselines",
        "directory of baseline JSON files (relative to the rootdir)",
    ),
    Setting(
        "hardware",
        _str,
        None,
        "hardware key for baselines (default: detected GPUs, or sim-<profile>)",
    ),
    Setting(
        "update", _bool, False, "record new or changed baselines and delete unused ones", flag=True
    ),
    Setting("warn_unused", _bool, False, "only warn about unused baseline entries", flag=True),
    Setting(
        "require_real",
        _bool,
        False,
        "refuse to fall back to the simulated server (GPU CI)",
        flag=True,
    ),
    Setting(
        "simulate",
        _bool,
        False,
        "always launch the simulated server, even if SGLang is installed",
        flag=True,
    ),
    Setting("sim_profile", _str, None, "simulator profile for every server (overrides the suite)"),
    Setting(
        "sim_args",
        _str,
        None,
        "extra flags for simulated servers, e.g. '--sim-jitter 0.03' (all) or "
        "'mtp: --max-running-requests 40' (one config); parts separated by ';'",
    ),
    Setting(
        "launch_timeout",
        _positive_float,
        None,
        "seconds a launched server has to become healthy (default 600)",
    ),
    Setting("output_dir", _str, "llmperf-results", "where results JSON, server logs and plots go"),
    Setting(
        "invalid",
        _choice("fail", "skip"),
        "fail",
        "what an invalid measurement (client saturated, lengths off, failed requests) does to "
        "its test: fail (default, like llmperf compare) or skip",
    ),
    Setting(
        "plots", _bool, False, "write PNG plots to the output dir (needs matplotlib)", flag=True
    ),
    Setting("details", _bool, False, "keep per-request details in the results JSON", flag=True),
    Setting(
        "scrape_metrics", _bool, False, "scrape the server's /metrics during each level", flag=True
    ),
    # Validity thresholds (verdicts/validity.py ValidityPolicy); defaults are its constants.
    Setting(
        "max_failed",
        _nonneg_int,
        0,
        "failed requests a level may have and still be judged",
        marker=True,
    ),
    Setting(
        "length_slack",
        lambda text: 0.0 if str(text).strip() in ("0", "0%", "0.0") else parse_fraction(text),
        0.0,
        "relative slack on delivered vs requested token totals, e.g. 1% (default 0: exact)",
        marker=True,
    ),
    Setting(
        "max_cached_tokens",
        _nonneg_int,
        0,
        "prompt tokens per request the server may serve from its prefix cache (chat templates "
        "are allowed on top)",
        marker=True,
    ),
    Setting(
        "loop_lag_limit",
        _positive_float,
        10.0,
        "client event-loop lag p99 in ms above which a level is invalid (client saturated)",
    ),
    Setting(
        "cpu_limit",
        _positive_float,
        90.0,
        "client CPU in % of one core above which a level is invalid (client saturated)",
    ),
    Setting(
        "openai_extensions",
        _bool,
        True,
        "send the non-standard OpenAI-API fields ignore_eos and continuous_usage_stats "
        "(on/off; turn off for strict servers that answer 400/422 to them)",
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
