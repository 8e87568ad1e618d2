"""The output directory must be one a run can create files under.

Server logs go under it when a server starts, long before any report, so a path that is an
existing file (or lies under one) would otherwise fail every test of the session with the same
``NotADirectoryError``; checked once when the session starts instead.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["output_dir_problem"]


def output_dir_problem(path: Path, flag: str) -> str | None:
    """Why ``path`` cannot be the output directory (None when it can, or can be created)."""
    for p in (path, *path.parents):  # bounded: the path's own ancestors
        if not p.exists():
            continue
        if p.is_dir():
            return None
        where = "is an existing file" if p == path else f"lies under {p}, an existing file"
        return (
            f"{flag} {path} {where}, not a directory: server logs and reports go under it; "
            f"remove the file or pass another {flag}"
        )
    return None
