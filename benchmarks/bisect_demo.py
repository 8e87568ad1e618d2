"""`git bisect run` over simulated SGLang "versions" with ``--llmperf-bisect``.

A throwaway git repository stands for SGLang's history: each commit holds the simulator flags
that version behaves like (``--sim-version`` and, from the bad commit on, a 30 % slowdown;
one commit cannot start at all). The baseline is recorded on the first commit, then
``git bisect run`` calls pytest with ``--llmperf-bisect`` at each step: exit 0 good, 1 bad,
125 cannot measure (skipped). The demo prints the commit git names as the first bad one.

    python benchmarks/bisect_demo.py [--bad 6] [--versions 8] [--broken 4]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

SUITE = """
[[server]]
name = "plain"
model = "sim/qwen-moe"
args = []

[sweep]
levels = [4]
input_len = 64
output_len = 128
metrics = ["output_throughput"]
"""
TEST = """
def test_sweep(llmperf_point):
    llmperf_point.assert_baseline()
"""
STEP = """
import subprocess, sys
from pathlib import Path
flags = (Path(sys.argv[1]) / "sim_args.txt").read_text().strip()
cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--llmperf-bisect",
       "--llmperf-sim-args", flags]
sys.exit(subprocess.run(cmd, cwd=sys.argv[2], timeout=600, check=False).returncode)
"""


def git(repo: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=1800, check=True
    )
    return out.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--versions", type=int, default=8)
    ap.add_argument("--bad", type=int, default=6, help="first bad version (1-based)")
    ap.add_argument("--broken", type=int, default=4, help="a version whose server cannot start")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        repo, suite = Path(tmp) / "sglang", Path(tmp) / "perf"
        repo.mkdir()
        suite.mkdir()
        (suite / "llmperf.toml").write_text(SUITE)
        (suite / "test_perf.py").write_text(TEST)
        (Path(tmp) / "step.py").write_text(STEP)
        git(repo, "init", "-q")
        git(repo, "config", "user.email", "demo@example.invalid")
        git(repo, "config", "user.name", "demo")
        for v in range(1, args.versions + 1):
            flags = f"--sim-version 0.5.{v}"
            if v >= args.bad:
                flags += " --sim-slowdown 1-4096:1.3"
            if v == args.broken:
                flags += " --sim-fault crash-on-start"
            (repo / "sim_args.txt").write_text(flags + "\n")
            git(repo, "add", "sim_args.txt")
            git(repo, "commit", "-q", "-m", f"version 0.5.{v}")
        first, last = git(repo, "rev-list", "--reverse", "HEAD").split()[0], "HEAD"
        git(repo, "checkout", "-q", first)
        record = [
            sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--llmperf-update",
            "--llmperf-sim-args", (repo / "sim_args.txt").read_text().strip(),
        ]  # fmt: skip
        subprocess.run(record, cwd=suite, timeout=900, check=True)
        git(repo, "checkout", "-q", "-")
        git(repo, "bisect", "start", last, first)
        step = [sys.executable, str(Path(tmp) / "step.py"), str(repo), str(suite)]
        out = git(repo, "bisect", "run", *step)
        found = next((line for line in out.splitlines() if "is the first bad commit" in line), "")
        subject = git(repo, "show", "-s", "--format=%s", found.split()[0]) if found else ""
        print(out)
        print(f"first bad: {subject.strip() or 'not found'} (expected version 0.5.{args.bad})")
        git(repo, "bisect", "reset")
        return 0 if subject.strip() == f"version 0.5.{args.bad}" else 1


if __name__ == "__main__":
    sys.exit(main())
