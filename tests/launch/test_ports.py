"""Ports: asked of the OS and claimed machine-wide, so that concurrent sessions (separate
processes, as xdist workers and parallel CI jobs are) launching at once never collide."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_llmperf.launch.ports import claim_port, free_port

from ._helpers import FAKE_SGLANG

# One session: launch a (fake) server on an OS-chosen port, report it, keep it up until told.
SESSION = f"""
import json, sys
from pathlib import Path
from pytest_llmperf.launch.launcher import launch
from pytest_llmperf.launch.server_config import ServerConfig
cfg = ServerConfig(name="s", model="fake/model", launch_timeout_s=60,
                   env={{"PYTHONPATH": {str(FAKE_SGLANG)!r}, "FAKE_MODE": "healthy"}})
rng = tuple(map(int, sys.argv[2].split("-"))) if len(sys.argv) > 2 else None
with launch(cfg, log_dir=Path(sys.argv[1]), simulate=False, port_range=rng) as h:
    print(json.dumps({{"url": h.url, "log": str(h.log_path)}}), flush=True)
    sys.stdin.read()
"""


def test_a_claimed_port_is_not_handed_out_again_until_released() -> None:
    first = claim_port()
    others = [claim_port() for _ in range(20)]
    try:
        assert first.port not in {c.port for c in others}
    finally:
        for c in others:
            c.release()
    first.release()
    first.release()  # idempotent


@pytest.mark.parametrize("narrow", [False, True], ids=["os-chosen", "narrow-range"])
def test_concurrent_sessions_launching_at_once_never_collide(tmp_path: Path, narrow: bool) -> None:
    n = 6
    # A range of 8 ports for 6 sessions: first-free scanning would give them all one port.
    rng = [f"{(s := free_port())}-{s + 8}"] if narrow else []
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SESSION, str(tmp_path / f"s{i}"), *rng],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(n)
    ]
    try:
        reports = []
        for p in procs:
            assert p.stdout is not None
            line = p.stdout.readline()
            assert line, f"session {p.pid} failed to launch (rc {p.poll()})"
            reports.append(json.loads(line))
        urls = [r["url"] for r in reports]
        assert len(set(urls)) == n, urls
        for r in reports:  # each on its first attempt: no session lost a port race
            assert "was taken; retrying" not in Path(r["log"]).read_text()
    finally:
        for p in procs:
            if p.stdin is not None:
                p.stdin.close()
        for p in procs:
            p.wait(timeout=60)
