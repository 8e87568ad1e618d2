"""Who held the CPU a starved load generator waited for: the words every message uses.

A load generator whose loop lagged while it was itself nearly idle waited for a CPU. On a
virtual machine (most CI runners) that CPU may have been held by this machine's other
processes or by the hypervisor, which gives the guest's CPU time to other virtual machines on
the host (``steal``). The guest's processes cannot see steal, and the remedies differ (close
programs here; run on a dedicated-CPU runner or at a quieter time), so each message names the
one the level's figures show.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_llmperf.base.results import ClientHealth

__all__ = ["STEAL_NAMED_PERCENT", "Holders", "client_holders", "holders", "stolen"]

# The hypervisor is named as a holder from this share of all the machine's CPU time on: below
# it, steal is the ordinary jitter of a shared host (this 2-CPU VM idles at about 1-3 %).
STEAL_NAMED_PERCENT = 5.0


@dataclass(frozen=True)
class Holders:
    """Who held the CPU (``cause``), what to do about it (``remedy``, one sentence for a
    summary) and where to measure instead (``measure``, a clause for a point's reason)."""

    cause: str
    remedy: str
    measure: str


_PROCESSES = Holders(
    "other processes held the CPU",
    "Close other programs and re-run them",
    "measure on a quieter machine",
)
_HYPERVISOR = Holders(
    "the hypervisor held the CPU for other virtual machines on its host",
    "Re-run them on a runner with dedicated CPUs, or when the host is quieter",
    "measure on dedicated CPUs",
)
_BOTH = Holders(
    "other processes and the hypervisor (steal) held the CPU",
    "Close other programs, or re-run them on a runner with dedicated CPUs",
    "measure on dedicated CPUs",
)


def holders(
    client_cpu_percent: float,
    system_cpu_percent: float | None,
    steal_percent: float | None,
    cpus: int | None,
) -> Holders:
    """The hypervisor when its steal is at least what the machine's other processes took,
    both when it is smaller but named, other processes otherwise (and where steal is not
    counted)."""
    steal = steal_percent or 0.0
    if steal < STEAL_NAMED_PERCENT:
        return _PROCESSES
    others = (system_cpu_percent or 0.0) - client_cpu_percent / (cpus or 1)
    return _HYPERVISOR if steal >= others else _BOTH


def client_holders(client: ClientHealth) -> Holders:
    """``holders`` from a level's client figures."""
    return holders(client.cpu_percent, client.system_cpu_percent, client.steal_percent, client.cpus)


def stolen(steal_percent: float | None) -> str:
    """`` with 31 % more stolen`` (by the hypervisor) where named, else nothing."""
    steal = steal_percent or 0.0
    if steal < STEAL_NAMED_PERCENT:
        return ""
    return f" with {steal:.0f} % more stolen"
