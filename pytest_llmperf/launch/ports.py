"""Free TCP ports for launched servers, unique across processes on this machine.

A port is asked of the OS (bind to port 0) and then *claimed*: an exclusive ``flock`` on a
per-port file in a machine-wide directory, held by the launching process until its server
stops. Another session or xdist worker that the OS hands the same port (it is free again once
our probe socket closes, and stays free until the server binds it) fails to take the lock and
asks again. A lock dies with its holder, so a killed session leaves no stale claim. Holding the
probe socket open until launch cannot do this: the server must bind the port itself, so the
socket has to close first, and the window reopens. A process outside pytest-llmperf that takes
the port in that window makes the server fail its bind; the launcher retries (see
``launcher.launch``).
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import tempfile
from pathlib import Path

__all__ = ["PortClaim", "claim_port", "free_port", "port_is_free"]

CLAIM_ATTEMPTS = 64


def port_is_free(host: str, port: int) -> bool:
    """Whether ``port`` can be bound on ``host`` right now."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1", port_range: tuple[int, int] | None = None) -> int:
    """A port that is free on ``host`` now: kernel-chosen, or a free one in ``port_range``
    (``[start, stop)``), tried from a random offset so that concurrent callers spread out."""
    if port_range is None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            return int(sock.getsockname()[1])
    start, stop = port_range
    span = max(stop - start, 0)
    offset = random.randrange(span) if span else 0
    for i in range(span):
        port = start + (offset + i) % span
        if port_is_free(host, port):
            return port
    raise OSError(f"no free TCP port on {host} in [{start}, {stop})")


def _claims_dir() -> Path:
    """One directory per machine (sticky and world-writable like /tmp), so sessions of every
    user see each other's claims; a per-user one where that cannot be made."""
    shared = Path(tempfile.gettempdir()) / "pytest-llmperf-ports"
    with contextlib.suppress(OSError):
        shared.mkdir(mode=0o1777, exist_ok=True)
        if shared.stat().st_uid == os.getuid():
            shared.chmod(0o1777)
        if os.access(shared, os.W_OK | os.X_OK):
            return shared
    own = Path(tempfile.gettempdir()) / f"pytest-llmperf-ports-{os.getuid()}"
    own.mkdir(mode=0o700, exist_ok=True)
    return own


class PortClaim:
    """A claimed port; ``release()`` (idempotent) lets other sessions have it again."""

    def __init__(self, port: int, fd: int | None) -> None:
        self.port = port
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)  # closing drops the flock

    def __repr__(self) -> str:
        return f"PortClaim(port={self.port}, held={self._fd is not None})"


def _try_lock(directory: Path, port: int) -> int | None:
    import fcntl

    try:
        # O_RDONLY: a claim file made by another user is readable, and flock needs no write.
        fd = os.open(directory / f"{port}.lock", os.O_RDONLY | os.O_CREAT, 0o644)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def claim_port(host: str = "127.0.0.1", port_range: tuple[int, int] | None = None) -> PortClaim:
    """A free port on ``host`` (OS-chosen, or in ``port_range``) that no other process on this
    machine has claimed; raises ``OSError`` if none is found in ``CLAIM_ATTEMPTS`` tries."""
    if os.name != "posix":  # no flock: the OS's choice and the launcher's retry only
        return PortClaim(free_port(host, port_range), None)
    directory = _claims_dir()
    for _ in range(CLAIM_ATTEMPTS):
        port = free_port(host, port_range)
        fd = _try_lock(directory, port)
        if fd is None:
            continue  # another session holds it (or is about to launch on it)
        if port_is_free(host, port):  # checked again under the lock
            return PortClaim(port, fd)
        os.close(fd)
    where = f"in [{port_range[0]}, {port_range[1]})" if port_range else "from the OS"
    raise OSError(f"no unclaimed free TCP port on {host} {where} after {CLAIM_ATTEMPTS} tries")
