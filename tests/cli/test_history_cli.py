"""``llmperf history list/show``: a stored series judged by the drift rule, its change point,
plot and bisect range, through the console script's ``main``."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from pytest_llmperf.cli import main
from pytest_llmperf.history.records import PointRecord, RunRecord
from pytest_llmperf.history.store import HistoryStore

HW = "sim-fast-moe"
WORKLOAD = "sglang-in64-out16"
T0 = datetime(2025, 1, 1, tzinfo=UTC)
# 12 steady runs (±0.5 %), then 4 runs 10 % slower: bad from the 13th, declared at the 14th.
VALUES = [1000.0 + 5 * (-1) ** i * (i % 3) for i in range(12)] + [900.0, 902.0, 899.0, 901.0]


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.strip()


@pytest.fixture
def history(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    """A git repository with one commit per run, and the history of those runs."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "t@example.invalid")
    _git(repo, "config", "user.name", "t")
    commits = []
    for i in range(len(VALUES)):
        (repo / "v.txt").write_text(f"{i}\n")
        _git(repo, "add", "v.txt")
        _git(repo, "commit", "-q", "-m", f"change {i + 1}")
        commits.append(_git(repo, "rev-parse", "HEAD"))
    db = tmp_path / "h.sqlite"
    with HistoryStore.open(str(db)) as store:
        for i, (v, commit) in enumerate(zip(VALUES, commits, strict=True)):
            point = PointRecord(
                "plain", WORKLOAD, 4, HW, "pass", True,
                metrics={"output_throughput": v}, samples={"output_throughput": (v,)},
            )  # fmt: skip
            store.append(
                RunRecord(
                    uuid=f"r{i}",
                    started_at=T0 + timedelta(hours=i),
                    finished_at=T0 + timedelta(hours=i, minutes=5),
                    source="pytest",
                    hardware_key=HW,
                    git_commit=commit,
                    points=(point,),
                    provenance={"servers": {"plain": {"workload": WORKLOAD, "hardware_key": HW}}},
                )
            )
    return db, repo, commits


def test_list_prints_the_runs_newest_first(history, capsys: pytest.CaptureFixture[str]) -> None:
    db, _, commits = history
    assert main(["history", "--history", str(db), "list", "--limit", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[1] for ln in lines[1:]] == ["#16", "#15", "#14"]
    assert commits[-1][:12] in lines[1] and lines[1].endswith("1 point  plain")


def test_show_marks_the_change_point_plots_and_bisects(
    history, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db, repo, commits = history
    monkeypatch.chdir(repo)
    png = tmp_path / "trend.png"
    argv = ["history", "--history", str(db), "show", "--config", "plain", "-c", "4"]
    code = main([*argv, "--plot", str(png), "--bisect"])
    out = capsys.readouterr().out
    assert code == 1, out  # the newest run is a declared regression
    assert "plain output_throughput at C=4 (sglang-in64-out16, sim-fast-moe), 16 runs:" in out
    assert out.count("<- change point") == 1
    assert "run #13" in next(ln for ln in out.splitlines() if "<- change point" in ln)
    assert "insufficient data: 4 earlier good runs in the window, 5 needed" in out
    assert f"second bad run in a row → regression since run #13 (commit {commits[12][:12]})" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"bisect: git bisect start {commits[12]} {commits[11]}" in out
    assert "bisect: 1 candidate commit:" in out and "change 13" in out


def test_show_since_a_deliberate_change_judges_only_the_runs_after_it(
    history, capsys: pytest.CaptureFixture[str]
) -> None:
    db, _, _ = history
    argv = ["history", "--history", str(db), "show", "--config", "plain", "-c", "4"]
    assert main([*argv, "--since", "13"]) == 0
    out = capsys.readouterr().out
    assert "4 runs:" in out and "regression" not in out


def test_show_names_an_unknown_config(history, capsys: pytest.CaptureFixture[str]) -> None:
    db, _, _ = history
    code = main(["history", "--history", str(db), "show", "--config", "nope", "-c", "4"])
    assert code == 2
    assert "--config nope: no stored run measured it" in capsys.readouterr().err
