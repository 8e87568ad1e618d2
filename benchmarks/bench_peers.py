"""Client CPU per output token against SGLang's real stream shapes, ours vs SGLang's bench_serving.

The stream server is ``bench_loadgen.py``'s (one process pinned to CPU0, pre-encoded events sent
as fast as the socket takes them), here with the shapes real servers send:

- ``sglang``: SGLang 0.5.23's native ``/generate`` stream, non-incremental (its default): every
  event repeats the cumulative text and ``output_ids``, then ``meta_info``. A request moves
  O(n²) bytes: 0.1 MB at 128 tokens, 4.9 MB at 1000, 75 MB at 4000;
- ``openai``: vLLM/SGLang chat chunks with ``continuous_usage_stats`` usage in every chunk.

Both clients run one at a time on CPU1 at the same concurrency and request count:

- ``ours``: ``LoadGenerator`` as a sweep runs it (``bench_loadgen.py --client ours``); its CPU is
  the process CPU time of the measured window (the generator is opened before it);
- ``bench_serving``: ``python -m sglang.bench_serving`` from ``~/.cache/llmperf-peers/sgl``
  (``--backend sglang`` or ``sglang-oai-chat``, ``random-ids``, one warm-up request); its CPU
  is the child's rusage, minus a start-up run of the same command with one prompt, over the
  tokens the extra requests carried (marginal CPU per output token).

Tokens are counted by the server (every response has exactly the output length). Runs are
interleaved, ``--repeat`` times; the table shows medians with (min-max) and the load average.

    python benchmarks/bench_peers.py [--output-lens 128,1000,4000] [--shapes sglang,openai]
        [--concurrency 256] [--requests 512] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PEERS = Path.home() / ".cache" / "llmperf-peers"
PEER_PYTHON = PEERS / "sgl" / "bin" / "python"
TOKENIZER = PEERS / "tokenizer"
TARGET_RATIO = 3.0  # the target: ours >= 3x less CPU per token than bench_serving ...
TARGET_CASE = ("sglang", 1000, 256)  # ... on the cumulative stream, 1000 tokens, C=256
BYTES_BUDGET = 4e9  # bytes one run may move: 4000-token SGLang streams run fewer requests
MIN_TOKENS = 256 * 1024
RUN_TIMEOUT_S = 900.0

sys.path.insert(0, str(HERE))
import bench_loadgen  # noqa: E402  (the stream server and our client's runner)


def _on_cpu1() -> None:
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {1})


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_ours(url: str, shape: str, n: int, c: int, requests: int) -> dict[str, Any]:
    cmd = [sys.executable, str(HERE / "bench_loadgen.py"), "--events", str(n), "--shape", shape]
    cmd += ["--client", "ours", "--url", url, "--n", str(c), "--per-worker", str(requests // c)]
    out = subprocess.run(cmd, capture_output=True, timeout=RUN_TIMEOUT_S, check=True)
    r: dict[str, Any] = json.loads(out.stdout.decode().strip().splitlines()[-1])
    if r["errors"] or r["tokens"] != requests * n:
        raise RuntimeError(f"ours: {r['errors']} errors, {r['tokens']} tokens: {r['first_error']}")
    return {"cpu": r["cpu"], "wall": r["wall"], "tokens": r["tokens"], "events": r["events"]}


def run_bench_serving(url: str, shape: str, n: int, c: int, prompts: int) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one whole bench_serving process."""
    backend = "sglang-oai-chat" if shape == "openai" else "sglang"
    cmd = [str(PEER_PYTHON), "-m", "sglang.bench_serving", "--backend", backend]
    cmd += ["--base-url", url, "--dataset-name", "random-ids", "--random-input-len", "8"]
    cmd += ["--random-output-len", str(n), "--random-range-ratio", "1", "--disable-tqdm"]
    cmd += ["--num-prompts", str(prompts), "--max-concurrency", str(c), "--warmup-requests", "1"]
    cmd += ["--tokenizer", str(TOKENIZER), "--model", str(TOKENIZER)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    c0, t0 = _children_cpu(), time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="llmperf-bench-serving-") as tmp:
        out = subprocess.run(  # in a scratch dir: bench_serving writes its results to cwd
            cmd,
            capture_output=True,
            timeout=RUN_TIMEOUT_S,
            env=env,
            preexec_fn=_on_cpu1,
            check=False,
            cwd=tmp,
        )
    cpu, wall = _children_cpu() - c0, time.perf_counter() - t0
    text = out.stdout.decode(errors="replace")
    if out.returncode != 0 or f"Successful requests:                     {prompts}" not in text:
        tail = (text + out.stderr.decode(errors="replace"))[-1500:]
        raise RuntimeError(f"bench_serving failed (rc {out.returncode}): {tail}")
    return cpu, wall


def _served(url: str) -> int:
    return int(bench_loadgen._get(url, "/stats")["served"])


def _spread(values: list[float], fmt: str) -> str:
    med = statistics.median(values)
    if len(values) == 1:
        return format(med, fmt)
    return f"{format(med, fmt)} ({format(min(values), fmt)}-{format(max(values), fmt)})"


