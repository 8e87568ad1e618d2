"""Reading the project's data files (suite, server configs, gates): TOML, YAML or JSON.

One loader, so every file gets the same errors: the path first, then what is wrong with it.
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from pytest_llmperf.base.errors import InputError, LLMPerfError

SUFFIXES = (".toml", ".yaml", ".yml", ".json")
M = TypeVar("M", bound=BaseModel)


class DataFileError(InputError):
    """A data file could not be read or parsed; the message starts with its path."""


def load_data_file(path: str | Path, what: str = "file") -> Any:
    """Parse ``path`` by its suffix; ``what`` names the file's role in a read error."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise DataFileError(f"{p}: cannot read the {what}: {exc.strerror or exc}") from None
    suffix = p.suffix.lower()
    data: Any
    if suffix in (".yaml", ".yml"):
        import yaml

        try:
            data = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise DataFileError(f"{p}: invalid YAML: {' '.join(str(exc).split())}") from None
    elif suffix in (".toml", ".json"):
        try:
            text = raw.decode("utf-8")
            data = tomllib.loads(text) if suffix == ".toml" else json.loads(text)
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise DataFileError(f"{p}: invalid TOML: {exc}") from None
        except json.JSONDecodeError as exc:
            raise DataFileError(f"{p}: invalid JSON: {exc}") from None
    else:
        raise DataFileError(f"{p}: unsupported {what} type {suffix!r}; use {', '.join(SUFFIXES)}")
    if data is None:
        raise DataFileError(f"{p}: the file is empty")
    return data


def load_model_file(
    path: str | os.PathLike[str],
    model: type[M],
    what: str,
    fix_hint: str,
    error: type[LLMPerfError],
) -> M:
    """A JSON file the plugin wrote (``model``, e.g. a baseline or results file), validated; an
    ``error`` naming the path, every bad field and ``fix_hint`` (how to get a good file back)."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise error(f"{p}: cannot read {what}: {exc.strerror}") from None
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        lines = [f"{p}: {what} is invalid ({exc.error_count()} error(s)); {fix_hint}:"]
        for e in exc.errors(include_url=False, include_input=False):
            loc = ".".join(str(x) for x in e["loc"]) or "<root>"
            lines.append(f"  - {loc}: {e['msg']} [{e['type']}]")
        raise error("\n".join(lines)) from None
