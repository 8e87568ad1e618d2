"""Value parsers shared by the pytest settings, the suite file and the ``llmperf`` CLI.

One parser per kind of value, so ``--llmperf-levels=0``, ``levels = [0]`` in llmperf.toml and
``llmperf sweep -c 0`` all say the same thing. Each raises ``ValueError`` with a message that
the caller prefixes with where the value came from.
"""

from __future__ import annotations

import argparse
import functools
import math
from collections.abc import Callable, Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, SecretStr

from pytest_llmperf.base.metric_defs import METRICS


def parse_int(text: str) -> int:
    try:
        return int(str(text).strip())
    except ValueError:
        raise ValueError(f"{text!r} is not a whole number") from None


def parse_positive_int(text: Any) -> int:
    value = text if isinstance(text, int) and not isinstance(text, bool) else parse_int(str(text))
    if value <= 0:
        raise ValueError(f"must be a positive whole number, got {value}")
    return value


# Upper bounds of what a run can mean. Above them a typo (one zero too many) would build
# prompts until memory runs out instead of failing at once with the field named.
MAX_CONCURRENCY = 65_536  # requests in flight at one level
MAX_REQUESTS = 1_000_000  # requests per level
MAX_TOKENS_PER_REQUEST = 4_194_304  # prompt or output tokens of one request (4 Mi)


def _at_most(limit: int, what: str) -> Callable[[Any], int]:
    def parse(text: Any) -> int:
        value = parse_positive_int(text)
        if value > limit:
            raise ValueError(f"{value} is more {what} than this tool supports (at most {limit:,})")
        return value

    return parse


parse_token_count = _at_most(MAX_TOKENS_PER_REQUEST, "tokens per request")
parse_request_count = _at_most(MAX_REQUESTS, "requests per level")

# A stream with no new event for this long has stalled (base/results.py Workload.idle_timeout_s).
# Below the floor the watchdog (which looks a quarter of it apart) would spin; above the
# ceiling the per-request deadline decides anyway.
DEFAULT_IDLE_TIMEOUT_S = 60.0
MIN_IDLE_TIMEOUT_S = 0.1
MAX_IDLE_TIMEOUT_S = 86_400.0
# Multi-turn conversations: each turn re-sends the whole history, so the prompt grows with
# every turn; past 64 turns a typo would build prompts of millions of tokens.
MIN_TURNS, MAX_TURNS = 2, 64
MAX_THINK_TIME_S = 60.0  # the most a conversation pauses between turns

# The client-validity limits' defaults (verdicts/validity.py, core/monitor.py, the settings):
# above them the load generator, not the server, set the pace.
LOOP_LAG_P99_LIMIT_MS = 10.0  # event-loop lag p99: token timestamps are off by about as much
CPU_PERCENT_LIMIT = 90.0  # of one core: a single-threaded event loop has no headroom left
COALESCED_ITL_SHARE_LIMIT = 0.5  # share of ITL gaps read in one network read


def parse_turns(text: Any) -> int:
    """Turns per multi-turn conversation: a whole number from 2 to 64."""
    value = parse_positive_int(text)
    if not MIN_TURNS <= value <= MAX_TURNS:
        raise ValueError(
            f"turns per conversation must be from {MIN_TURNS} to {MAX_TURNS}, got {value}"
        )
    return value


def parse_nonneg_int(text: Any) -> int:
    value = text if isinstance(text, int) and not isinstance(text, bool) else parse_int(str(text))
    if value < 0:
        raise ValueError(f"must be zero or more, got {value}")
    return value


def parse_float(text: Any) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not a finite number")
    return value


def parse_positive_float(text: Any) -> float:
    value = parse_float(text)
    if value <= 0:
        raise ValueError(f"must be greater than 0, got {value:g}")
    return value


def parse_idle_timeout(text: Any) -> float:
    """Seconds a stream may go without an event, within [MIN_IDLE_TIMEOUT_S, MAX_IDLE_TIMEOUT_S]."""
    value = parse_float(text)
    if not MIN_IDLE_TIMEOUT_S <= value <= MAX_IDLE_TIMEOUT_S:
        raise ValueError(
            f"must be between {MIN_IDLE_TIMEOUT_S:g} and {MAX_IDLE_TIMEOUT_S:g} seconds, "
            f"got {value:g}"
        )
    return value


def parse_unit_float(text: Any) -> float:
    """A number in [0, 1] (a range ratio)."""
    value = parse_float(text)
    if not 0 <= value <= 1:
        raise ValueError(f"must be between 0 and 1, got {value:g}")
    return value


def parse_nonneg_float(text: Any) -> float:
    value = parse_float(text)
    if value < 0:
        raise ValueError(f"must be 0 or more, got {value:g}")
    return value