def measure_case(
    shape: str, n: int, c: int, requests: int, repeat: int, pace: float = 0.0
) -> tuple[dict[str, list[dict[str, float]]], int]:
    """Interleaved runs of both clients against one server; per-run CPU µs per token."""
    port = bench_loadgen._free_port()
    url = f"http://127.0.0.1:{port}"
    me = [sys.executable, str(HERE / "bench_loadgen.py"), "--events", str(n), "--shape", shape]
    me += ["--pace", str(pace)]
    server = subprocess.Popen([*me, "--serve", str(port)], stdout=subprocess.PIPE)
    size = len(bench_loadgen._response(n, shape))
    ours: list[dict[str, float]] = []
    starts: list[float] = []  # bench_serving start-up runs: warm-up + 1 request
    mains: list[tuple[float, float, int]] = []  # (cpu, wall, requests served)
    try:
        assert server.stdout is not None
        if b"ready" not in server.stdout.readline():
            raise RuntimeError("stream server did not start")
        for _ in range(repeat):
            r = run_ours(url, shape, n, c, requests)
            ours.append(
                {
                    "us_tok": r["cpu"] / r["tokens"] * 1e6,
                    "ev_cpu_s": r["events"] / r["cpu"],
                    "mb_cpu_s": requests * size / r["cpu"] / 1e6,
                    "core": 100 * r["cpu"] / r["wall"],
                }
            )
            starts.append(run_bench_serving(url, shape, n, 1, 1)[0])
            s0 = _served(url)
            cpu, wall = run_bench_serving(url, shape, n, c, requests)
            mains.append((cpu, wall, _served(url) - s0))
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)
    start_cpu = statistics.median(starts)
    peer = []
    for cpu, wall, served in mains:
        marginal, extra = cpu - start_cpu, served - 2  # less the start-up run's 2 requests
        peer.append(
            {
                "us_tok": marginal / (extra * n) * 1e6,
                "ev_cpu_s": extra * n / marginal,  # one event per token on these streams
                "mb_cpu_s": extra * size / marginal / 1e6,
                "core": 100 * cpu / wall,
            }
        )
    return {"ours": ours, "bench_serving": peer}, size


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="sglang,openai")
    ap.add_argument("--output-lens", default="128,1000,4000")
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--requests", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--pace",
        type=float,
        default=0.0,
        help="server events/s in all, one write per event (0: as fast as the socket takes them)",
    )
    args = ap.parse_args()
    if not PEER_PYTHON.exists():
        print(f"bench_serving not installed: {PEER_PYTHON} is missing", file=sys.stderr)
        return 2
    from tabulate import tabulate

    load_before = os.getloadavg()
    rows, verdict = [], None
    for shape in args.shapes.split(","):
        for n in (int(x) for x in args.output_lens.split(",")):
            size = len(bench_loadgen._response(n, shape))
            # at least MIN_TOKENS a run (start-up noise), at most BYTES_BUDGET moved
            requests = max(args.requests, MIN_TOKENS // n)
            requests = min(requests, max(16, int(BYTES_BUDGET / size) // 16 * 16))
            c = min(args.concurrency, requests)
            requests = requests // c * c
            runs, size = measure_case(shape, n, c, requests, args.repeat, args.pace)
            ours = statistics.median(r["us_tok"] for r in runs["ours"])
            ref = statistics.median(r["us_tok"] for r in runs["bench_serving"])
            print(
                f"{shape} n={n} C={c}: ours {ours:.2f} vs bench_serving {ref:.2f} µs/token",
                file=sys.stderr,
            )
            for kind, rs in runs.items():
                ratio = _spread([ref / r["us_tok"] for r in runs["ours"]], ".2f") + "x"
                rows.append(
                    [
                        shape,
                        n,
                        f"{size / 1e6:.2f}",
                        c,
                        requests,
                        kind,
                        _spread([r["us_tok"] for r in rs], ".2f"),
                        ratio if kind == "ours" else "",
                        _spread([r["ev_cpu_s"] for r in rs], ",.0f"),
                        _spread([r["mb_cpu_s"] for r in rs], ",.0f"),
                        _spread([r["core"] for r in rs], ".0f"),
                    ]
                )
            if (shape, n, c) == TARGET_CASE:
                verdict = ref / ours
    print(
        tabulate(
            rows,
            headers=[
                "stream",
                "output len",
                "MB/request",
                "C",
                "requests",
                "client",
                "CPU µs/token",
                "bench_serving / ours",
                "events per CPU-s",
                "MB per CPU-s",
                "client CPU %",
            ],
            tablefmt="github",
            disable_numparse=True,
        )
    )
    load_after = os.getloadavg()
    paced = f"{args.pace:,.0f} events/s in all, one write per event"
    print(
        f"\nserver: {paced if args.pace else 'as fast as the socket takes it'}; "
        f"medians of {args.repeat} interleaved runs (min-max); {os.cpu_count()} CPUs, server on "
        "CPU0, client on CPU1; CPU = process CPU time (ours: measured window; bench_serving: "
        "whole process minus a one-prompt start-up run). Events and MB per CPU-second: what "
        "one client process ingests with a core to itself.\n"
        f"load average before {' '.join(f'{x:.2f}' for x in load_before)}, after "
        f"{' '.join(f'{x:.2f}' for x in load_after)}"
    )
    if verdict is None:
        print(f"TARGET MISS: the case {TARGET_CASE} was not measured")
        return 1
    ok = verdict >= TARGET_RATIO
    print(
        f"TARGET {'PASS' if ok else 'MISS'}: bench_serving spends {verdict:.2f}x our CPU per "
        f"token on the cumulative SGLang stream at 1000 tokens, C=256 (target >= {TARGET_RATIO:g}x)"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
