"""How many GPUs a server needs, and GPU and port slices for pytest-xdist workers.

Pure functions, no environment side effects. A server's GPU count is its config's ``gpus`` or,
when that is unset, what its parallelism flags imply (``gpus_from_flags``), because a suite that
says ``--tp-size 4`` should not have to say ``gpus = 4`` as well. Without xdist the launcher
leaves the GPUs the runner gives alone; under xdist each worker launching its own server must
get its own GPUs (two servers on one GPU corrupt each other's numbers) and its own port range
(like SGLang CI's one-port-range-per-GPU). GPU ids here are *logical* indices among the GPUs
this process sees; the launcher maps them through an inherited ``CUDA_VISIBLE_DEVICES`` (see
``visible_devices_value``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pytest_llmperf.base.errors import InputError

__all__ = [
    "GpuNeed",
    "GpuPlan",
    "GpuSliceError",
    "gpu_ids_for_worker",
    "gpus_from_flags",
    "plan_gpus",
    "visible_devices_value",
    "worker_count",
    "worker_index",
]

# SGLang's spellings (server_args.py: ``tp_size`` with alias ``--tensor-parallel-size``; ``--tp``
# reaches it by argparse prefix matching), plus vLLM's short forms, so a ``command`` server that
# runs ``vllm serve -tp 2`` is counted too.
_TP_FLAGS = ("--tp-size", "--tp", "--tensor-parallel-size", "-tp")
_PP_FLAGS = ("--pp-size", "--pipeline-parallel-size", "-pp")
_DP_FLAGS = ("--dp-size", "--dp", "--data-parallel-size", "-dp")
_NNODES_FLAGS = ("--nnodes",)
_DP_ATTENTION = "--enable-dp-attention"


class GpuSliceError(InputError):
    """A config needs more GPUs than this machine (or this process) can see."""


@dataclass(frozen=True)
class GpuNeed:
    """How many GPUs one server uses on this machine, and where that number came from."""

    count: int
    source: str  # for the header: "gpus = 4 in the config", "--tp-size 4", ...


def _flag_values(args: Sequence[str], names: tuple[str, ...]) -> tuple[str, str] | None:
    """The last ``(flag, value)`` among ``names`` in ``args`` (``--f v`` or ``--f=v``)."""
    found = None
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag not in names:
            continue
        if not eq:
            value = args[i + 1] if i + 1 < len(args) else ""
        found = (flag, value)
    return found


def gpus_from_flags(args: Sequence[str], *, where: str = "args") -> GpuNeed:
    """The GPUs a server started with ``args`` uses on one node, as SGLang counts them.

    SGLang starts ``tp_size * pp_size`` scheduler ranks, one per GPU; with ``--dp-size`` and no
    DP attention the data-parallel controller starts ``dp_size`` such groups, each moving the
    base GPU by ``tp_size * pp_size`` (managers/data_parallel_controller.py,
    ``launch_dp_schedulers``); with ``--enable-dp-attention`` the DP ranks live inside the TP
    group (server_args.py ``_handle_data_parallelism`` asserts ``tp_size % dp_size == 0``), so
    DP adds no GPU. ``--nnodes`` splits the ranks over nodes (``check_server_args``).
    """
    factors: dict[str, int] = {}
    parts: list[str] = []
    for key, names in (("tp", _TP_FLAGS), ("pp", _PP_FLAGS), ("dp", _DP_FLAGS)):
        hit = _flag_values(args, names)
        factors[key] = 1
        if hit is None:
            continue
        flag, value = hit
        if not value.strip().isdigit() or int(value) < 1:
            raise InputError(f"{where}: {flag} {value!r} is not a positive integer")
        factors[key] = int(value)
        parts.append(f"{flag} {value.strip()}")
    dp_attention = any(a.partition("=")[0] == _DP_ATTENTION for a in args)
    count = factors["tp"] * factors["pp"]
    if factors["dp"] > 1:
        if dp_attention:
            parts.append(f"{_DP_ATTENTION} (DP ranks share the TP GPUs)")
        else:
            count *= factors["dp"]
    nodes = _flag_values(args, _NNODES_FLAGS)
    if nodes is not None and nodes[1].strip().isdigit() and int(nodes[1]) > 1:
        count = -(-count // int(nodes[1]))
        parts.append(f"--nnodes {nodes[1].strip()} (GPUs on this node)")
    if not parts:
        return GpuNeed(1, "no parallelism flags")
    return GpuNeed(count, ", ".join(parts))


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
    """The logical GPU ids of worker ``index``'s server: ``[i*g, (i+1)*g)``, disjoint per worker.

    Raises ``GpuSliceError`` when ``count`` workers of ``g`` GPUs each do not fit in the
    ``total_gpus`` visible ones: two servers sharing a GPU would corrupt each other's numbers.
    When simulating there may be no GPU at all, so the ids are notional (as if there were
    ``count * g`` GPUs) for the simulator to report.
    """
    i = 0 if index is None else index
    if i < 0 or gpus_per_server < 0:
        raise ValueError("worker index and gpus_per_server must be >= 0")
    g = gpus_per_server
    if g == 0:
        return []
    workers = max(count, i + 1)
    if not simulate and workers * g > total_gpus:
        fits = total_gpus // g
        advice = (
            f"run with -n {fits} or fewer, or without xdist"
            if fits >= 1
            else "this config needs more GPUs than are visible"
        )
        raise GpuSliceError(
            f"{workers} xdist worker(s) x {g} GPU(s) per server need {workers * g} GPUs but"
            f" only {total_gpus} are visible (check CUDA_VISIBLE_DEVICES and nvidia-smi);"
            f" {advice}"
        )
    return list(range(i * g, (i + 1) * g))


@dataclass(frozen=True)
class GpuPlan:
    """Where one server runs: the GPUs it needs, which it gets, and a line for the header."""

    need: GpuNeed
    ids: list[int] | None  # logical ids to expose; None leaves CUDA_VISIBLE_DEVICES alone
    names: list[str]  # names of the GPUs the server uses, for the hardware key
    text: str
    error: str | None = None  # set when the server must not be launched (said before launch)


def plan_gpus(
    need: GpuNeed,
    visible: Sequence[str],
    env: Mapping[str, str],
    *,
    simulate: bool = False,
    attached: bool = False,
) -> GpuPlan:
    """Place one server: ``visible`` are the names of the GPUs this process sees, in order.

    Without xdist the runner's choice of GPUs (an inherited ``CUDA_VISIBLE_DEVICES``, or all)
    is left alone; under xdist worker ``i`` gets ``[i*g, (i+1)*g)`` of the visible GPUs, or an
    error when the workers do not fit.
    """
    head = f"GPUs: {need.count} ({need.source})"
    first = list(visible[: need.count])
    if attached:
        return GpuPlan(need, None, first, f"{head}; not managed (attached server)")
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    index = worker_index(env)
    if index is None:
        given = (
            f"CUDA_VISIBLE_DEVICES={cvd} left as set"
            if cvd is not None
            else "CUDA_VISIBLE_DEVICES not set (the server sees every GPU)"
        )
        if simulate:
            return GpuPlan(need, None, [], f"{head}; simulated, {given}")
        seen = f"{len(visible)} visible" if visible else "none detected by nvidia-smi"
        error = None
        if visible and need.count > len(visible):
            error = (
                f"the server needs {need.count} GPU(s) ({need.source}) but only {len(visible)}"
                " are visible (check CUDA_VISIBLE_DEVICES and nvidia-smi)"
            )
        return GpuPlan(need, None, first, f"{head}; {given}; {seen}", error)
    count = worker_count(env)
    try:
        ids = gpu_ids_for_worker(index, count, len(visible), need.count, simulate=simulate)
        value = visible_devices_value(ids, cvd)
    except GpuSliceError as exc:
        return GpuPlan(need, None, first, f"{head}; {exc}", str(exc))
    names = [visible[i] for i in ids if i < len(visible)]
    shown = ",".join(map(str, ids)) or "none"
    text = (
        f"{head}; xdist worker gw{index} of {count} gets GPU(s) {shown}"
        f" (CUDA_VISIBLE_DEVICES={value})" + (", simulated" if simulate else "")
    )
    return GpuPlan(need, ids, names, text)


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
