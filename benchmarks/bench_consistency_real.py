"""Consistency probes on the real SGLang server: unchanged launches judged against each other.

Launches the real server (``LLMPERF_SGLANG_PYTHON``, CPU build; model from
``LLMPERF_SGLANG_MODEL``, default the ``model32k`` next to its venv) ``--launches`` times, one
after the other; each launch answers the plugin's 32 greedy probes (16 tokens) and is stopped.
Then each launch in turn is "new", judged by the plugin's rule against the next two launches as
its "baseline" (2 launches, as ``baseline_repeat = 2`` records them): nothing changed, so every
one of these runs should pass. Prints per run the verdict and the share of probes that differ.

    LLMPERF_SGLANG_PYTHON=.../venv/bin/python python benchmarks/bench_consistency_real.py
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx

from pytest_llmperf.base.probes import ProbeSet
from pytest_llmperf.core.probes import probe_prompts, run_probes
from pytest_llmperf.verdicts.consistency import judge_consistency

PYTHON = os.environ.get("LLMPERF_SGLANG_PYTHON", "")
MODEL = os.environ.get(
    "LLMPERF_SGLANG_MODEL", str(Path(PYTHON).parent.parent.parent / "model32k") if PYTHON else ""
)
READY_S = 300.0
PROBES, TOKENS, SEED = 32, 16, 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _launch_and_probe(log: Path) -> tuple[ProbeSet, float, float]:
    """One launch: (its answers, seconds to ready, seconds the probes took)."""
    port = _free_port()
    cmd = [
        PYTHON, "-m", "sglang.launch_server", "--model-path", MODEL, "--device", "cpu",
        "--host", "127.0.0.1", "--port", str(port), "--attention-backend", "torch_native",
        "--sampling-backend", "pytorch", "--disable-cuda-graph", "--max-total-tokens", "65536",
    ]  # fmt: skip
    env = {**os.environ, "SGLANG_USE_CPU_ENGINE": "1"}
    t0 = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        while time.monotonic() - t0 < READY_S:
            if proc.poll() is not None:
                raise RuntimeError(f"the server exited with {proc.returncode}; log: {log}")
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        else:
            raise RuntimeError(f"not ready within {READY_S:g} s; log: {log}")
        ready = time.monotonic() - t0
        t1 = time.monotonic()
        unit, outputs = run_probes(url, probe_prompts(PROBES, SEED), max_new_tokens=TOKENS)
        took = time.monotonic() - t1
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    return ProbeSet(seed=SEED, max_new_tokens=TOKENS, unit=unit, outputs=outputs), ready, took


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--launches", type=int, default=10)
    p.add_argument("--logs", type=Path, default=Path("/tmp/bench-consistency-real"))
    args = p.parse_args()
    if not PYTHON:
        raise SystemExit("set LLMPERF_SGLANG_PYTHON to the python of a venv with sglang")
    args.logs.mkdir(parents=True, exist_ok=True)
    sets: list[ProbeSet] = []
    for i in range(args.launches):
        got, ready, took = _launch_and_probe(args.logs / f"launch-{i}.log")
        sets.append(got)
        print(f"launch {i}: ready in {ready:.0f} s, 32 probes answered in {took:.1f} s", flush=True)
    n = len(sets)
    passed = 0
    for i in range(n):
        old = [sets[(i + 1) % n], sets[(i + 2) % n]]
        c = judge_consistency(old, [sets[i]], old_label="baseline", new_label=f"launch {i}")
        passed += c.verdict.value == "pass"
        print(f"run {i}: {c.verdict.value}: {c.message}")
    print(f"unchanged runs passed: {passed} of {n}")


if __name__ == "__main__":
    main()