def parse_think_time(text: Any) -> float:
    """Seconds a conversation may pause between turns: 0 to 60."""
    value = parse_nonneg_float(text)
    if value > MAX_THINK_TIME_S:
        raise ValueError(f"must be at most {MAX_THINK_TIME_S:g} seconds, got {value:g}")
    return value


def parse_bool(text: Any) -> bool:
    if isinstance(text, bool):
        return text
    lowered = str(text).strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"{text!r} is not a boolean (use true/false)")


def parse_str(text: Any) -> str:
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
            level = parse_positive_int(item)
        except ValueError:
            raise ValueError(
                f"concurrency level {item!r} is not a positive whole number (e.g. 1,4,16)"
            ) from None
        if level > MAX_CONCURRENCY:
            raise ValueError(
                f"concurrency level {level} is more requests in flight than this tool supports "
                f"(at most {MAX_CONCURRENCY:,})"
            )
        if level not in levels:
            levels.append(level)
    return tuple(levels)


def parse_fraction(text: Any) -> float:
    """A tolerance: a fraction in (0, 1); ``"5%"`` is accepted and means 0.05."""
    raw = str(text).strip()
    value = parse_float(raw[:-1]) / 100 if raw.endswith("%") else parse_float(raw)
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


def parse_choice(*choices: str) -> Callable[[Any], str]:
    def parse(text: Any) -> str:
        value = str(text).strip()
        if value not in choices:
            raise ValueError(f"{value!r} is not one of {', '.join(choices)}")
        return value

    return parse


def parse_secret(text: Any) -> SecretStr:
    """A secret (an API key): kept in a ``SecretStr`` whose repr and str are masked, so it
    never reaches a test report, a JUnit file or a traceback's locals."""
    value = text.get_secret_value() if isinstance(text, SecretStr) else str(text).strip()
    if not value:
        raise ValueError("must not be empty")
    bad = sorted({f"U+{ord(c):04X}" for c in value if ord(c) < 0x20 or ord(c) == 0x7F})
    if bad:  # an HTTP header cannot carry it: every request would fail as "unreachable"
        raise ValueError(
            f"contains control character(s) {', '.join(bad)} (a pasted line break?); "
            "the value itself is not shown"
        )
    return SecretStr(value)


def parse_history(text: Any) -> SecretStr | None:
    """The history store: ``off`` (None), ``default`` (the SQLite file under the rootdir), a
    file path or a database URL. Kept in a ``SecretStr``: a URL may carry a password, which
    must not reach a report, a traceback's locals or a settings dump."""
    value = text.get_secret_value() if isinstance(text, SecretStr) else str(text).strip()
    if value.lower() in ("", "off", "false", "no", "0"):
        return None
    return SecretStr(value)


def reveal(secret: SecretStr | str | None) -> str | None:
    """The plain value, for the one place that needs it (an Authorization header)."""
    return secret.get_secret_value() if isinstance(secret, SecretStr) else secret


def argparse_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """One of these parsers as an argparse ``type=``: a bad value exits 2 with the parser's own
    message after the flag's name (argparse would print only "invalid parse_... value")."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = parse.__name__.removeprefix("parse_")
    return convert


def parse_slack(text: Any) -> float:
    """A slack: 0 (exact) or a fraction in (0, 1) like a tolerance (``"1%"``)."""
    return 0.0 if str(text).strip() in ("0", "0%", "0.0") else parse_fraction(text)


def check_metric(name: str) -> str:
    """A metric name from ``metric_defs``; the error lists the known ones."""
    if name not in METRICS:
        raise ValueError(f"unknown metric {name!r}; known metrics: {', '.join(sorted(METRICS))}")
    return name


def optional(parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``parse`` for a field that may also be None (unset); ``__wrapped__`` is ``parse``, so a
    test can check that a model field and a setting use the same parser."""

    @functools.wraps(parse)
    def check(value: Any) -> Any:
        return None if value is None else parse(value)

    return check


def parser_of(model: type[Any], name: str) -> Callable[[Any], Any] | None:
    """The parser a pydantic model's field runs first (its ``BeforeValidator``), unwrapped."""
    for meta in model.model_fields[name].metadata:
        if isinstance(meta, BeforeValidator):
            func: Callable[[Any], Any] = meta.func  # type: ignore[assignment]
            return getattr(func, "__wrapped__", func)
    return None


# Field types for the file formats (pydantic), so each file checks a value the same way.
MetricName = Annotated[str, AfterValidator(check_metric)]
LevelsField = Annotated[
    tuple[int, ...] | None, BeforeValidator(lambda v: None if v is None else parse_levels(v))
]
