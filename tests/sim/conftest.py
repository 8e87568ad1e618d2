"""Fixtures for the simulator front's tests: a small fake engine and in-process servers.

The server runs on its own event loop in a thread, so tests use plain sync httpx clients and
parse SSE bytes themselves. The fake engine implements ``engine_api.Engine`` with fixed,
fast steps so the front's formats can be tested without depending on the performance model.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from pytest_llmperf.sim.engine_api import EngineStats, SimRequest, TokenEvent
from pytest_llmperf.sim.faults import Faults
from pytest_llmperf.sim.knobs import ServerKnobs
from pytest_llmperf.sim.server import SimServer
from tests.sim_servers import ServerThread


class FakeEngine:
    """Continuous batching with a fixed step time and fixed tokens per step (spec: > 1)."""

    def __init__(
        self, *, step_s: float = 0.002, tokens_per_step: int = 1, max_running: int = 64
    ) -> None:
        self.step_s = step_s
        self.tokens_per_step = tokens_per_step
        self.max_running = max_running
        self.waiting: list[SimRequest] = []
        self.running: dict[str, list[Any]] = {}  # rid -> [req, count, verify_ct]
        self.submitted: list[SimRequest] = []
        self.aborted: list[str] = []
        self.resets = 0
        self.total_out = 0
        self.paused = False
        self.max_context = 10_000

    def submit(self, req: SimRequest) -> None:
        self.submitted.append(req)
        if req.prompt_len >= self.max_context:
            req.on_event(
                TokenEvent(0, 0, True, {"type": "abort", "message": "too long", "status_code": 400})
            )
            return
        self.waiting.append(req)

    def abort(self, rid: str) -> None:
        self.aborted.append(rid)
        self.waiting = [r for r in self.waiting if r.rid != rid]
        entry = self.running.pop(rid, None)
        if entry is not None:
            entry[0].on_event(TokenEvent(0, entry[1], True, {"type": "abort"}, time.monotonic()))

    def is_idle(self) -> bool:
        return not self.waiting and not self.running

    def reset_metrics(self) -> None:
        self.resets += 1

    def stats(self) -> EngineStats:
        return EngineStats(
            num_running=len(self.running),
            num_queued=len(self.waiting),
            used_kv_tokens=sum(e[0].prompt_len + e[1] for e in self.running.values()),
            max_total_num_tokens=100_000,
            effective_max_running_requests=self.max_running,
            last_gen_throughput=123.0,
            avg_spec_accept_length=float(self.tokens_per_step)
            if self.tokens_per_step > 1
            else None,
            total_output_tokens=self.total_out,
            total_requests=len(self.submitted),
            lag_ms_p99=0.0,
            behind_schedule=False,
        )

    def ground_truth(self) -> dict[str, Any]:
        return {"requests": [[r.rid, r.prompt_len] for r in self.submitted]}

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.step_s)
            if self.paused:
                continue
            while self.waiting and len(self.running) < self.max_running:
                req = self.waiting.pop(0)
                self.running[req.rid] = [req, 0, 0]
            t = time.monotonic()
            for rid, entry in list(self.running.items()):
                req, count, vct = entry
                n = min(self.tokens_per_step if count else 1, req.max_new_tokens - count)
                count += n
                vct += 1
                entry[1], entry[2] = count, vct
                self.total_out += n
                done = count >= req.max_new_tokens
                if done:
                    del self.running[rid]
                req.on_event(
                    TokenEvent(
                        n,
                        count,
                        done,
                        {"type": "length", "length": count} if done else None,
                        t,
                        vct if self.tokens_per_step > 1 else 0,
                    )
                )


@pytest.fixture
def make_server() -> Iterator[Callable[..., ServerThread]]:
    """Factory: ``make_server(engine=..., faults=..., **knob_overrides)`` -> running server."""
    started: list[ServerThread] = []

    def _make(
        engine: Any | None = None,
        faults: Faults | None = None,
        wait_ready: bool = True,
        **knobs: Any,
    ) -> ServerThread:
        knobs.setdefault("port", 0)
        eng = engine if engine is not None else FakeEngine()
        holder: list[ServerThread] = []
        server = SimServer(
            ServerKnobs(**knobs),
            faults=faults,
            engine=eng,
            startup_lines=[],
            exit_process=lambda code: holder[0].exit_codes.append(code),
        )
        st = ServerThread(server)
        holder.append(st)
        started.append(st)
        return st.start(wait_ready=wait_ready)

    yield _make
    for st in started:
        st.stop()


def sse_events(raw: bytes) -> list[bytes]:
    """Split an SSE body on blank lines; each item is the payload after ``data: ``."""
    out = []
    for block in raw.split(b"\n\n"):
        if not block:
            continue
        assert block.startswith(b"data: "), block[:80]
        out.append(block[len(b"data: ") :])
    return out


def sse_json(raw: bytes) -> tuple[list[dict[str, Any]], bool]:
    """Parsed JSON events and whether the stream ended with ``[DONE]``."""
    events = sse_events(raw)
    done = bool(events) and events[-1] == b"[DONE]"
    return [orjson.loads(e) for e in events if e != b"[DONE]"], done


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class SimProcess:
    """``python -m pytest_llmperf.sim`` as a real subprocess, output captured to a file."""

    def __init__(self, args: list[str], log_path: Path, env: dict[str, str] | None = None):
        self.port = free_port()
        self.log_path = log_path
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = open(log_path, "wb")  # closed in stop()
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pytest_llmperf.sim", "--port", str(self.port), *args],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=full_env,
            start_new_session=True,
        )

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def wait_healthy(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"exited {self.proc.returncode}:\n{self.log()}"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/health_generate", timeout=1).status_code == 200:
                    return
            time.sleep(0.05)
        raise AssertionError(f"not healthy within {timeout}s:\n{self.log()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()


@pytest.fixture
def sim_process(tmp_path: Path) -> Iterator[Callable[..., SimProcess]]:
    procs: list[SimProcess] = []

    def _start(*args: str, env: dict[str, str] | None = None) -> SimProcess:
        p = SimProcess(list(args), tmp_path / f"sim{len(procs)}.log", env)
        procs.append(p)
        return p

    yield _start
    for p in procs:
        p.stop()


def profile_args() -> list[str]:
    """No flag if the default profile is shipped, else the first shipped profile by name."""
    from pytest_llmperf.sim.profile import available_profiles, load_profile

    try:
        load_profile(None)
        return []
    except Exception:
        names = available_profiles()
        assert names, "no simulator profile is shipped"
        return ["--sim-profile", names[0]]
