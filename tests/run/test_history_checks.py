"""``run/history_checks``: a point judged against its stored history keeps the baseline path's
validity rules and verdict words."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from pytest_llmperf.base.errors import InputError
from pytest_llmperf.base.results import LevelResult
from pytest_llmperf.history.records import PointRecord, RunRecord
from pytest_llmperf.history.store import HistoryStore
from pytest_llmperf.report.tables import _verdict
from pytest_llmperf.run.history_checks import HistoryJudge, history_judge
from pytest_llmperf.verdicts.drift import DriftRule
from pytest_llmperf.verdicts.verdict import Verdict
from tests.verdicts import WORKLOAD, make_level

HW = "hw"
T0 = datetime(2025, 1, 1, tzinfo=UTC)


def _store(path: Path, values: list[float]) -> None:
    with HistoryStore.open(str(path)) as store:
        for i, v in enumerate(values):
            point = PointRecord(
                "plain", WORKLOAD.key(), 4, HW, "pass", True,
                metrics={"output_throughput": v}, samples={"output_throughput": (v,)},
            )  # fmt: skip
            store.append(
                RunRecord(
                    f"r{i}",
                    T0 + timedelta(hours=i),
                    T0 + timedelta(hours=i),
                    "pytest",
                    HW,
                    git_commit=f"c{i}",
                    points=(point,),
                )  # fmt: skip
            )


def _judge(tmp_path: Path, values: list[float], *levels: LevelResult) -> tuple[Verdict, str]:
    db = tmp_path / "h.sqlite"
    _store(db, values)
    judge = HistoryJudge(str(db), tmp_path, DriftRule())
    pc = judge.compare(
        "plain", list(levels), workload=WORKLOAD, hardware_key=HW, metrics=["output_throughput"]
    )
    return pc.verdict, pc.message()


STEADY = [1000.0, 1004.0, 998.0, 1002.0, 999.0, 1001.0, 1003.0, 997.0]


def test_a_second_bad_run_fails_a_first_is_inconclusive(tmp_path: Path) -> None:
    verdict, message = _judge(tmp_path, [*STEADY, 850.0], make_level(4, 860.0))
    assert verdict is Verdict.FAIL
    assert "plain output_throughput at C=4: 860 tok/s is 14.0 % below the mean of the last 8" in (
        message
    )
    assert message.endswith("second bad run in a row → regression since run #9 (commit c8)")
    verdict, message = _judge(tmp_path / "b", STEADY, make_level(4, 860.0))
    assert verdict is Verdict.INCONCLUSIVE and "first bad run in a row" in message


def test_an_invalid_point_is_invalid_whatever_its_history(tmp_path: Path) -> None:
    verdict, message = _judge(tmp_path, [*STEADY, 850.0], make_level(4, 860.0, failed=2))
    assert verdict is Verdict.INVALID and "invalid measurement" in message


def test_a_short_history_is_insufficient_data(tmp_path: Path) -> None:
    verdict, message = _judge(tmp_path, STEADY[:3], make_level(4, 500.0))
    assert verdict is Verdict.INCONCLUSIVE
    assert "insufficient data: 3 earlier good runs in the window, 5 needed" in message


def test_history_judge_settings(tmp_path: Path) -> None:
    assert history_judge("baseline", None, 10, tmp_path) is None
    with pytest.raises(InputError, match="history is off"):
        history_judge("history", None, 10, tmp_path)
    with pytest.raises(InputError, match="history_window = 3"):
        history_judge("history", "default", 3, tmp_path)


def test_an_inconclusive_point_against_history_asks_for_no_rerun(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    _store(db, STEADY[:2])
    pc = HistoryJudge(str(db), tmp_path, DriftRule()).compare(
        "plain", [make_level(4, 1000.0)], workload=WORKLOAD, hardware_key=HW
    )
    assert pc.verdict is Verdict.INCONCLUSIVE and pc.reference == "history"
    assert not pc.rerun
    assert _verdict(pc) == "inconclusive"
