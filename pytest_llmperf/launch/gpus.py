"""GPU and port slicing for pytest-xdist workers: pure functions, no environment side effects.

Each worker launching its own server must get its own GPUs (two servers on one GPU corrupt each
other's numbers) and its own port range (like SGLang CI's one-port-range-per-GPU). GPU ids here
are *logical* indices among the GPUs this process sees; the launcher maps them through an
inherited ``CUDA_VISIBLE_DEVICES`` (see ``visible_devices_value``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from pytest_llmperf.base.errors import InputError

__all__ = [
    "GpuSliceError",
    "gpu_ids_for_worker",
    "port_base_for_worker",
    "port_range_for_worker",
    "visible_devices_value",
    "worker_count",
    "worker_index",
    "workers_share_gpus",
]

PORT_BASE = 20000
PORT_STRIDE = 1000


class GpuSliceError(InputError):
    """A config needs more GPUs than this machine (or this process) can see."""


def worker_index(env: Mapping[str, str]) -> int | None:
    """The xdist worker index from ``PYTEST_XDIST_WORKER`` (``"gw3"`` → 3); None outside xdist."""
    raw = env.get("PYTEST_XDIST_WORKER")
    if not raw:
        return None
    match = re.fullmatch(r"gw(\d+)", raw.strip())
    if match is None:
        raise ValueError(f"PYTEST_XDIST_WORKER={raw!r} is not of the form gwN")
    return int(match.group(1))


def worker_count(env: Mapping[str, str]) -> int:
    """The number of xdist workers from ``PYTEST_XDIST_WORKER_COUNT`` (1 outside xdist)."""
    raw = env.get("PYTEST_XDIST_WORKER_COUNT")
    if not raw:
        return 1
    try:
        count = int(raw)
    except ValueError:
        raise ValueError(f"PYTEST_XDIST_WORKER_COUNT={raw!r} is not an integer") from None
    return max(count, 1)


def gpu_ids_for_worker(
    index: int | None,
    count: int,
    total_gpus: int,
    gpus_per_server: int,
    *,
    simulate: bool = False,
) -> list[int]:
    """The logical GPU ids a worker's server should use.

    Worker ``i`` gets slot ``i mod slots`` where ``slots = total_gpus // gpus_per_server``, i.e.
    GPUs ``[s*g, (s+1)*g)``; with more workers than slots, workers share slots (see
    ``workers_share_gpus``). When simulating there may be no GPU at all, so each worker gets
    distinct notional ids (as if there were ``count * g`` GPUs) for the simulator to report.
    """
    i = 0 if index is None else index
    if i < 0 or gpus_per_server < 0:
        raise ValueError("worker index and gpus_per_server must be >= 0")
    g = gpus_per_server
    if g == 0:
        return []
    if simulate:
        total_gpus = max(total_gpus, max(count, i + 1) * g)
    if g > total_gpus:
        raise GpuSliceError(
            f"the config needs {g} GPU(s) but only {total_gpus} are visible"
            " (check CUDA_VISIBLE_DEVICES and nvidia-smi)"
        )
    slot = i % (total_gpus // g)
    return list(range(slot * g, (slot + 1) * g))


def workers_share_gpus(count: int, total_gpus: int, gpus_per_server: int) -> bool:
    """Whether ``count`` workers cannot each get their own GPUs (their numbers would interfere)."""
    if gpus_per_server <= 0 or count <= 1:
        return False
    return count > total_gpus // gpus_per_server


def port_base_for_worker(
    index: int | None, *, base: int = PORT_BASE, stride: int = PORT_STRIDE
) -> int:
    """First port of a worker's range: ``base + stride * index`` (0 outside xdist)."""
    return base + stride * (0 if index is None else index)


def port_range_for_worker(
    index: int | None, *, base: int = PORT_BASE, stride: int = PORT_STRIDE
) -> tuple[int, int]:
    """``[start, stop)`` ports reserved for a worker; wraps below 65536 for large indices."""
    slots = max((65536 - base) // stride, 1)
    start = port_base_for_worker((0 if index is None else index) % slots, base=base, stride=stride)
    return start, start + stride


def visible_devices_value(gpu_ids: list[int], inherited: str | None) -> str:
    """``CUDA_VISIBLE_DEVICES`` for logical ``gpu_ids`` given the inherited value (if any).

    With ``inherited="4,5,6,7"``, logical ``[1, 2]`` is ``"5,6"``: the ids index what this
    process already sees, as CUDA itself does.
    """
    if inherited is None or inherited.strip() == "":
        return ",".join(str(i) for i in gpu_ids)
    visible = [part.strip() for part in inherited.split(",") if part.strip()]
    out = []
    for i in gpu_ids:
        if i >= len(visible):
            raise GpuSliceError(
                f"GPU {i} requested but CUDA_VISIBLE_DEVICES={inherited!r} shows only"
                f" {len(visible)} device(s)"
            )
        out.append(visible[i])
    return ",".join(out)
