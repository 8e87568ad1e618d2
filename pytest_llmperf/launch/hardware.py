"""GPU detection and the hardware key that baselines are stored under.

Numbers measured on one GPU class mean nothing on another, so baselines are keyed by what ran
them: ``"2xNVIDIA-H100-80GB-HBM3"``, or ``"sim-<profile>"`` for the simulator. The key is safe to
use in file names.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["GpuInfo", "detect_gpus", "hardware_key", "safe_key"]

_QUERY = "--query-gpu=index,uuid,name,memory.total,driver_version"


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as nvidia-smi reports it; ``index`` is nvidia-smi's (physical) index."""

    index: int
    uuid: str
    name: str
    memory_total_mib: int | None
    driver_version: str


def _parse_csv(text: str) -> list[GpuInfo]:
    gpus = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 5 or not parts[0].isdigit():
            continue
        mem = re.match(r"(\d+)", parts[3])
        gpus.append(
            GpuInfo(
                index=int(parts[0]),
                uuid=parts[1],
                name=parts[2],
                memory_total_mib=int(mem.group(1)) if mem else None,
                driver_version=parts[4],
            )
        )
    return gpus


def _filter_visible(gpus: list[GpuInfo], visible: str | None) -> list[GpuInfo]:
    """Apply CUDA's rules: listed order, stop at the first entry that matches nothing."""
    if visible is None:
        return gpus
    out: list[GpuInfo] = []
    for raw in visible.split(","):
        entry = raw.strip()
        match: GpuInfo | None = None
        if entry.lstrip("-").isdigit():
            match = next((g for g in gpus if g.index == int(entry)), None)
        elif entry:
            match = next((g for g in gpus if g.uuid.startswith(entry)), None)
        if match is None:
            break
        if match not in out:
            out.append(match)
    return out


def detect_gpus(
    *, env: Mapping[str, str] | None = None, timeout_s: float = 10.0, nvidia_smi: str | None = None
) -> list[GpuInfo]:
    """The GPUs this process would see (honouring ``CUDA_VISIBLE_DEVICES``); [] without
    nvidia-smi, or when it fails or hangs (a broken driver must not break the test session).
    """
    env = os.environ if env is None else env
    exe = nvidia_smi or shutil.which("nvidia-smi", path=env.get("PATH"))
    if exe is None:
        return []
    try:
        out = subprocess.run(
            [exe, _QUERY, "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    if out.returncode != 0:
        return []
    return _filter_visible(_parse_csv(out.stdout), env.get("CUDA_VISIBLE_DEVICES"))


def safe_key(text: str) -> str:
    """``text`` reduced to file-name-safe characters (letters, digits, ``.``, ``_``, ``-``)."""
    key = re.sub(r"[^A-Za-z0-9._-]+", "-", text.strip()).strip("-.")
    return key[:120] or "unknown"


def hardware_key(
    gpu_names: Sequence[str],
    count: int | None = None,
    sim_profile: str | None = None,
    *,
    override: str | None = None,
) -> str:
    """The baseline key for the hardware a server runs on.

    ``override`` (from the plugin's option) wins; a simulated server is ``sim-<profile>``;
    otherwise the first ``count`` GPUs, grouped by name: ``"2xNVIDIA-H100-80GB-HBM3"``.
    """
    if override:
        return safe_key(override)
    if sim_profile is not None:
        return safe_key(f"sim-{sim_profile}")
    names = list(gpu_names if count is None else gpu_names[:count])
    if count is not None and count > len(names) and names:
        # Asked for more GPUs than named: assume the rest are like the last one.
        names += [names[-1]] * (count - len(names))
    if not names:
        return "cpu"
    groups: dict[str, int] = {}
    for name in names:
        groups[name] = groups.get(name, 0) + 1
    # "+" between GPU kinds is file-name safe too; each part is already reduced.
    return "+".join(f"{n}x{safe_key(name)}" for name, n in groups.items())
