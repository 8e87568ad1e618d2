"""Launch SGLang, the simulator, or a config's own ``command`` as a process group; attach.

Why it is built this way:

- The server runs in its own session (``start_new_session=True``), so teardown can signal the
  whole group and a terminal Ctrl-C reaches only pytest, whose cleanup then stops the server in
  order. Stopping groups, the registry of live servers and the watchdog that outlives a
  SIGKILLed pytest are in ``reaper``.
- The API key is never in ``repr``, error messages or ``log_tail``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import sys
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path
from types import TracebackType

import httpx
import psutil

from pytest_llmperf.base.errors import LLMPerfError
from pytest_llmperf.base.results import Mode
from pytest_llmperf.core.server_probe import ServerKind
from pytest_llmperf.launch import keeper, reaper
from pytest_llmperf.launch.gpus import visible_devices_value
from pytest_llmperf.launch.hardware import safe_key
from pytest_llmperf.launch.ports import PortClaim, claim_port, port_is_free
from pytest_llmperf.launch.readiness import HEALTH_ROUTES, discover, http_client, poll_ready
from pytest_llmperf.launch.reaper import (
    DEFAULT_GRACE_S,
    WATCHDOG,
    install_cleanup_signal_handlers,
    redact,
    register,
    scrub_file,
    stop_group,
    terminate_all,
    unregister,
)
from pytest_llmperf.launch.server_config import ServerConfig

__all__ = [
    "DEFAULT_GRACE_S",
    "AttachError",
    "LaunchError",
    "ServerHandle",
    "ServerStartError",
    "attach",
    "install_cleanup_signal_handlers",
    "launch",
    "live_servers",
    "sglang_available",
    "terminate_all",
]


PORT_ATTEMPTS = 3
_SETTLE_LOOKS = 5
_SETTLE_PAUSE_S = 0.1
_DAEMON_ANSWER_WAIT_S = 10.0
TAIL_LINES_IN_ERRORS = 30
_PORT_TAKEN_MARKERS = ("address already in use", "errno 98", "eaddrinuse")
_OWNED_FLAGS = ("--host", "--port", "--model-path", "--model", "--api-key")
# Secrets of this plugin found in its own environment: a launched server is never given them
# (it gets its key, if any, through --api-key), and its log is scrubbed of them.
SECRET_ENV_VARS = ("LLMPERF_API_KEY",)


def known_secrets(api_key: str | None, extra: tuple[str | None, ...] = ()) -> list[str]:
    """Every secret a server log must not keep: the launch's key, ``extra``, and the values
    of ``SECRET_ENV_VARS`` in this process's environment."""
    found = [api_key, *extra, *(os.environ.get(name) for name in SECRET_ENV_VARS)]
    return list(dict.fromkeys(s for s in found if s))


class LaunchError(LLMPerfError, RuntimeError):
    """The server could not be launched (bad request, SGLang missing, no free port)."""


class ServerStartError(LaunchError):
    """The server process started but exited or did not become healthy in time."""

    def __init__(
        self, message: str, *, exit_code: int | None, log_path: Path | None, log_tail: str
    ) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.log_path = log_path
        self.log_tail = log_tail


class AttachError(LaunchError):
    """An existing server (by URL) did not become ready (no health route answered 200) in time."""


def sglang_available() -> bool:
    """Whether ``python -m sglang.launch_server`` can run in this interpreter."""
    return importlib.util.find_spec("sglang") is not None


def _signal_name(code: int) -> str:
    with contextlib.suppress(ValueError):
        return signal.Signals(-code).name
    return f"signal {-code}"


