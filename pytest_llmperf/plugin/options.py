"""Reading the plugin's settings from pytest's config, and the progress line on a terminal."""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from pytest_llmperf.run.settings import (
    SETTINGS,
    Resolved,
    check_not_given_elsewhere,
    resolve_from,
)


@dataclass(frozen=True)
class SettingSources:
    """What this session was given on the command line, in the environment and the ini file,
    raw; ``resolve`` adds a test's marker and its suite's ``[sweep]`` and parses."""

    cli: dict[str, Any]
    environ: dict[str, str]
    ini: dict[str, Any]
    ini_source: str

    @classmethod
    def empty(cls) -> SettingSources:
        """Nothing given: every setting at its suite value or default."""
        return cls(cli={}, environ={}, ini={}, ini_source="ini file")

    @classmethod
    def from_config(cls, config: pytest.Config) -> SettingSources:
        ini_source = f"ini file {config.inipath}" if config.inipath else "ini file"
        cli = {s.name: config.getoption(s.dest, default=None) for s in SETTINGS}
        # An ini key of a suite setting is not registered: pytest itself warns about it as an
        # unknown option (an error under --strict-config).
        ini = {s.name: config.getini(s.ini_key) for s in SETTINGS if s.ini}
        return cls(cli=cli, environ=dict(os.environ), ini=ini, ini_source=ini_source)

    def resolve(
        self,
        name: str,
        marker: Mapping[str, Any] | None = None,
        marker_source: str = "marker @pytest.mark.llmperf",
        suite: Mapping[str, Any] | None = None,
        suite_source: str = "llmperf.toml",
    ) -> Resolved:
        return resolve_from(
            name,
            marker=marker,
            marker_source=marker_source,
            cli=self.cli.get(name),
            environ=self.environ,
            ini=self.ini.get(name),
            ini_source=self.ini_source,
            suite=suite,
            suite_source=suite_source,
        )


def resolve_settings(sources: SettingSources) -> dict[str, Any]:
    """The session's settings from CLI > env > ini > default (a suite setting not given on
    the command line is an error naming where it goes now)."""
    check_not_given_elsewhere(sources.cli, sources.environ)
    out = {s.name: sources.resolve(s.name).value for s in SETTINGS if s.cli or s.env or s.ini}
    if out.get("rerecord"):
        out["update"] = True  # re-recording is an update that also rewrites passing entries
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
