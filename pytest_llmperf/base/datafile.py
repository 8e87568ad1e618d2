"""Reading the project's data files (suite, server configs, gates): TOML, YAML or JSON.

One loader, so every file gets the same errors: the path first, then what is wrong with it.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from pytest_llmperf.base.errors import InputError

SUFFIXES = (".toml", ".yaml", ".yml", ".json")


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
