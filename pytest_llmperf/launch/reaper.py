"""Process-group reaping: stop a server's whole group, and stop it even if pytest dies.

Why it is built this way:

- A server runs in its own session, so teardown can signal the whole group (SGLang forks
  schedulers and detokenizers). Teardown is SIGTERM to the group, a bounded grace period, then
  SIGKILL to the group and to any descendant that left it (found with psutil). Every wait is
  bounded.
- Every live server is in a module registry; ``terminate_all`` (registered with ``atexit`` and
  callable from signal handlers, see ``install_cleanup_signal_handlers``) stops them all.
- If pytest itself is SIGKILLed, nothing in it runs. A small watchdog process (one per launching
  process) holds the read end of a pipe whose write end only the launching process holds; EOF,
  or being re-parented, means the parent died, and the watchdog stops the registered groups.
  This covers the server's grandchildren too, unlike ``PR_SET_PDEATHSIG`` (which is per thread
  and per direct child). A launch's group leader is its keeper (``keeper``), whose tree holds
  every process the launch started, daemons included; the watchdog also snapshots those trees
  every half second, so what a killed keeper left behind is still stopped (psutil checks the
  creation time, so a reused pid is never hit).
- SGLang prints its server args (API key included) at startup, so a log file is scrubbed of every
  known secret when the server stops (by us or by the watchdog).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

import psutil

__all__ = [
    "DEFAULT_GRACE_S",
    "TAG_ENV_VAR",
    "tagged",
    "WATCHDOG",
    "Stoppable",
    "descendants",
    "install_cleanup_signal_handlers",
    "is_running",
    "live",
    "redact",
    "register",
    "scrub_file",
    "stop_group",
    "terminate_all",
    "unregister",
]

DEFAULT_GRACE_S = 15.0
# Set to a per-launch value in a server's environment: a process that left the group and the
# tree (setsid, a daemon's double fork re-parents it to init) still carries it, so teardown
# and the watchdog find everything the launch started.
TAG_ENV_VAR = "LLMPERF_LAUNCH_TAG"
_KILL_WAIT_S = 5.0
_SNAPSHOT_INTERVAL_S = 0.5
_REDACTED = "***"


def redact(text: str, secret: str | None) -> str:
    """``text`` with every occurrence of ``secret`` replaced by ``***``."""
    return text.replace(secret, _REDACTED) if secret else text


def scrub_file(path: Path, secret: str) -> None:
    """Replace ``secret`` in a (stopped) server's log, atomically."""
    try:
        data = path.read_bytes()
    except OSError:
        return
    needle = secret.encode()
    if needle not in data:
        return
    tmp = path.with_name(path.name + ".scrub")
    try:
        tmp.write_bytes(data.replace(needle, _REDACTED.encode()))
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()


def _group_members(pgid: int) -> list[psutil.Process]:
    """Live (non-zombie) processes in process group ``pgid``."""
    members = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                members.append(proc)
        except (OSError, psutil.Error):
            continue
    return members


def is_running(p: psutil.Process) -> bool:
    """Still the same process (pid not reused) and not a zombie."""
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    return [p for p in procs if is_running(p)]


