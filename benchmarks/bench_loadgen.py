"""The load generator's ceiling on this machine (a script, not a test).

Measures events/s and client CPU µs per event at several stream counts against a zero-delay
local stream server that blasts pre-encoded SGLang ``/generate`` events, for:

- ``ours``: ``pytest_llmperf.client.LoadGenerator`` (httpx API over aiohttp, uvloop), as
  sweeps run it;
- ``ours-asyncio``: the same on the stock asyncio loop (a like-for-like loop comparison);
- ``reference``: a client made the way SGLang's ``bench_serving`` makes it: a new aiohttp
  ``ClientSession`` per request, ``async for line in response.content``, ``json.loads`` per line,
  on the stock asyncio loop.

Every client and level runs in a fresh process pinned to one core, the server in another process
on the other core; the server's own CPU is reported so you can see it was not the bottleneck.

    python benchmarks/bench_loadgen.py [--streams 16,128,256,1024] [--events 512]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import resource
import socket
import subprocess
import sys
import time
from typing import Any

DEFAULT_EVENTS = 512
EVENTS_PER_REQUEST = DEFAULT_EVENTS  # set from --events in each process
TARGET_EVENTS = 250_000  # per run: enough requests that start-up is a small share
SERVER_READY_TIMEOUT_S = 15.0
RUN_TIMEOUT_S = 600.0
WRITE_SLICE = 64 * 1024


# --- the stream server -------------------------------------------------------------------------
def _response(n_events: int) -> bytes:
    """One HTTP/1.1 chunked response: one chunk per event, cumulative text as SGLang sends it."""
    import orjson

    chunks = []
    text = ""
    for ct in range(1, n_events + 1):
        text += "ab"
        finish = {"type": "length", "length": n_events} if ct == n_events else None
        meta = {
            "id": "bench",
            "finish_reason": finish,
            "prompt_tokens": 8,
            "completion_tokens": ct,
            "cached_tokens": 0,
        }
        chunks.append(b"data: " + orjson.dumps({"text": text, "meta_info": meta}) + b"\n\n")
    chunks.append(b"data: [DONE]\n\n")
    body = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"transfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n"
    )
    return head + body


class _StreamProtocol(asyncio.Protocol):
    response = b""
    open_now = 0
    open_peak = 0
    served = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t: asyncio.Transport = transport  # type: ignore[assignment]
        self.buf = b""
        self.pending: memoryview | None = None
        self.paused = False
        cls = _StreamProtocol
        cls.open_now += 1
        cls.open_peak = max(cls.open_peak, cls.open_now)

    def connection_lost(self, exc: Exception | None) -> None:
        _StreamProtocol.open_now -= 1

    def data_received(self, data: bytes) -> None:
        self.buf += data
        for _ in range(64):  # bounded: pipelined requests are rare
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].lower()
            length = 0
            i = head.find(b"content-length:")
            if i >= 0:
                length = int(head[i + 15 :].split(b"\r\n", 1)[0])
            if len(self.buf) < end + 4 + length:
                return
            self.buf = self.buf[end + 4 + length :]
            if head.startswith(b"get /stats"):
                stats = json.dumps(
                    {"open_peak": _StreamProtocol.open_peak, "served": _StreamProtocol.served}
                ).encode()
                self.t.write(
                    b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(stats), stats)
                )
                continue
            if head.startswith(b"post /reset"):
                _StreamProtocol.open_peak = _StreamProtocol.open_now
                self.t.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                continue
            _StreamProtocol.served += 1
            self.pending = memoryview(self.response)
            self._pump()

    def _pump(self) -> None:
        # Flow control: 1024 streams x ~400 KB must not pile up in user-space buffers.
        while self.pending is not None and not self.paused:
            piece, rest = self.pending[:WRITE_SLICE], self.pending[WRITE_SLICE:]
            self.t.write(piece)
            self.pending = rest if len(rest) else None

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self._pump()


def serve(port: int, n_events: int) -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    _StreamProtocol.response = _response(n_events)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(_StreamProtocol, "127.0.0.1", port, backlog=4096)
        print("ready", flush=True)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


# --- clients -----------------------------------------------------------------------------------
async def _run_ours(url: str, streams: int, per_worker: int) -> dict[str, Any]:
    from pytest_llmperf.client import LoadGenerator

    events = tokens = errors = 0
    first_error = None
    async with LoadGenerator(url, "sglang", request_timeout_s=RUN_TIMEOUT_S) as gen:
        body = gen.body([1, 2, 3, 4, 5, 6, 7, 8], EVENTS_PER_REQUEST)

        async def worker(w: int) -> None:
            nonlocal events, tokens, errors, first_error
            for k in range(per_worker):
                rec = await gen.request(w * per_worker + k, [], EVENTS_PER_REQUEST, body=body)
                if rec.ok:
                    events += rec.events
                    tokens += rec.output_tokens
                else:
                    errors += 1
                    first_error = first_error or rec.error

        await asyncio.gather(*(worker(w) for w in range(streams)))
    return {"events": events, "tokens": tokens, "errors": errors, "first_error": first_error}


async def _run_reference(url: str, streams: int, per_worker: int) -> dict[str, Any]:
    """bench_serving's shape: fresh session per request, line iteration, json.loads per line."""
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=6 * 60 * 60)
    events = tokens = errors = 0
    first_error = None
    payload = {
        "input_ids": [1, 2, 3, 4, 5, 6, 7, 8],
        "stream": True,
        "sampling_params": {
            "temperature": 0.0,
            "max_new_tokens": EVENTS_PER_REQUEST,
            "ignore_eos": True,
        },
    }

    async def one() -> None:
        nonlocal events, tokens, errors, first_error
        async with aiohttp.ClientSession(timeout=timeout, read_bufsize=10 * 1024**2) as session:
            st = time.perf_counter()
            ttft, last_len, output_len, n_ev = 0.0, 0, 0, 0
            most_recent = st
            itl: list[float] = []
            try:
                async with session.post(url + "/generate", json=payload) as response:
                    if response.status != 200:
                        raise RuntimeError(f"HTTP {response.status}")
                    async for chunk_bytes in response.content:
                        chunk_bytes = chunk_bytes.strip()
                        if not chunk_bytes:
                            continue
                        chunk = chunk_bytes.decode("utf-8").removeprefix("data: ")
                        if chunk == "[DONE]":
                            continue
                        data = json.loads(chunk)
                        if data.get("text"):
                            ts = time.perf_counter()
                            output_len = data["meta_info"]["completion_tokens"]
                            n_ev += 1
                            if ttft == 0.0:
                                ttft = ts - st
                            else:
                                n_new = output_len - last_len
                                if n_new == 0:
                                    continue
                                itl.extend([(ts - most_recent) / n_new] * n_new)
                            most_recent = ts
                            last_len = output_len
                events += n_ev
                tokens += output_len
            except Exception as e:  # the reference counts, it does not stop
                errors += 1
                first_error = first_error or repr(e)

    async def worker() -> None:
        for _ in range(per_worker):
            await one()

    await asyncio.gather(*(worker() for _ in range(streams)))
    return {"events": events, "tokens": tokens, "errors": errors, "first_error": first_error}


