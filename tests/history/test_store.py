"""The history store on SQLite: round trip, migrations, idempotent and concurrent appends,
a newer schema refused, the URL's password kept out of every message."""

from __future__ import annotations

import socket
import sqlite3
import time
import traceback
from pathlib import Path

import pytest
from sqlalchemy import create_engine

from pytest_llmperf.base.errors import InputError
from pytest_llmperf.history import schema
from pytest_llmperf.history.records import PointKey
from pytest_llmperf.history.store import DEFAULT_PATH, HistoryError, HistoryStore, resolve_url

from .writers import HW, WORKLOAD, make_run, run_writers


def test_round_trip_runs_and_series(tmp_path: Path) -> None:
    with HistoryStore.open(str(tmp_path / "h.sqlite")) as store:
        ids = [store.append(make_run(0, i)) for i in range(3)]
        runs = store.runs()
        assert [r.id for r in runs] == ids[::-1]  # newest first
        newest = runs[0]
        assert (newest.uuid, newest.source, newest.hardware_key) == ("w0-r2", "pytest", HW)
        assert (newest.points, newest.checks) == (4, 1)
        assert newest.sglang_version == "0.5.23"
        assert newest.started_at == make_run(0, 2).started_at  # aware UTC back
        assert newest.provenance == {"servers": {"plain": {"server_args": {"tp_size": 1}}}}
        assert [r.id for r in store.runs(limit=2)] == ids[:0:-1]

        key = PointKey("mtp", WORKLOAD, 4, HW)
        series = store.series(key, "output_throughput")
        assert [p.run_id for p in series] == ids  # oldest first
        assert [p.value for p in series] == [400.0, 401.0, 402.0]
        assert series[1].samples == (400.0, 401.0, 402.0)
        assert series[1].verdict == "pass"
        assert series[1].git_commit == make_run(0, 1).git_commit
        assert [p.value for p in store.series(key, "output_throughput", limit=2)] == [401, 402]
        assert store.series(PointKey("mtp", WORKLOAD, 4, "other-hw"), "output_throughput") == []
        assert store.series(key, "no_such_metric") == []
        stored = store.points(ids[0])
        assert stored == sorted(make_run(0, 0).points, key=lambda p: (p.config, p.concurrency))
        assert store.points(10_000) == []


def test_a_retried_append_stores_nothing_twice(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite"
    with HistoryStore.open(str(path)) as store:
        first = store.append(make_run(1, 1))
        assert store.append(make_run(1, 1)) == first
        assert len(store.runs()) == 1
    with sqlite3.connect(path) as db:  # the rows themselves: one run, its 4 points, 8 values
        counts = [db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in _TABLES]
    assert counts == [1, 4, 8, 1]


_TABLES = ("llmperf_runs", "llmperf_points", "llmperf_values", "llmperf_checks")


def test_migrations_from_empty_build_the_schema_the_code_uses(tmp_path: Path) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    path = tmp_path / "empty.sqlite"
    HistoryStore.open(str(path)).close()
    engine = create_engine(f"sqlite:///{path}")
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"version_table": schema.VERSION_TABLE})
            assert context.get_current_heads() == ("0001",)
            assert compare_metadata(context, schema.metadata) == []
    finally:
        engine.dispose()
    # a second open finds it at head and changes nothing
    HistoryStore.open(str(path)).close()
    with sqlite3.connect(path) as db:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert tables >= {*_TABLES, schema.VERSION_TABLE}


def test_a_database_newer_than_the_code_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "newer.sqlite"
    HistoryStore.open(str(path)).close()
    with sqlite3.connect(path) as db:
        db.execute(f"UPDATE {schema.VERSION_TABLE} SET version_num = '0099'")
    with pytest.raises(HistoryError) as info:
        HistoryStore.open(str(path))
    message = str(info.value)
    assert "history (sqlite:///" in message and "revision 0099" in message
    assert "newer than this pytest-llmperf" in message and "up to 0001" in message


def test_four_writer_processes_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.sqlite'}"
    writers, runs = 4, 25
    t0 = time.monotonic()
    results = run_writers(url, writers, runs)
    wall = time.monotonic() - t0
    errors = {w: v for w, v in results.items() if isinstance(v, str)}
    assert not errors and sorted(results) == list(range(writers)), results
    with HistoryStore.open(url) as store:
        stored = store.runs()
        assert len(stored) == writers * runs
        assert len({r.uuid for r in stored}) == writers * runs
        assert sum(r.points for r in stored) == writers * runs * 4
        series = store.series(PointKey("plain", WORKLOAD, 1, HW), "output_throughput")
        assert len(series) == writers * runs
    took = sorted(t for v in results.values() for t in v)
    print(
        f"SQLite, {writers} writers x {runs} runs (+ a retry each): {len(stored)} runs stored, "
        f"wall {wall:.1f} s, append+retry median {took[len(took) // 2] * 1000:.0f} ms, "
        f"max {took[-1] * 1000:.0f} ms"
    )


def test_the_default_file_and_paths(tmp_path: Path) -> None:
    assert resolve_url(None, tmp_path).database == str((tmp_path / DEFAULT_PATH).resolve())
    assert resolve_url("default", tmp_path).database == str((tmp_path / DEFAULT_PATH).resolve())
    assert resolve_url("runs/h.db", tmp_path).database == str(tmp_path / "runs/h.db")
    assert resolve_url("postgresql://u@h/db", tmp_path).drivername == "postgresql+psycopg"
    with pytest.raises(InputError, match="history: .* is not a database URL"):
        resolve_url("://nope", tmp_path)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


SECRET = "Pa55-w0rd-s3cret"


@pytest.mark.parametrize("where", ["url", "env"])
def test_the_password_never_shows(tmp_path: Path, where: str) -> None:
    port = _closed_port()
    if where == "url":
        url, env = f"postgresql://bob:{SECRET}@127.0.0.1:{port}/llmperf", {}
    else:
        url, env = (
            f"postgresql://bob@127.0.0.1:{port}/llmperf",
            {"LLMPERF_HISTORY_PASSWORD": SECRET},
        )
    assert resolve_url(url, tmp_path, env).password == SECRET  # it is used ...
    with pytest.raises(HistoryError) as info:
        HistoryStore.open(url, env=env)
    exc = info.value
    text = "".join(traceback.format_exception(exc)) + repr(exc)
    assert f"history (postgresql+psycopg://bob:***@127.0.0.1:{port}/llmperf)" in str(exc)
    assert "creating or migrating the schema failed" in str(exc)
    assert SECRET not in text  # ... and never shown
    assert exc.__cause__ is None and exc.__suppress_context__


def test_a_bad_path_names_the_setting(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(HistoryError, match=r"history \(sqlite:///.*\): cannot create"):
        HistoryStore.open(str(blocker / "sub" / "h.sqlite"))
