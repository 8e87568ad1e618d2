"""ShareGPT dataset files: the format, its loader, and the content hash baseline keys record.

The shape is the one SGLang's ``bench_serving.sample_sharegpt_requests`` (and vLLM's
``ShareGPTDataset``) read: a JSON list (or JSON Lines, one object a line) of
``{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", "value": ...}, ...]}``.
bench_serving keeps entries with at least two turns and uses the first two values as prompt
and reply. We do the same, but name the roles: the prompt is the first ``human`` turn and the
reply the first ``gpt`` turn after it. Other fields of an entry (``id``, ...) are ignored.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pytest_llmperf.base.errors import InputError


class DatasetError(InputError):
    """A dataset file is missing or malformed; the message names the file and the entry."""


class _Turn(BaseModel):
    model_config = ConfigDict(extra="allow")

    from_: Literal["human", "gpt", "system", "user", "assistant"] = Field(alias="from")
    value: str


class _Entry(BaseModel):
    model_config = ConfigDict(extra="allow")

    conversations: list[_Turn]


@dataclass(frozen=True)
class DatasetEntry:
    """One usable entry: the prompt text and the reply text (for its length only)."""

    prompt: str
    reply: str


def _records(path: Path, raw: bytes) -> list[object]:
    if path.suffix == ".jsonl":
        out = []
        for n, line in enumerate(raw.splitlines(), 1):
            if line.strip():
                try:
                    out.append(orjson.loads(line))
                except orjson.JSONDecodeError as e:
                    raise DatasetError(f"{path}: line {n} is not JSON: {e}") from None
        return out
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise DatasetError(f"{path}: not JSON ({e}); JSON Lines files must end in .jsonl") from None
    if not isinstance(data, list):
        raise DatasetError(
            f"{path}: a ShareGPT file is a JSON list of entries, got a {type(data).__name__}"
        )
    return data


def _entry(path: Path, i: int, obj: object) -> DatasetEntry:
    try:
        entry = _Entry.model_validate(obj)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise DatasetError(f"{path}: entry {i}: field {where}: {err['msg']}") from None
    turns = entry.conversations
    human = next((k for k, t in enumerate(turns) if t.from_ in ("human", "user")), None)
    if human is None:
        raise DatasetError(f"{path}: entry {i}: field conversations has no 'human' turn")
    reply = next((t for t in turns[human + 1 :] if t.from_ in ("gpt", "assistant")), None)
    if reply is None:
        raise DatasetError(
            f"{path}: entry {i}: field conversations has no 'gpt' turn after the first 'human' one"
        )
    if not turns[human].value.strip():
        raise DatasetError(f"{path}: entry {i}: field conversations.{human}.value is empty")
    return DatasetEntry(prompt=turns[human].value, reply=reply.value)


def load_sharegpt(path: str | Path) -> list[DatasetEntry]:
    """Every entry of a ShareGPT ``.json`` / ``.jsonl`` file, in file order (read once per
    path, mtime and size: the workload checks it when made, each level reads it again)."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError as e:
        raise DatasetError(f"dataset file {p}: {e.strerror or e}") from None
    return list(_load(str(p), st.st_mtime_ns, st.st_size))


@lru_cache(maxsize=4)
def _load(path: str, mtime_ns: int, size: int) -> tuple[DatasetEntry, ...]:
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise DatasetError(f"dataset file {p}: {e.strerror or e}") from None
    entries = tuple(_entry(p, i, obj) for i, obj in enumerate(_records(p, raw)))
    if not entries:
        raise DatasetError(f"{p}: no entries")
    return entries


@lru_cache(maxsize=32)
def _digest(path: str, mtime_ns: int, size: int) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def content_hash(path: str | Path) -> str:
    """SHA-256 of the file's bytes (cached per path, mtime and size)."""
    p = Path(path)
    try:
        st = p.stat()
        return _digest(str(p.resolve()), st.st_mtime_ns, st.st_size)
    except OSError as e:
        raise DatasetError(f"dataset file {p}: {e.strerror or e}") from None