def descendants(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def tagged(tag: str | None) -> list[psutil.Process]:
    """Live processes whose environment carries ``TAG_ENV_VAR=tag``."""
    if not tag:
        return []
    out = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(TAG_ENV_VAR) == tag and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except (psutil.Error, OSError):
            continue
    return out


def _killpg(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def stop_group(proc: subprocess.Popen[bytes], grace_s: float, tag: str | None = None) -> int | None:
    """SIGTERM the group, wait up to ``grace_s``, then SIGKILL what is left (group, escaped
    descendants, and processes carrying ``tag``); returns the leader's exit code (None if it
    could not be reaped)."""
    pgid = proc.pid  # start_new_session makes the leader's pid the group id
    tracked = {p.pid: p for p in [*descendants(proc.pid), *tagged(tag)]}
    _killpg(pgid, signal.SIGTERM)
    for p in tracked.values():  # descendants that left the group (setsid) get it too
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(p.pid) != pgid:
                p.terminate()
    deadline = time.monotonic() + max(grace_s, 0.0)
    while True:
        proc.poll()
        left = _alive(list(tracked.values())) + [
            p for p in _group_members(pgid) if p.pid not in tracked
        ]
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    if left:
        _killpg(pgid, signal.SIGKILL)
        for p in left:
            with contextlib.suppress(psutil.Error):
                p.kill()
        # Not the leader: psutil would reap it and Popen would then report exit code 0.
        psutil.wait_procs([p for p in left if p.pid != proc.pid], timeout=_KILL_WAIT_S)
    try:
        return proc.wait(timeout=_KILL_WAIT_S)
    except subprocess.TimeoutExpired:
        return None


# --------------------------------------------------------------------------- watchdog


def _watchdog_main() -> None:
    """Entry of the watchdog process: stop registered groups when the launching process dies.

    argv: ``<parent pid>``; stdin: JSON lines ``{"op": "add"|"remove"|"quit", ...}``.
    """
    parent = int(sys.argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    groups: dict[int, dict[str, Any]] = {}
    buf = b""
    fd = sys.stdin.fileno()
    # Every launch's tree as last seen (pid -> process, whose create_time psutil checks
    # before signalling): what a killed keeper left behind is still found.
    seen: dict[int, psutil.Process] = {}
    next_snapshot = 0.0
    while os.getppid() == parent:  # bounded by the parent's life: re-parenting ends it
        if groups and time.monotonic() >= next_snapshot:
            seen = {p.pid: p for p in _alive(list(seen.values()))}
            for pgid in groups:
                seen.update((p.pid, p) for p in descendants(pgid))
            next_snapshot = time.monotonic() + _SNAPSHOT_INTERVAL_S
        ready, _, _ = select.select([fd], [], [], _SNAPSHOT_INTERVAL_S)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break  # EOF: the launching process closed the pipe or died
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if msg.get("op") == "add":
                groups[int(msg["pgid"])] = msg
            elif msg.get("op") == "remove":
                groups.pop(int(msg["pgid"]), None)
            elif msg.get("op") == "quit":
                return
    if not groups:
        return

    def escaped() -> list[psutil.Process]:
        """Processes of the launches outside their groups: in a keeper's tree now, seen
        there before, or carrying a launch's tag."""
        found = {p.pid: p for p in _alive(list(seen.values()))}
        for pgid, m in groups.items():
            found.update((p.pid, p) for p in [*descendants(pgid), *tagged(m.get("tag"))])
        return _alive(list(found.values()))

    for pgid in groups:
        _killpg(pgid, signal.SIGTERM)
    for p in escaped():
        with contextlib.suppress(psutil.Error):
            p.terminate()
    deadline = time.monotonic() + max(
        float(m.get("grace", DEFAULT_GRACE_S)) for m in groups.values()
    )
    while time.monotonic() < deadline and (any(_group_members(g) for g in groups) or escaped()):
        time.sleep(0.1)
    for pgid in groups:
        _killpg(pgid, signal.SIGKILL)
        for p in _group_members(pgid):
            with contextlib.suppress(psutil.Error):
                p.kill()
    for p in escaped():
        with contextlib.suppress(psutil.Error):
            p.kill()
    time.sleep(0.2)  # let the kernel finish the kills before rewriting logs
    for msg in groups.values():
        for secret in msg.get("secrets", []):
            if secret and msg.get("log"):
                scrub_file(Path(msg["log"]), secret)


def _import_path() -> str:
    """PYTHONPATH that lets a fresh interpreter import this package, even when the parent
    found it through a runtime ``sys.path`` change rather than an installation."""
    here = str(Path(__file__).resolve().parents[2])
    rest = os.environ.get("PYTHONPATH")
    return here + (os.pathsep + rest if rest else "")


class _Watchdog:
    """The per-process watchdog: started lazily, restarted after fork or if it died."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._wfd: int | None = None
        self._owner = 0
        # What the watchdog must know, replayed if it has to be restarted.
        self._registered: dict[int, dict[str, Any]] = {}

    def _ensure(self) -> None:
        if self._proc is not None and self._owner == os.getpid() and self._proc.poll() is None:
            return
        if self._wfd is not None:
            with contextlib.suppress(OSError):
                os.close(self._wfd)
        rfd, wfd = os.pipe()  # both ends non-inheritable (PEP 446); stdin= dups rfd
        try:
            self._proc = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    "from pytest_llmperf.launch.reaper import _watchdog_main; _watchdog_main()",
                    str(os.getpid()),
                ],
                stdin=rfd,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
                env={**os.environ, "PYTHONPATH": _import_path()},
            )
        except OSError:
            os.close(wfd)
            self._proc = None
            self._wfd = None
            return
        finally:
            os.close(rfd)
        self._wfd = wfd
        self._owner = os.getpid()
        for msg in self._registered.values():
            with contextlib.suppress(OSError):
                os.write(wfd, (json.dumps(msg) + "\n").encode())

    def send(self, msg: dict[str, Any]) -> None:
        data = (json.dumps(msg) + "\n").encode()
        with self._lock:
            if self._owner not in (0, os.getpid()):
                # A forked child: the parent's watchdog and servers are not ours.
                if self._wfd is not None:
                    with contextlib.suppress(OSError):
                        os.close(self._wfd)
                self._proc, self._wfd, self._registered = None, None, {}
            if msg.get("op") == "add":
                self._registered[int(msg["pgid"])] = msg
            elif msg.get("op") == "remove":
                self._registered.pop(int(msg["pgid"]), None)
            for _ in range(2):  # one restart if the watchdog died
                self._ensure()
                if self._wfd is None:
                    return
                try:
                    os.write(self._wfd, data)
                    return
                except OSError:
                    self._proc = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None


WATCHDOG = _Watchdog()


# --------------------------------------------------------------------------- registry


class Stoppable(Protocol):
    """What the registry needs of a live server: a bounded, idempotent ``close``."""

    def close(self, grace_s: float | None = None) -> int | None: ...


_LIVE: dict[int, Stoppable] = {}
_LIVE_LOCK = threading.RLock()  # re-entrant: terminate_all may run in a signal handler


def register(server: Stoppable) -> None:
    with _LIVE_LOCK:
        _LIVE[id(server)] = server


def unregister(server: Stoppable) -> None:
    with _LIVE_LOCK:
        _LIVE.pop(id(server), None)


def live() -> list[Stoppable]:
    """Servers registered by this process and not yet stopped."""
    with _LIVE_LOCK:
        return list(_LIVE.values())


def terminate_all(grace_s: float | None = None) -> int:
    """Stop every server this process launched; returns how many were stopped.

    Safe to call from ``atexit`` and from signal handlers, and more than once.
    """
    handles = live()
    for handle in handles:
        with contextlib.suppress(Exception):
            handle.close(grace_s=grace_s)
    return len(handles)


atexit.register(terminate_all)


def install_cleanup_signal_handlers(
    signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGHUP),
) -> None:
    """Make ``signals`` stop all servers, then behave as before (previous handler, or die
    by the signal). Main thread only. SIGINT needs nothing: KeyboardInterrupt unwinds
    through fixture teardown and ``atexit``.
    """
    for sig in signals:
        previous = signal.getsignal(sig)

        def handler(signum: int, frame: FrameType | None, previous: Any = previous) -> None:
            terminate_all()
            if callable(previous):
                previous(signum, frame)
            elif previous != signal.SIG_IGN:
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)

        signal.signal(sig, handler)