def run_client(kind: str, url: str, streams: int, per_worker: int) -> dict[str, Any]:
    from pytest_llmperf.monitor import LoopMonitor

    async def measured() -> dict[str, Any]:
        mon = LoopMonitor()
        mon.start()
        t0, c0 = time.perf_counter(), time.process_time()
        if kind == "reference":
            out = await _run_reference(url, streams, per_worker)
        else:
            out = await _run_ours(url, streams, per_worker)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        health = await mon.stop()
        out.update(
            wall=wall,
            cpu=cpu,
            lag_p99_ms=health.loop_lag_p99_ms,
            saturated=health.saturated,
            reason=health.reason,
        )
        return out

    if kind == "ours":
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as r:
            return r.run(measured())
    return asyncio.run(measured())


# --- driver ------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _raise_nofile() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 65536
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def _pin(cpu: int) -> None:
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {cpu % (os.cpu_count() or 1)})


def _get(url: str, path: str, method: str = "GET") -> dict[str, Any]:
    import httpx

    r = httpx.request(method, url + path, timeout=10.0, trust_env=False)
    return r.json() if r.content else {}


def main() -> int:
    global EVENTS_PER_REQUEST
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", default="16,128,256,1024")
    ap.add_argument("--clients", default="ours,ours-asyncio,reference")
    ap.add_argument("--events", type=int, default=DEFAULT_EVENTS)
    ap.add_argument("--target-events", type=int, default=TARGET_EVENTS)
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--client", help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--per-worker", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    _raise_nofile()
    EVENTS_PER_REQUEST = args.events
    if args.serve:
        _pin(0)
        serve(args.serve, args.events)
        return 0
    if args.client:
        _pin(1)
        print(json.dumps(run_client(args.client, args.url, args.n, args.per_worker)))
        return 0

    import psutil
    from tabulate import tabulate

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    me = [sys.executable, os.path.abspath(__file__), "--events", str(args.events)]
    server = subprocess.Popen([*me, "--serve", str(port)], stdout=subprocess.PIPE)
    rows = []
    try:
        assert server.stdout is not None
        deadline = time.monotonic() + SERVER_READY_TIMEOUT_S
        line = b""
        while time.monotonic() < deadline and b"ready" not in line:
            line = server.stdout.readline()
        if b"ready" not in line:
            raise RuntimeError("stream server did not start")
        sproc = psutil.Process(server.pid)
        results: dict[tuple[str, int], dict[str, Any]] = {}
        for streams in [int(s) for s in args.streams.split(",")]:
            per_worker = max(1, math.ceil(args.target_events / (streams * args.events)))
            for kind in args.clients.split(","):
                _get(url, "/reset", "POST")
                s0 = sproc.cpu_times()
                out = subprocess.run(
                    [
                        *me,
                        "--client",
                        kind,
                        "--url",
                        url,
                        "--n",
                        str(streams),
                        "--per-worker",
                        str(per_worker),
                    ],
                    capture_output=True,
                    timeout=RUN_TIMEOUT_S,
                    check=False,
                )
                s1 = sproc.cpu_times()
                if out.returncode != 0:
                    print(out.stderr.decode()[-2000:], file=sys.stderr)
                    continue
                r = json.loads(out.stdout.decode().strip().splitlines()[-1])
                stats = _get(url, "/stats")
                server_cpu = (s1.user + s1.system - s0.user - s0.system) / r["wall"] * 100
                r.update(server_cpu=server_cpu, open_peak=stats["open_peak"])
                results[(kind, streams)] = r
                rows.append(
                    [
                        streams,
                        kind,
                        r["events"],
                        r["errors"],
                        f"{r['wall']:.1f}",
                        f"{r['events'] / r['wall']:,.0f}",
                        f"{r['cpu'] / max(r['events'], 1) * 1e6:.1f}",
                        f"{100 * r['cpu'] / r['wall']:.0f}%",
                        f"{r['lag_p99_ms']:.1f}",
                        "yes" if r["saturated"] else "no",
                        f"{server_cpu:.0f}%",
                        r["open_peak"],
                        "",
                    ]
                )
                print(
                    f"done: {kind} x {streams}: {r['events'] / r['wall']:,.0f} ev/s "
                    f"errors={r['errors']} {r.get('first_error') or ''}",
                    file=sys.stderr,
                )
        # speed-up column once all clients of a level are in
        for row in rows:
            ref = results.get(("reference", row[0]))
            mine = results.get((row[1], row[0]))
            if ref and mine and row[1] != "reference" and ref["events"]:
                row[-1] = f"{(mine['events'] / mine['wall']) / (ref['events'] / ref['wall']):.1f}x"
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)
    print(
        tabulate(
            rows,
            headers=[
                "streams",
                "client",
                "events",
                "errors",
                "wall s",
                "events/s",
                "CPU µs/event",
                "client CPU",
                "loop lag p99 ms",
                "saturated",
                "server CPU",
                "server peak conns",
                "vs reference",
            ],
            tablefmt="github",
            disable_numparse=True,
        )
    )
    print(
        f"\n{args.events} events per request, cumulative text (SGLang's default stream); "
        f"{os.cpu_count()} CPUs, client pinned to CPU1, server to CPU0."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
