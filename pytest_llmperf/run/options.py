"""How a run reaches and measures its servers: one frozen value built once from the resolved
settings (``RunOptions.from_settings``), and what each server's mode is decided from."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from pydantic import SecretStr

from pytest_llmperf.core.slo import Slo


@dataclass(frozen=True)
class RunOptions:
    """The settings a ``PerfRun`` works by; none changes during the run."""

    url: str | None = None  # --llmperf-url: one URL, or config=URL,...
    api_key: SecretStr | None = None  # masked in repr: a PerfRun lands in test reports
    simulate: bool = False
    require_real: bool = False
    sim_profile: str | None = None
    sim_args: str | None = None
    launch_timeout_s: float | None = None
    hardware_override: str | None = None
    details: bool = False
    scrape_metrics: bool = False
    client_processes: int = 1  # closed-loop levels sharded over this many client processes
    slo: Slo | None = None  # goodput is computed per level when set
    # "rerun": restart a launched/simulated server before a sample that must be independent
    # of the current launch's speed (``measure(fresh_launch=True)``); "never": reuse it.
    relaunch: str = "never"
    # What a check left inconclusive does to its test: "warn" (passes), "fail" or "exit" (skip).
    undecided: str = "warn"
    # GPU telemetry (launch/telemetry.py): "nvml" or "off", the sampling period, NVML's module
    gpu_telemetry: str = "nvml"
    gpu_telemetry_interval: float = 0.2
    nvml_module: str = "pynvml"
    probes: int = 32  # greedy consistency probes per launch (0: none); see run/probing.py
    probe_tokens: int = 16
    # every launch answers the probes, whether or not an entry holds answers (calibrate --record)
    probe_every_launch: bool = False

    @classmethod
    def from_settings(cls, s: Mapping[str, Any], slo: Slo | None = None) -> RunOptions:
        """From the session's resolved settings (``run/settings.py`` names)."""
        return cls(
            url=s["url"],
            api_key=s["api_key"],
            simulate=bool(s["simulate"]),
            require_real=bool(s["require_real"]),
            sim_profile=s["sim_profile"],
            sim_args=s["sim_args"],
            launch_timeout_s=s["launch_timeout"],
            hardware_override=s["hardware"],
            details=bool(s["details"]),
            scrape_metrics=bool(s["scrape_metrics"]),
            client_processes=int(s["client_processes"]),
            slo=slo,
            relaunch=s["relaunch"],
            undecided=s.get("undecided", "warn"),
            gpu_telemetry=s["gpu_telemetry"],
            gpu_telemetry_interval=float(s["gpu_telemetry_interval"]),
            nvml_module=s["nvml_module"],
            probes=int(s["probes"]),
            probe_tokens=int(s["probe_tokens"]),
            probe_every_launch=bool(s["probe_every_launch"]),
        )

    @classmethod
    def names(cls) -> frozenset[str]:
        return frozenset(f.name for f in fields(cls))


def parse_url_map(text: str | None) -> tuple[str | None, dict[str, str]]:
    """``--llmperf-url``: one URL for every config, or ``plain=URL,mtp=URL`` per config."""
    if not text:
        return None, {}
    if "=" not in text.split("://", 1)[0]:
        return text.rstrip("/"), {}
    out: dict[str, str] = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, url = part.partition("=")
        if not sep or not url.strip():
            raise ValueError(f"{part!r} is not config=URL (e.g. plain=http://127.0.0.1:30000)")
        out[name.strip()] = url.strip().rstrip("/")
    return None, out


def sim_args_for(text: str | None, config: str) -> list[str]:
    """Extra simulator flags for ``config`` from ``--llmperf-sim-args``.

    ``"--sim-jitter 0.03"`` applies to every server; ``"mtp: --max-running-requests 40"``
    only to ``mtp``; several parts are separated by ``;``. This is how a suite injects an
    "upgrade" or a fault into one config of the simulated run.
    """
    out: list[str] = []
    for part in (text or "").split(";"):
        part = part.strip()
        if not part:
            continue
        head, sep, rest = part.partition(":")
        if sep and not head.strip().startswith("-") and " " not in head.strip():
            if head.strip() != config:
                continue
            part = rest
        out += shlex.split(part)
    return out