def _read_tail(path: Path | None, n: int, secret: str | None) -> str:
    if path is None or n <= 0:
        return ""
    try:
        with path.open("rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - (n * 300 + 8192)))
            data = f.read()
    except OSError:
        return ""
    lines = data.decode("utf-8", errors="replace").splitlines()
    return redact("\n".join(lines[-n:]), secret)


# Lines a server prints early about its own limits, which a long traceback pushes out of the
# tail (SGLang: "Max running requests is reset to 48 for speculative decoding.").
_NOTABLE_MARKERS = ("is reset to", "out of memory", "not enough memory", "not supported")
_NOTABLE_SCAN_BYTES = 4 * 1024 * 1024


def _notable_lines(path: Path, tail: str, limit: int = 5) -> list[str]:
    """Up to ``limit`` lines of the log's start that name a limit and are not in ``tail``."""
    try:
        with path.open("rb") as f:
            data = f.read(_NOTABLE_SCAN_BYTES)
    except OSError:
        return []
    out: list[str] = []
    for line in data.decode("utf-8", errors="replace").splitlines():
        if line.startswith("# llmperf:"):
            continue  # the launcher's own header (the command line)
        if any(m in line.lower() for m in _NOTABLE_MARKERS) and line not in tail:
            if line.strip() not in out:
                out.append(line.strip())
            if len(out) >= limit:
                break
    return out


def _answers(host: str, port: int) -> bool:
    """Whether something accepts connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _command(proc: object) -> str:
    try:
        return " ".join(proc.cmdline())[:120]  # type: ignore[attr-defined]
    except Exception:  # exited meanwhile
        return "?"


def _left_running(proc: keeper.Kept, tag: str) -> list[psutil.Process]:
    """What a launch still runs after its command exited: the keeper's other descendants
    (daemons, whatever their environment) and processes carrying the launch's tag.

    A daemon's double fork is caught mid-way (its middle process just exited, its child not
    yet re-parented), so the tree is looked at a few times over a short while."""
    found: dict[int, psutil.Process] = {}
    for i in range(_SETTLE_LOOKS):
        if i:
            time.sleep(_SETTLE_PAUSE_S)
        found.update((p.pid, p) for p in [*reaper.descendants(proc.pid), *reaper.tagged(tag)])
    found.pop(proc.pid, None)
    found.pop(proc.leader_pid, None)
    return [p for p in found.values() if reaper.is_running(p)]


def live_servers() -> list[ServerHandle]:
    """Servers launched by this process and not yet stopped."""
    return [h for h in reaper.live() if isinstance(h, ServerHandle)]


# --------------------------------------------------------------------------- handle


class ServerHandle:
    """A server under test: launched (real SGLang), simulated, or attached by URL.

    ``api_key`` is readable but never part of ``repr``, ``str``, ``argv``, errors or log tails.
    """

    def __init__(
        self,
        *,
        url: str,
        mode: Mode,
        config: ServerConfig | None,
        api_key: str | None,
        proc: keeper.Kept | None = None,
        log_path: Path | None = None,
        argv: list[str] | None = None,
        gpu_ids: list[int] | None = None,
        grace_s: float = DEFAULT_GRACE_S,
        secrets: list[str] | None = None,
    ) -> None:
        self.url = url
        self.mode: Mode = mode
        self.config = config
        self.log_path = log_path
        self.gpu_ids = gpu_ids
        self.grace_s = grace_s
        self._api_key = api_key
        self._secrets = [s for s in (secrets or [api_key or ""]) if s]
        self._port_claim: PortClaim | None = None
        self._tag: str | None = None
        self._proc = proc
        self._argv = argv or []
        self._lock = threading.RLock()
        self._closed = False
        self.exit_code: int | None = None
        # What the server turned out to be (set once it is ready): kind, model, routes.
        self.kind: ServerKind | None = None
        # Launched servers: seconds from process start to the first healthy answer.
        self.startup_s: float | None = None

    @property
    def api_key(self) -> str | None:
        return self._api_key

    @property
    def pid(self) -> int | None:
        """The server process pid (the command launched); None when attached."""
        return self._proc.leader_pid if self._proc is not None else None

    @property
    def argv(self) -> list[str]:
        """The server command line, with the API key redacted."""
        return [redact(a, self._api_key) for a in self._argv]

    @property
    def auth_headers(self) -> dict[str, str]:
        """``Authorization`` header for requests to this server (empty without a key)."""
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    @property
    def closed(self) -> bool:
        return self._closed

    def poll(self) -> int | None:
        """The server's exit code if it has exited (None while running, or when attached)."""
        return self._proc.poll() if self._proc is not None else None

    def exit_code_within(self, seconds: float) -> int | None:
        """The exit code if the server exits within ``seconds`` (a server that crashed mid-level
        may still be dying when its cut streams are counted); None when it runs on."""
        deadline = time.monotonic() + seconds
        code = self.poll()
        while code is None and self._proc is not None and time.monotonic() < deadline:
            time.sleep(0.05)  # bounded by the deadline
            code = self.poll()
        return code

    def log_tail(self, n: int = 40) -> str:
        """The last ``n`` lines of the server log (API key redacted); "" when attached."""
        tail = _read_tail(self.log_path, n, None)
        for secret in self._secrets:
            tail = redact(tail, secret)
        return tail

    def close(self, grace_s: float | None = None) -> int | None:
        """Stop the server and its process group (no-op when attached or already closed).

        Returns the server's exit code (negative: killed by that signal).
        """
        with self._lock:
            if self._closed:
                return self.exit_code
            self._closed = True
            proc = self._proc
            try:
                if proc is not None:
                    grace = self.grace_s if grace_s is None else grace_s
                    # The keeper leads the group; its tree holds everything the launch started.
                    keeper_code = stop_group(proc.keeper, grace, self._tag)
                    leader_code = proc.poll()
                    proc.close()
                    self.exit_code = keeper_code if leader_code is None else leader_code
                    WATCHDOG.send({"op": "remove", "pgid": proc.pid})
                    if self.log_path is not None:
                        for secret in self._secrets:
                            scrub_file(self.log_path, secret)
            finally:
                if self._port_claim is not None:
                    self._port_claim.release()
                unregister(self)
            return self.exit_code

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        name = self.config.name if self.config is not None else None
        auth = ", api_key=set" if self._api_key else ""
        return (
            f"ServerHandle(name={name!r}, mode={self.mode!r}, url={self.url!r}, pid={self.pid}"
            f"{auth}, log_path={str(self.log_path) if self.log_path else None!r})"
        )

    __str__ = __repr__


