"""Reading the plugin's settings from pytest's config, and the progress line on a terminal."""

from __future__ import annotations

import os
import shlex
import sys
from typing import Any

import pytest

from pytest_llmperf.run.settings import SETTINGS, resolve


def resolve_settings(config: pytest.Config) -> dict[str, Any]:
    """Every setting from CLI > env > ini > default; ``_explicit`` names those given."""
    ini_source = f"ini file {config.inipath}" if config.inipath else "ini file"
    out: dict[str, Any] = {}
    explicit: set[str] = set()
    session: set[str] = set()  # given for this session only (flag or env), not the project's
    for s in SETTINGS:
        cli = config.getoption(s.dest, default=None) if s.cli else None
        ini = config.getini(s.ini_key) if s.ini else None
        out[s.name] = resolve(s.name, cli=cli, ini=ini, ini_source=ini_source)
        if cli not in (None, False) or os.environ.get(s.env_var):
            session.add(s.name)
        if s.name in session or ini not in (None, "", []):
            explicit.add(s.name)
    if out.get("rerecord"):
        out["update"] = True  # re-recording is an update that also rewrites passing entries
    out["_explicit"] = frozenset(explicit)
    out["_session_given"] = frozenset(session)
    return out


def progress_printer() -> Any:
    """A progress line on a terminal (never in CI logs or under xdist workers)."""
    stream = sys.__stderr__
    if stream is None or not stream.isatty() or os.environ.get("PYTEST_XDIST_WORKER"):
        return None

    def show(config: str, p: Any) -> None:
        if p.phase == "level-done":
            stream.write("\r\033[K")
        else:
            stream.write(
                f"\r\033[Kllmperf {config} C={p.concurrency}: {p.done}/{p.total} requests, "
                f"{p.tok_per_s:.0f} tok/s"
            )
        stream.flush()

    return show


def client_text(processes: int) -> str:
    """The header's client: how many processes read the streams, over what."""
    shards = (
        f"{processes} processes per closed-loop level (--llmperf-client-processes)"
        if processes > 1
        else "1 process (--llmperf-client-processes N shards a level over N)"
    )
    return f"{shards}, llhttp stream transport (http and https)"


def record_command(config: pytest.Config, nodeid: str) -> str:
    """This session's command narrowed to one test, with ``--llmperf-update``: the same
    URL, levels, lengths and baseline dir (a bare ``pytest ID --llmperf-update`` would
    record another workload or into another directory). An API key is never written out."""
    by_flag = {s.cli_flag: s for s in SETTINGS if s.cli}
    args = [str(a) for a in config.invocation_params.args]
    kept: list[str] = []
    i = 0
    while i < len(args):
        flag, eq, value = args[i].partition("=")
        setting = by_flag.get(flag)
        takes_value = setting is not None and not setting.flag
        if takes_value and not eq:
            value = args[i + 1] if i + 1 < len(args) else ""
            i += 1
        i += 1
        if setting is None or setting.name in ("update", "rerecord"):
            continue
        if not takes_value:
            kept.append(flag)
        elif setting.name == "api_key":
            kept += [flag, '"$LLMPERF_API_KEY"']
        else:
            kept += [flag, shlex.quote(value)]
    return " ".join(["pytest", shlex.quote(nodeid), *kept, "--llmperf-update"])
