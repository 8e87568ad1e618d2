"""How often the A/B consistency probes pass an unchanged pair and fail a changed one, on the
simulator: ``python benchmarks/bench_consistency.py [RUNS] [ROUNDS]`` prints pass/fail counts
(ROUNDS: the A/B's rounds, the suite's default when not given).

Both sides drift like batched SGLang (``--sim-nondeterminism 0.03``); the changed "new" answers
differently for a quarter of the prompts (``--sim-diverge-share 0.25``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

SUITE = """
[[server]]
name = "old"
model = "sim/qwen-moe"
sim_args = ["--sim-time-scale", "0.2"]

[[server]]
name = "new"
model = "sim/qwen-moe"
sim_args = ["--sim-time-scale", "0.2"]

[sweep]
levels = [1]

[[ab]]
candidate = "new"
reference = "old"
tolerance = 0.9
"""


def one(sim_args: str, rounds: int | None) -> str:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        extra = f"rounds = {rounds}\n" if rounds else ""
        (root / "llmperf.toml").write_text(SUITE + extra)
        (root / "test_ab.py").write_text("def test_ab(llmperf_ab):\n    llmperf_ab.check()\n")
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:randomly",
            "--llmperf-input-len",
            "64",
            "--llmperf-output-len",
            "16",
            "--llmperf-invalid",
            "skip",
            "--llmperf-output-dir",
            str(root / "out"),
            "--llmperf-sim-args",
            sim_args,
        ]
        subprocess.run(cmd, cwd=root, capture_output=True, timeout=600, check=False)
        points = json.loads((root / "out" / "ab.json").read_text())["points"]
        msg = points[0]["message"]
        print(msg[msg.find("consistency:") :][:300], file=sys.stderr)
        return str(points[0]["consistency"])


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else None
    for label, args in (
        ("unchanged", "--sim-nondeterminism 0.03"),
        ("changed", "--sim-nondeterminism 0.03; new: --sim-diverge-share 0.25"),
    ):
        got = [one(args, rounds) for _ in range(runs)]
        print(f"{label}: {got.count('pass')} pass, {got.count('fail')} fail of {runs}")


if __name__ == "__main__":
    main()