# --------------------------------------------------------------------------- launch / attach


def _log_file(log_dir: Path, name: str) -> Path:
    log_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")[:-3]
    base = f"{safe_key(name)}-{stamp}-{os.getpid()}"
    for i in range(100):
        path = log_dir / (f"{base}.log" if i == 0 else f"{base}-{i}.log")
        try:
            path.open("xb").close()
            return path
        except FileExistsError:
            continue
    raise LaunchError(f"cannot create a log file for {name!r} in {log_dir}")


def _check_args(config: ServerConfig) -> None:
    for arg in config.args:
        flag = arg.split("=", 1)[0]
        if flag in _OWNED_FLAGS:
            raise LaunchError(
                f"server config {config.name!r}: args must not contain {flag} "
                "(the launcher sets --model-path from 'model', --host/--port itself, "
                "and --api-key from api_key)"
            )


def launch(
    config: ServerConfig,
    *,
    log_dir: Path,
    simulate: bool | None = None,
    require_real: bool = False,
    gpu_ids: list[int] | None = None,
    host: str = "127.0.0.1",
    port: int | None = None,
    health_timeout_s: float | None = None,
    api_key: str | None = None,
    grace_s: float = DEFAULT_GRACE_S,
    port_range: tuple[int, int] | None = None,
    secrets: tuple[str | None, ...] = (),
) -> ServerHandle:
    """Start ``config``'s server and return when it is ready.

    SGLang (or the simulator) is ready when ``/health_generate`` answers 200; a ``command``
    server when its ``health`` path does (default: the first of ``/health_generate``,
    ``/health``, ``/v1/models`` that exists). Either is logged, watched and torn down alike.

    ``simulate=None`` simulates exactly when SGLang is not importable; ``require_real`` turns
    that fallback into a ``LaunchError``. ``gpu_ids`` are logical ids among the GPUs visible to
    this process (mapped through an inherited ``CUDA_VISIBLE_DEVICES``). Without ``port`` a free
    one is picked (from ``port_range`` if given) and, if another process takes it first, the
    launch is retried on another port (up to 3 tries). Raises ``ServerStartError`` with the exit
    code, log path and log tail when the server exits or stays unhealthy past the timeout.
    ``secrets`` (e.g. the session's key for attached servers) are scrubbed from the log too.
    """
    if require_real and simulate:
        raise LaunchError("simulate=True and require_real=True contradict each other")
    if config.command is not None:
        simulate = bool(simulate)  # a command server needs no SGLang
    else:
        # A config's own ``python`` is trusted to have SGLang (checked by its launch).
        have_sglang = config.python is not None or sglang_available()
        if simulate is None:
            simulate = not have_sglang
        if require_real and not have_sglang:
            raise LaunchError(
                f"server config {config.name!r}: SGLang is not installed in {sys.executable} "
                "(cannot import 'sglang'), and the simulated server was refused (require_real). "
                "Install SGLang, or allow the simulation."
            )
        _check_args(config)
    own_command = config.command is not None and not simulate
    mode: Mode = "simulated" if simulate else "launched"
    module = "pytest_llmperf.sim" if simulate else "sglang.launch_server"
    if config.health:
        health_routes: tuple[str, ...] = (config.health,)
    else:
        health_routes = HEALTH_ROUTES if own_command else ("/health_generate",)
    timeout = config.launch_timeout_s if health_timeout_s is None else health_timeout_s

    inherited = {k: v for k, v in os.environ.items() if k not in SECRET_ENV_VARS}
    env = {**inherited, "PYTHONUNBUFFERED": "1", **config.env}
    scrub = known_secrets(api_key, secrets)
    tag = env[reaper.TAG_ENV_VAR] = f"{os.getpid()}-{uuid.uuid4().hex}"
    if gpu_ids is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible_devices_value(
            gpu_ids, env.get("CUDA_VISIBLE_DEVICES")
        )
    if port is not None and not port_is_free(host, port):
        raise LaunchError(f"server config {config.name!r}: port {port} on {host} is in use")

    log_path = _log_file(Path(log_dir), config.name)
    start = time.monotonic()
    deadline = start + timeout
    for attempt in range(1, PORT_ATTEMPTS + 1):
        try:
            claim = PortClaim(port, None) if port is not None else claim_port(host, port_range)
        except OSError as exc:
            raise LaunchError(f"server config {config.name!r}: {exc}") from None
        chosen = claim.port
        if own_command:
            # The key, if any, is the command's business (never substituted into argv here).
            argv = config.launch_argv(host=host, port=chosen)
        else:
            # A config's ``python`` runs SGLang; the simulator always runs in this interpreter.
            interpreter = config.python if config.python and not simulate else sys.executable
            argv = [interpreter, "-m", module, "--model-path", config.model, *config.args]
            argv += ["--host", host, "--port", str(chosen)]
            if simulate and config.sim_profile:
                argv += ["--sim-profile", config.sim_profile]
            if simulate:
                argv += config.sim_args
            if api_key:
                argv += ["--api-key", api_key]
        url = f"http://{'[' + host + ']' if ':' in host else host}:{chosen}"
        handle = ServerHandle(
            url=url,
            mode=mode,
            config=config,
            api_key=api_key,
            log_path=log_path,
            argv=argv,
            gpu_ids=gpu_ids,
            grace_s=grace_s,
            secrets=scrub,
        )
        handle._port_claim = claim  # held while the server runs, released by close()
        handle._tag = tag
        with log_path.open("ab") as log:
            cvd = env.get("CUDA_VISIBLE_DEVICES")
            log.write(
                f"# llmperf: {mode} {config.name!r} attempt {attempt} at {url}"
                f"{f' CUDA_VISIBLE_DEVICES={cvd}' if cvd is not None else ''}:"
                f" {' '.join(handle.argv)}\n".encode()
            )
            log.flush()
            t_spawn = time.monotonic()
            try:
                proc = keeper.start(argv, env=env, stdout=log)
            except OSError as exc:
                where = (
                    ".command[0]" if own_command else ".python" if argv[0] == config.python else ""
                )
                claim.release()
                raise LaunchError(
                    f"server config {config.name!r}{where}: cannot start {argv[0]}: {exc}"
                ) from None
        handle._proc = proc
        register(handle)
        WATCHDOG.send(
            {
                "op": "add",
                "pgid": proc.pid,
                "grace": grace_s,
                "log": str(log_path),
                "secrets": scrub,
                "tag": tag,
            }
        )
        try:
            with http_client(url, api_key) as client:
                ready, last = poll_ready(client, url, deadline, proc, health_routes)
                if ready is not None:
                    handle.startup_s = time.monotonic() - t_spawn
                    handle.kind = discover(client, url, ready)
        except BaseException:
            handle.close(grace_s=min(grace_s, 2.0))  # Ctrl-C during startup: stop it now
            raise
        if ready is not None:
            return handle

        rc = proc.poll()
        elapsed = time.monotonic() - start
        tail = handle.log_tail(TAIL_LINES_IN_ERRORS)
        port_taken = any(m in tail.lower() for m in _PORT_TAKEN_MARKERS)
        # A command that daemonizes its server exits while the server it forked runs on.
        left = [] if rc is None else _left_running(proc, tag)
        answering = rc is not None and not port_taken and _answers(host, chosen)
        # A daemon left running may still be starting: give it a moment to show it serves.
        settle = time.monotonic() + _DAEMON_ANSWER_WAIT_S
        while left and not answering and not port_taken and time.monotonic() < settle:
            time.sleep(_SETTLE_PAUSE_S)
            answering = _answers(host, chosen)
            if not any(reaper.is_running(p) for p in left):
                break
        left_text = ", ".join(f"pid {p.pid} ({_command(p)})" for p in left)
        handle.close(grace_s=grace_s)
        if rc is not None and rc != 0 and port_taken and port is None and attempt < PORT_ATTEMPTS:
            with log_path.open("ab") as log:
                log.write(f"# llmperf: port {chosen} was taken; retrying\n".encode())
            continue
        if rc is None:
            what = f"did not become healthy within {timeout:g} s (last: {last})"
        elif rc < 0:
            what = f"was killed by {_signal_name(rc)} after {elapsed:.1f} s"
        else:
            what = f"exited with code {rc} after {elapsed:.1f} s"
        if port_taken:
            what += f"; port {chosen} was already in use"
        elif left or answering:
            parts = [f"port {chosen} still answered"] if answering else []
            parts += [f"it left running {left_text} (stopped now)"] if left else []
            what += (
                f", but {' and '.join(parts)}; a launched command must run its server in the"
                " foreground, not daemonize it"
            )
        notable = _notable_lines(log_path, tail)
        message = (
            f"{mode} server {config.name!r} ({url}) {what}.\n"
            f"  log: {log_path}\n"
            + ("  earlier, the server said:\n" if notable else "")
            + "".join(f"    {line}\n" for line in notable)
            + f"  last {TAIL_LINES_IN_ERRORS} log lines:\n"
            + "\n".join(f"    {line}" for line in tail.splitlines())
        )
        for secret in scrub:
            message = redact(message, secret)
        raise ServerStartError(
            message,
            exit_code=rc if rc is not None else handle.exit_code,
            log_path=log_path,
            log_tail=tail,
        )
    raise AssertionError("unreachable")  # pragma: no cover


def attach(
    url: str,
    api_key: str | None = None,
    timeout_s: float = 30.0,
    *,
    config: ServerConfig | None = None,
) -> ServerHandle:
    """A handle on an already-running server, once it is ready, with what it turned out to be.

    Ready means the first of ``/health_generate``, ``/health``, ``/v1/models`` that exists
    answers 200; ``handle.kind`` then says whether it is SGLang, vLLM or another
    OpenAI-compatible server, its served model and cache-reset route. No process is owned:
    ``close()`` does nothing to the server.
    """
    url = url.rstrip("/")
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise AttachError(f"invalid server URL {url!r}: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise AttachError(f"invalid server URL {url!r}: expected http(s)://host:port")
    deadline = time.monotonic() + timeout_s
    with http_client(url, api_key) as client:
        ready, last = poll_ready(client, url, deadline, None, HEALTH_ROUTES)
        if ready is None:
            raise AttachError(
                f"server at {url} did not answer any of GET {', '.join(HEALTH_ROUTES)} with 200"
                f" within {timeout_s:g} s (last: {last}); is it running and reachable?"
            )
        kind = discover(client, url, ready)
    handle = ServerHandle(url=url, mode="attached", config=config, api_key=api_key)
    handle.kind = kind
    return handle
