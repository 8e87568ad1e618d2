"""Does anything of an interrupted session survive it? ``ps`` after SIGINT, SIGTERM, SIGKILL.

For each signal and each kind of session, a real ``pytest`` runs a suite through the plugin in
a fresh directory, with a workload long enough to be measuring when signalled:

- ``single``: one simulated server, the load generator in pytest;
- ``2-clients``: the same with ``--llmperf-client-processes 2`` (two shard processes and the
  multiprocessing resource tracker);
- ``daemon``: a ``command`` server that double-forks, calls ``setsid`` and re-executes the
  simulator with an EMPTY environment (tests/launch/fixtures/env_clearing_daemon.py).

Once the server measures, everything the session runs is noted (pytest's descendants, its
launcher watchdog, the daemon); the signal is sent; the table gives the seconds until none of
it is left, and the ``ps`` lines of whatever is left then, or of any process naming the run's
directory (expected: none).

Usage: python benchmarks/bench_interrupts.py [--timeout 30] [--only daemon]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "launch" / "fixtures" / "env_clearing_daemon.py"
PYTEST = (
    "import signal, sys, pytest; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.exit(pytest.main(sys.argv[1:]))"
)
ARGS = ["-p", "no:cacheprovider", "-p", "no:randomly", "--llmperf-update"]
ARGS += ["--llmperf-input-len", "64", "--llmperf-output-len", "4000"]  # ~30 s per request
TEST = "def test_sweep(llmperf_point):\n    llmperf_point.assert_baseline()\n"
START_TIMEOUT_S = 90.0


def suite(kind: str, pid_file: Path) -> str:
    if kind == "daemon":
        command = [sys.executable, str(FIXTURE), "{port}", "{host}", str(pid_file), "foreground"]
        server = 'command = [{}]\nhealth = "/health_generate"'.format(
            ", ".join(f'"{part}"' for part in command)
        )
    else:
        server = "args = []"
    levels = "[4]" if kind == "2-clients" else "[1]"
    head = '[[server]]\nname = "plain"\nmodel = "sim/qwen-moe"\n'
    return f"{head}{server}\n\n[sweep]\nlevels = {levels}\n"


def watchdogs_of(pid: int) -> list[psutil.Process]:
    out = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if any("_watchdog_main" in part for part in cmd) and cmd[-1:] == [str(pid)]:
            out.append(proc)
    return out


def naming(path: Path) -> list[psutil.Process]:
    """Processes whose command line or working directory names ``path``."""
    out = []
    for proc in psutil.process_iter(["cmdline", "cwd"]):
        with contextlib.suppress(psutil.Error):
            text = " ".join(proc.info["cmdline"] or []) + " " + (proc.info["cwd"] or "")
            if str(path) in text:
                out.append(proc)
    return out


def measuring(path: Path, proc: subprocess.Popen[bytes], kind: str) -> bool:
    logs = list((path / "llmperf-results" / "logs").glob("*.log"))
    if not any("Cache flushed successfully" in p.read_text(errors="replace") for p in logs):
        return False
    if kind == "2-clients":
        kids = psutil.Process(proc.pid).children(recursive=True)
        return sum("spawn_main" in " ".join(k.cmdline()) for k in kids) >= 2
    if kind == "daemon":
        pid_file = path / "daemon.pid"
        return pid_file.exists() and bool(pid_file.read_text())
    return True


def ps_lines(pids: list[int]) -> list[str]:
    if not pids:
        return []
    out = subprocess.run(
        ["ps", "-o", "pid,ppid,stat,etime,args", "-p", ",".join(map(str, pids))],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.splitlines()
    return out[1:]


def one(kind: str, sig: signal.Signals, timeout: float) -> tuple[float | None, list[str], int]:
    with tempfile.TemporaryDirectory(prefix=f"llmperf-int-{kind}-") as tmp:
        path = Path(tmp)
        (path / "pytest.ini").write_text("[pytest]\n")
        (path / "llmperf.toml").write_text(suite(kind, path / "daemon.pid"))
        (path / "test_perf.py").write_text(TEST)
        extra = ["--llmperf-levels", "4", "--llmperf-client-processes", "2"]
        argv = [sys.executable, "-c", PYTEST, *ARGS, *(extra if kind == "2-clients" else [])]
        with (path / "out.txt").open("wb") as out:
            proc = subprocess.Popen(
                argv,
                cwd=path,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while not measuring(path, proc, kind):
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit(
                        f"{kind}: the session did not start measuring:\n"
                        + (path / "out.txt").read_text(errors="replace")[-3000:]
                    )
                time.sleep(0.1)
            session = {p.pid: p for p in psutil.Process(proc.pid).children(recursive=True)}
            session.update((p.pid, p) for p in watchdogs_of(proc.pid))
            session.update((p.pid, p) for p in naming(path))
            session.pop(proc.pid, None)
            t0 = time.monotonic()
            proc.send_signal(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=timeout)
            _, alive = psutil.wait_procs(list(session.values()), timeout=timeout)
            gone_s = time.monotonic() - t0 if not alive else None
            left = {p.pid for p in alive} | {p.pid for p in naming(path)}
            if proc.poll() is not None:
                left.discard(proc.pid)  # pytest itself has exited (and is reaped)
            return gone_s, ps_lines(sorted(left)), len(session)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--only", choices=["single", "2-clients", "daemon"])
    opts = parser.parse_args()
    kinds = [opts.only] if opts.only else ["single", "2-clients", "daemon"]
    rows = []
    for kind in kinds:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
            gone_s, lines, count = one(kind, sig, opts.timeout)
            rows.append((kind, sig.name, count, gone_s, lines))
            print(f"{kind:9} {sig.name:7} done", file=sys.stderr, flush=True)
    print(f"{'session':9}  {'signal':7}  {'procs':>5}  {'all gone after':>14}  ps lines left")
    for kind, name, count, gone_s, lines in rows:
        gone = f"{gone_s:.2f} s" if gone_s is not None else f"> {opts.timeout:g} s"
        print(f"{kind:9}  {name:7}  {count:5}  {gone:>14}  {len(lines)}")
        for line in lines:
            print(f"    {line}")
    if any(lines for *_, lines in rows):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
