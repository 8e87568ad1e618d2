"""The simulated server's serving speed on this machine (a script, not a test).

Starts ``python -m pytest_llmperf.sim`` on a fast profile (a model rate of ~23k output tok/s at
256 running requests: 6 ms steps, 0.02 ms per sequence), holds ``--streams`` concurrent
``/generate`` streams against it with a bare aiohttp client, and after a warm-up reports over
the measuring window:

- output tok/s as the engine counts them (``/_sim/stats``),
- events/s as the client reads them (one ``data:`` line per event),
- the server process's CPU (100% = one core).

The mark is ``--target`` tok/s (default 20k, the rate the sweeps' simulated runs assume):
below it the simulator, not the server it stands for, would set the measured throughput. On a
shared machine the figures move with the load (the load average is printed before and after),
so this is a measurement to read, not a pass/fail check; ``tests/sim/test_server.py`` holds the
functional part (every stream completes with exactly its tokens).

    python benchmarks/bench_sim_streams.py [--streams 256] [--seconds 3] [--warmup 1.5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import psutil

from pytest_llmperf.sim.profile import PROFILES_DIR, available_profiles

READY_TIMEOUT_S = 20.0


def fast_profile(path: Path) -> Path:
    prof = json.loads((PROFILES_DIR / f"{available_profiles()[0]}.json").read_text())
    prof.update(
        name="bench-fast",
        hardware={"gpu_name": "Sim GPU", "gpu_memory_gb": 80.0, "tp_size": 1},
        model={
            "model_path": "sim/fast",
            "architecture": "LlamaForCausalLM",
            "weights_gb": 16.0,
            "kv_bytes_per_token": 4096,
            "context_length": 32768,
        },
        step={"base_ms": 6.0, "per_seq_ms": 0.02, "per_seq_exponent": 1.0, "per_kv_token_us": 0},
        prefill={"per_token_us": 1.0},
    )
    prof.pop("spec", None)
    path.write_text(json.dumps(prof))
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthy(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the simulator exited {proc.returncode} before it was healthy")
        try:
            if httpx.get(url + "/health_generate", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise SystemExit(f"the simulator was not healthy within {READY_TIMEOUT_S:.0f} s")


async def measure(url: str, pid: int, streams: int, warmup: float, seconds: float) -> Any:
    body = {
        "input_ids": [1] * 128,
        "sampling_params": {"max_new_tokens": 512, "ignore_eos": True},
        "stream": True,
    }
    events = 0
    stop = asyncio.Event()

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal events
        while not stop.is_set():
            async with session.post(url + "/generate", json=body) as r:
                async for chunk in r.content.iter_any():
                    events += chunk.count(b"data: ")

    async def served(session: aiohttp.ClientSession) -> int:
        async with session.get(url + "/_sim/stats") as r:
            return int((await r.json())["engine"]["total_output_tokens"])

    proc = psutil.Process(pid)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        tasks = [asyncio.create_task(worker(session)) for _ in range(streams)]
        await asyncio.sleep(warmup)
        s0 = await served(session)
        c0, e0, t0 = sum(proc.cpu_times()[:2]), events, time.monotonic()
        await asyncio.sleep(seconds)
        s1 = await served(session)
        dt = time.monotonic() - t0
        cpu = (sum(proc.cpu_times()[:2]) - c0) / dt
        stop.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return (s1 - s0) / dt, (events - e0) / dt, cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--warmup", type=float, default=1.5)
    ap.add_argument("--target", type=float, default=20_000.0)
    a = ap.parse_args()
    print(f"load average before: {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as tmp:
        profile = fast_profile(Path(tmp) / "fast.json")
        port = free_port()
        cmd = [sys.executable, "-m", "pytest_llmperf.sim", "--port", str(port)]
        cmd += ["--sim-profile", str(profile), "--max-running-requests", "512"]
        with open(Path(tmp) / "sim.log", "wb") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
            try:
                url = f"http://127.0.0.1:{port}"
                wait_healthy(url, proc)
                tok_s, ev_s, cpu = asyncio.run(
                    measure(url, proc.pid, a.streams, a.warmup, a.seconds)
                )
            finally:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
    print(f"load average after:  {os.getloadavg()}")
    print(f"{a.streams} streams: {tok_s:.0f} tok/s, {ev_s:.0f} events/s, server CPU {cpu:.0%}")
    verdict = "at or above" if tok_s >= a.target else "BELOW"
    print(f"{verdict} the {a.target:.0f} tok/s mark ({tok_s / a.target:.0%} of it)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
