"""Server configs: a server declared as data (name, model, verbatim launch flags, env, GPUs).

Suites declare servers in TOML or YAML files shaped like::

    [[server]]
    name = "plain"
    model = "meta-llama/Llama-3.1-8B-Instruct"
    args = ["--tp", "2"]
    env = { SGLANG_FOO = "1" }
    gpus = 2

A server that is not SGLang gives its own ``command`` (an argv list; ``{port}``, ``{host}`` and
``{model}`` are substituted) and optionally the ``health`` path to wait for::

A server can run SGLang from another environment (an upgrade next to the current release, for
a same-job A/B): ``python`` is the interpreter that runs ``-m sglang.launch_server`` instead of
the one running pytest. Such a config counts as launchable even where this interpreter has no
SGLang; a simulated run (``--llmperf-simulate``) ignores ``python`` (the simulator is this
package, run by the current interpreter)::

    [[server]]
    name = "new"
    model = "meta-llama/Llama-3.1-8B-Instruct"
    python = "/opt/sglang-new/bin/python"

    [[server]]
    name = "llama"
    model = "small"
    command = ["llama-server", "-m", "model.gguf", "--host", "{host}", "--port", "{port}"]
    health = "/health"

``load_server_configs`` reads such a file; ``server_configs_from_data`` takes the same shape as
Python data. Every error names the file and the field, one line each, so a bad config reads like
a lint message instead of a pydantic traceback.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from pytest_llmperf.base.datafile import DataFileError, load_data_file
from pytest_llmperf.base.errors import InputError

__all__ = [
    "PLACEHOLDERS",
    "ConfigError",
    "ServerConfig",
    "load_server_configs",
    "server_configs_from_data",
]


class ConfigError(InputError):
    """A server config file (or dict) is invalid; ``errors`` holds one line per problem."""

    def __init__(self, errors: Sequence[str]) -> None:
        self.errors = list(errors)
        super().__init__("\n".join(self.errors))


class ServerConfig(BaseModel):
    """One server to launch (or the simulator to launch in its place).

    ``args`` go to ``python -m sglang.launch_server`` verbatim, because SGLang's flags drift
    between releases; the plugin adds only ``--model-path``, ``--host`` and ``--port``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=64)
    model: str = Field(min_length=1)
    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    # GPUs one server uses; None: inferred from the parallelism flags in ``args`` (gpus.py).
    gpus: int | None = Field(default=None, ge=0)
    launch_timeout_s: float = Field(default=600.0, gt=0)
    # Which simulator profile stands in for this server when no GPU/SGLang is available.
    sim_profile: str | None = None
    # Flags only the simulated stand-in gets (after ``args``), e.g. a --stream-interval that
    # keeps a laptop's client light; a real launch never sees them.
    sim_args: tuple[str, ...] = ()
    # A server that is not ``sglang.launch_server``: its argv, with {port}, {host}, {model}.
    command: tuple[str, ...] | None = None
    # The path that answers 200 once the server is ready (default: the first of
    # /health_generate, /health, /v1/models that exists).
    health: str | None = None
    # The interpreter that runs ``-m sglang.launch_server`` (default: the one running pytest).
    python: str | None = Field(default=None, min_length=1)

    @field_validator("python")
    @classmethod
    def _python_path(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or "\n" in value):
            raise ValueError(
                f"{value!r} is not an interpreter path; give one like /opt/venv/bin/python"
            )
        return value

    @field_validator("health")
    @classmethod
    def _health_path(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"/[^\s?#]*", value):
            raise ValueError(f"{value!r} is not a path; give one like '/health'")
        return value

    @field_validator("command")
    @classmethod
    def _command_shape(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is None:
            return value
        if not value or not value[0].strip():
            raise ValueError("must be a non-empty list: the program, then its arguments")
        unknown = sorted(
            {m for part in value for m in re.findall(r"\{(\w*)\}", part)} - set(PLACEHOLDERS)
        )
        if unknown:
            raise ValueError(
                f"unknown placeholder(s) {', '.join('{' + u + '}' for u in unknown)};"
                f" use {', '.join('{' + p + '}' for p in PLACEHOLDERS)}"
            )
        if not any("{port}" in part for part in value):
            raise ValueError("must contain {port}: the launcher picks a free port for each run")
        return value

    @model_validator(mode="after")
    def _command_or_args(self) -> ServerConfig:
        if self.command is not None and self.args:
            raise ValueError(
                "args: go to sglang.launch_server and are not used with 'command';"
                " put the flags in 'command'"
            )
        if self.python is not None and self.command is not None:
            raise ValueError(
                "python: only used to run sglang.launch_server; a 'command' names its own program"
            )
        if self.health is not None and self.command is None:
            raise ValueError("health: only used with 'command' (SGLang's is /health_generate)")
        return self

    def launch_argv(self, *, host: str, port: int) -> list[str]:
        """``command`` with its placeholders filled in (only for command servers)."""
        values = {"port": str(port), "host": host, "model": self.model}
        out = []
        for part in self.command or ():
            for key, value in values.items():
                part = part.replace("{" + key + "}", value)
            out.append(part)
        return out

    @field_validator("name", mode="before")
    @classmethod
    def _no_path_separator(cls, value: Any) -> Any:
        # The name becomes part of log and baseline file names; say so instead of a bare regex.
        if isinstance(value, str) and ("/" in value or "\\" in value):
            raise ValueError(
                f"{value!r} contains a path separator; a config name is used in file names,"
                " use letters, digits, '_', '.' or '-'"
            )
        return value


PLACEHOLDERS = ("port", "host", "model")
_TOP_LEVEL_KEYS = {"server"}


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def server_configs_from_data(data: Any, *, source: str = "<data>") -> list[ServerConfig]:
    """Build configs from ``{"server": [{...}, ...]}`` (or a bare list of server dicts).

    ``source`` is how errors name where the data came from (a file path, or ``<data>``).
    """
    if isinstance(data, Mapping):
        unknown = sorted(str(k) for k in data if k not in _TOP_LEVEL_KEYS)
        if unknown:
            raise ConfigError(
                [f"{source}: unknown top-level key(s) {', '.join(unknown)}; expected 'server'"]
            )
        entries = data.get("server")
        if entries is None:
            raise ConfigError([f"{source}: no 'server' entries (expected [[server]] tables)"])
    elif isinstance(data, Sequence) and not isinstance(data, str | bytes):
        entries = data
    else:
        raise ConfigError(
            [f"{source}: expected a table with 'server' entries, got {type(data).__name__}"]
        )
    if isinstance(entries, Mapping):
        entries = [entries]  # a single [server] table
    if not isinstance(entries, Sequence) or isinstance(entries, str | bytes):
        raise ConfigError([f"{source}: server: expected a list of tables"])

    errors: list[str] = []
    configs: list[ServerConfig] = []
    first_index: dict[str, int] = {}
    for i, entry in enumerate(entries):
        where = f"{source}: server[{i}]"
        if not isinstance(entry, Mapping):
            errors.append(f"{where}: expected a table, got {type(entry).__name__}")
            continue
        try:
            config = ServerConfig.model_validate(dict(entry))
        except ValidationError as exc:
            for err in exc.errors():
                field = _loc(tuple(err["loc"]))
                # Files say "list" where the model says "tuple".
                msg = err["msg"].removeprefix("Value error, ").replace("valid tuple", "valid list")
                errors.append(f"{where}.{field}: {msg}" if field else f"{where}: {msg}")
            continue
        if config.name in first_index:
            errors.append(
                f"{where}.name: duplicate name {config.name!r}"
                f" (already used by server[{first_index[config.name]}])"
            )
            continue
        first_index[config.name] = i
        configs.append(config)
    if errors:
        raise ConfigError(errors)
    return configs


def load_server_configs(path: str | Path) -> list[ServerConfig]:
    """Read server configs from a ``.toml``, ``.yaml`` or ``.yml`` file."""
    source = str(path)
    try:
        data = load_data_file(path, "server config file")
    except DataFileError as exc:
        raise ConfigError([str(exc)]) from None
    return server_configs_from_data(data, source=source)
