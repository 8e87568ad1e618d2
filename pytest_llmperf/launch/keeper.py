"""A keeper process between pytest and a launched server, so nothing the server starts escapes.

Why it is built this way:

- A daemonizing server (double fork + ``setsid``, perhaps re-executing itself with an empty
  environment) leaves its process group, its session and, once its parent exits, the process
  tree: neither a group kill nor an environment tag finds it. The keeper marks itself a *child
  subreaper* (``PR_SET_CHILD_SUBREAPER``, Linux): every orphan among its descendants is
  re-parented to it instead of to init, so "the keeper's descendants" is exactly "everything
  this launch started", for teardown and for the watchdog alike. A cgroup would do the same,
  but is rarely writable by a test run; making pytest itself the subreaper would adopt orphans
  of everything else a test session runs.
- The keeper reaps every child it gets (it owns nothing else, so ``waitpid(-1)`` steals no one's
  exit status) and lives until the last of them is gone. The command's own exit status goes
  to the launcher through a status pipe as soon as it exits, so a command that exits while its
  daemon still serves is seen at once. The keeper then exits as the command did (same code, or
  killed by the same signal).
- The keeper ignores SIGTERM, SIGINT and SIGHUP: a group signal reaches the server, and the
  keeper stays to reap and to keep adopted daemons in its tree until they are stopped (a
  SIGKILL of the group ends it too). Its handlers are Python functions, which ``exec`` resets,
  so the server starts with default dispositions.
- This file runs as ``python -I keeper.py <argv fd> <status fd>`` and imports only the
  standard library: it starts fast and is not mistaken for the server (its command line does
  not carry the server's; the argv comes through a pipe).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

__all__ = ["KeeperError", "Kept", "start"]

_PR_SET_CHILD_SUBREAPER = 36
_START_TIMEOUT_S = 30.0


class KeeperError(OSError):
    """The keeper could not start the command (the message is the OS's reason)."""


class Kept:
    """A command run under a keeper.

    ``pid`` and ``keeper`` are the keeper (the process-group leader, whose descendants are all
    the launch's processes); ``leader_pid`` is the command itself; ``poll``/``wait`` report
    the command's exit status, like ``subprocess.Popen``'s, even while adopted daemons keep
    the keeper alive.
    """

    def __init__(self, keeper: subprocess.Popen[bytes], status_fd: int, leader_pid: int) -> None:
        self.keeper = keeper
        self.pid = keeper.pid
        self.leader_pid = leader_pid
        self._fd: int | None = status_fd
        self._buf = b""
        self.returncode: int | None = None

    def _read(self, timeout: float) -> None:
        """Take what the keeper reported, waiting up to ``timeout`` seconds for something."""
        if self._fd is None or self.returncode is not None:
            return
        ready, _, _ = select.select([self._fd], [], [], max(timeout, 0.0))
        if not ready:
            return
        chunk = os.read(self._fd, 4096)
        if not chunk:  # the keeper is gone without a word: it was killed
            self._close_fd()
            code = self.keeper.wait()
            self.returncode = code if self.returncode is None else self.returncode
            return
        self._buf += chunk
        for line in self._buf.split(b"\n")[:-1]:
            word, _, value = line.decode().partition(" ")
            if word == "exit":
                self.returncode = int(value)
        self._buf = self._buf.rsplit(b"\n", 1)[-1]

    def _close_fd(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def poll(self) -> int | None:
        """The command's exit code once it has exited (negative: killed by that signal)."""
        self._read(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the command to exit; ``subprocess.TimeoutExpired`` after ``timeout``."""
        deadline = time.monotonic() + (timeout if timeout is not None else 1e9)
        for _ in range(1_000_000):  # each pass waits up to 0.5 s or ends
            self._read(min(0.5, deadline - time.monotonic()))
            if self.returncode is not None:
                return self.returncode
            if time.monotonic() >= deadline:
                break
        raise subprocess.TimeoutExpired(f"pid {self.leader_pid}", timeout or 0.0)

    def close(self) -> None:
        """Release the status pipe (after the keeper was stopped)."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._read(0.0)
        self._close_fd()


def start(
    argv: list[str], *, env: dict[str, str], stdout: IO[bytes], cwd: str | None = None
) -> Kept:
    """Run ``argv`` under a keeper in a new session; returns once the command has started.

    Raises ``KeeperError`` (an ``OSError``) when the command cannot be executed.
    """
    argv_r, argv_w = os.pipe()
    status_r, status_w = os.pipe()
    try:
        keeper = subprocess.Popen(
            [sys.executable, "-I", str(Path(__file__).resolve()), str(argv_r), str(status_w)],
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            pass_fds=(argv_r, status_w),
        )
    except OSError:
        os.close(status_r)
        raise
    finally:
        os.close(argv_r)
        os.close(status_w)
        with os.fdopen(argv_w, "wb") as f:
            with contextlib.suppress(BrokenPipeError):
                f.write(json.dumps(argv).encode())
    # The first line: "pid N" once the command runs, or "error REASON".
    line = b""
    deadline = time.monotonic() + _START_TIMEOUT_S
    while b"\n" not in line and time.monotonic() < deadline:
        ready, _, _ = select.select([status_r], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(status_r, 4096) if ready else b""
        if not chunk:
            break
        line += chunk
    first, _, rest = line.partition(b"\n")
    word, _, value = first.decode(errors="replace").partition(" ")
    if word != "pid":
        os.close(status_r)
        if keeper.poll() is None:
            keeper.kill()
        keeper.wait()
        raise KeeperError(value or f"the keeper exited with code {keeper.returncode}")
    kept = Kept(keeper, status_r, int(value))
    kept._buf = rest
    return kept


# --------------------------------------------------------------------------- the keeper


def _become_subreaper() -> None:
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _ignore(signum: int, frame: object) -> None:
    """A no-op handler (not SIG_IGN, which ``exec`` would pass on to the server)."""


def _report(fd: int, text: str) -> None:
    with contextlib.suppress(OSError):
        os.write(fd, (text + "\n").encode())


def _exit_as(code: int | None) -> None:
    """Exit as the command did: the same code, or killed by the same signal (no core)."""
    if code is not None and code < 0:
        import resource

        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        with contextlib.suppress(ValueError, OSError):
            signal.signal(-code, signal.SIG_DFL)
            os.kill(os.getpid(), -code)
        os._exit(128 - code)
    os._exit(code or 0)


def _main() -> None:
    argv_fd, status_fd = int(sys.argv[1]), int(sys.argv[2])
    os.set_inheritable(status_fd, False)
    with os.fdopen(argv_fd, "rb") as f:
        argv = json.loads(f.read())
    _become_subreaper()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _ignore)
    try:
        child = subprocess.Popen(argv, close_fds=True)
    except OSError as exc:
        _report(status_fd, f"error {exc.strerror or exc}")
        os._exit(127)
    _report(status_fd, f"pid {child.pid}")
    code: int | None = None
    # Bounded by the lives of this keeper's children: it ends when the last one is reaped.
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        if pid == child.pid:
            code = child.returncode = os.waitstatus_to_exitcode(status)
            _report(status_fd, f"exit {code}")
    _exit_as(code)


if __name__ == "__main__":
    _main()
