"""Free TCP ports for launched servers.

A port picked by binding port 0 can be taken by someone else before the server binds it; the
launcher handles that by retrying (see ``launcher.launch``), so these helpers only need to be
right most of the time and never block.
"""

from __future__ import annotations

import socket

__all__ = ["free_port", "port_is_free"]


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
    """A port that is free on ``host`` now: kernel-chosen, or the first free one in
    ``port_range`` (``[start, stop)``, e.g. a per-xdist-worker range from ``gpus.port_range``).
    """
    if port_range is None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            return int(sock.getsockname()[1])
    start, stop = port_range
    for port in range(start, stop):
        if port_is_free(host, port):
            return port
    raise OSError(f"no free TCP port on {host} in [{start}, {stop})")
