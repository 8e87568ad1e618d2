"""``HistoryStore``: append a session's results to a SQL database and read series back.

The database is a SQLite file by default (no server to run) or any SQLAlchemy URL a team
shares (PostgreSQL is tested). Opening it runs the shipped Alembic migrations up to the
newest revision, under a lock, so concurrent first opens create the schema once; a database
migrated by a newer pytest-llmperf is refused rather than written.

Each append is one transaction, idempotent on the run's uuid. SQLite writers take the write
lock at BEGIN (``BEGIN IMMEDIATE``) and wait on each other (WAL, busy timeout); PostgreSQL
writers run concurrently and the unique uuid settles a retried append.

The URL's password never leaves this module: the store shows its URL with the password
hidden, and every database or driver error becomes a ``HistoryError`` naming the setting and
that shown URL, its text scrubbed.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, func, insert, select
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import ArgumentError, IntegrityError, NoSuchModuleError, SQLAlchemyError

from pytest_llmperf.base.errors import InputError, LLMPerfError
from pytest_llmperf.base.redaction import redact
from pytest_llmperf.history import schema
from pytest_llmperf.history.records import (
    PointKey,
    PointRecord,
    RunRecord,
    RunRow,
    SeriesPoint,
)

__all__ = [
    "DEFAULT_PATH",
    "PASSWORD_ENV",
    "SETTING",
    "HistoryError",
    "HistoryStore",
    "resolve_url",
]

SETTING = "history"  # the setting's name, for messages (--llmperf-history, LLMPERF_HISTORY)
PASSWORD_ENV = "LLMPERF_HISTORY_PASSWORD"
# The default SQLite file, relative to the pytest rootdir (or the cwd of ``llmperf sweep``).
DEFAULT_PATH = Path(".llmperf") / "history.sqlite"
_MIGRATIONS = Path(__file__).resolve().parent / "migrations"
_SQLITE_BUSY_S = 60.0  # how long a SQLite writer waits for another's lock
# pg_advisory_xact_lock's key for the migration step ("llmperf" in ASCII, as an int).
_PG_MIGRATION_LOCK = 0x6C6C6D70657266


class HistoryError(LLMPerfError):
    """The history database could not be opened, migrated, written or read."""

    # A unique constraint refused the write (another writer stored the same run first).
    conflict: bool = False


def resolve_url(value: str | None, base: Path, env: Mapping[str, str] | None = None) -> URL:
    """The database URL of a ``history`` value: None or "default" the default SQLite file
    under ``base``; a value without ``://`` a SQLite file path (relative to ``base``); else a
    SQLAlchemy URL, its password from ``LLMPERF_HISTORY_PASSWORD`` when the URL has none."""
    env = os.environ if env is None else env
    if value is None or value == "default":
        return URL.create("sqlite", database=str((base / DEFAULT_PATH).resolve()))
    if "://" not in value:
        path = Path(value).expanduser()
        return URL.create("sqlite", database=str(path if path.is_absolute() else base / path))
    try:
        url = make_url(value)
    except ArgumentError:
        raise InputError(
            f"{SETTING}: {redact(value)!r} is not a database URL "
            "(dialect+driver://user@host/db, or a file path for SQLite)"
        ) from None
    if url.drivername == "postgresql":
        url = url.set(drivername="postgresql+psycopg")  # psycopg 3 is the driver shipped
    if url.password is None and url.username and env.get(PASSWORD_ENV):
        url = url.set(password=env[PASSWORD_ENV])
    return url


def shown(url: URL) -> str:
    """The URL as output may show it: the password hidden."""
    return url.render_as_string(hide_password=True)


class HistoryStore:
    """One history database. Open it with ``HistoryStore.open``; close it when done."""

    def __init__(self, engine: Engine, url: URL) -> None:
        self._engine = engine
        self._secret = url.password
        self.url = shown(url)

    def __repr__(self) -> str:
        return f"HistoryStore({self.url})"

    # -- opening ---------------------------------------------------------------------------
    @classmethod
    def open(
        cls, url: str | None, *, base: Path | None = None, env: Mapping[str, str] | None = None
    ) -> HistoryStore:
        """Open (and create or migrate) the database ``url`` names; see ``resolve_url``."""
        resolved = resolve_url(url, Path.cwd() if base is None else base, env)
        store = cls(_engine(resolved), resolved)
        try:
            store._migrate()
        except BaseException:
            store.close()
            raise
        return store

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _migrate(self) -> None:
        from alembic import command
        from alembic.config import Config
        from alembic.runtime.migration import MigrationContext
        from alembic.script import ScriptDirectory
        from alembic.util import CommandError

        cfg = Config()
        cfg.set_main_option("script_location", str(_MIGRATIONS))
        script = ScriptDirectory.from_config(cfg)
        head = script.get_current_head()
        with self._errors("creating or migrating the schema"), self._engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_MIGRATION_LOCK})")
            context = MigrationContext.configure(conn, opts={"version_table": schema.VERSION_TABLE})
            current = context.get_current_heads()
            unknown = [rev for rev in current if not _known(script, rev)]
            if unknown:
                raise HistoryError(
                    f"{SETTING} ({self.url}): the database's schema is at revision "
                    f"{', '.join(unknown)}, newer than this pytest-llmperf knows (up to {head}); "
                    "upgrade pytest-llmperf to write to it"
                )
            if tuple(current) != (head,):
                cfg.attributes["connection"] = conn
                try:
                    command.upgrade(cfg, "head")
                except CommandError as exc:
                    raise HistoryError(f"{SETTING} ({self.url}): migration: {exc}") from None

    # -- writing ---------------------------------------------------------------------------
    def append(self, run: RunRecord) -> int:
        """Store ``run`` in one transaction and return its id; a run whose uuid is already
        stored is not stored again (its id is returned)."""
        try:
            with self._errors("appending a run"), self._engine.begin() as conn:
                existing = _run_id(conn, run.uuid)
                return existing if existing is not None else _insert_run(conn, run)
        except HistoryError as exc:
            # Two writers of the same uuid at once: the other's commit won the constraint.
            if not exc.conflict:
                raise
        with self._errors("appending a run"), self._engine.connect() as conn:
            existing = _run_id(conn, run.uuid)
        if existing is None:
            raise HistoryError(
                f"{SETTING} ({self.url}): run {run.uuid} was neither stored nor found"
            )
        return existing

    # -- reading ---------------------------------------------------------------------------
    def runs(self, limit: int | None = None) -> list[RunRow]:
        """Stored runs, newest first (``limit``: at most that many)."""
        r, p, c = schema.runs, schema.points, schema.checks
        n_points = select(func.count()).where(p.c.run_id == r.c.id).scalar_subquery()
        n_checks = select(func.count()).where(c.c.run_id == r.c.id).scalar_subquery()
        query = select(r, n_points.label("n_points"), n_checks.label("n_checks")).order_by(
            r.c.started_at.desc(), r.c.id.desc()
        )
        if limit is not None:
            query = query.limit(limit)
        with self._errors("reading runs"), self._engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
        return [
            RunRow(
                id=row["id"],
                uuid=row["uuid"],
                started_at=_utc(row["started_at"]),
                finished_at=_utc(row["finished_at"]),
                source=row["source"],
                hardware_key=row["hardware_key"],
                git_commit=row["git_commit"],
                plugin_version=row["plugin_version"],
                sglang_version=row["sglang_version"],
                points=int(row["n_points"]),
                checks=int(row["n_checks"]),
                provenance=dict(row["provenance"] or {}),
            )
            for row in rows
        ]

    def series(self, key: PointKey, metric: str, limit: int | None = None) -> list[SeriesPoint]:
        """``metric`` at ``key`` in every run that measured it, oldest first (``limit``: the
        newest that many, still oldest first)."""
        r, p, v = schema.runs, schema.points, schema.values
        query = (
            select(r.c.id, r.c.started_at, r.c.git_commit, v.c.value, v.c.samples, p.c.verdict)
            .select_from(r.join(p, p.c.run_id == r.c.id).join(v, v.c.point_id == p.c.id))
            .where(
                p.c.config == key.config,
                p.c.workload_key == key.workload_key,
                p.c.concurrency == key.concurrency,
                p.c.hardware_key == key.hardware_key,
                v.c.metric == metric,
            )
            .order_by(r.c.started_at.desc(), r.c.id.desc())
        )
        if limit is not None:
            query = query.limit(limit)
        with self._errors("reading a series"), self._engine.connect() as conn:
            rows = conn.execute(query).all()
        return [
            SeriesPoint(
                run_id=row[0],
                started_at=_utc(row[1]),
                git_commit=row[2],
                value=float(row[3]),
                samples=tuple(float(x) for x in row[4] or ()),
                verdict=row[5],
            )
            for row in reversed(rows)
        ]

    def points(self, run_id: int) -> list[PointRecord]:
        """The points of run ``run_id`` as appended (config, then C), each with its metrics'
        values and samples."""
        p, v = schema.points, schema.values
        with self._errors("reading points"), self._engine.connect() as conn:
            rows = (
                conn.execute(
                    select(p)
                    .where(p.c.run_id == run_id)
                    .order_by(p.c.config, p.c.concurrency, p.c.id)
                )
                .mappings()
                .all()
            )
            ids = [row["id"] for row in rows]
            vals = (
                conn.execute(select(v).where(v.c.point_id.in_(ids))).mappings().all() if ids else []
            )
        by_point: dict[int, list[Any]] = {}
        for val in vals:
            by_point.setdefault(val["point_id"], []).append(val)
        return [
            PointRecord(
                config=row["config"],
                workload_key=row["workload_key"],
                concurrency=row["concurrency"],
                hardware_key=row["hardware_key"],
                verdict=row["verdict"],
                valid=bool(row["valid"]),
                metrics={m["metric"]: float(m["value"]) for m in by_point.get(row["id"], [])},
                samples={
                    m["metric"]: tuple(float(x) for x in m["samples"] or ())
                    for m in by_point.get(row["id"], [])
                },
                invalid_reasons=tuple(row["invalid_reasons"] or ()),
            )
            for row in rows
        ]

    # -- errors ----------------------------------------------------------------------------
    @contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        """Database and driver errors as ``HistoryError``: the setting, the shown URL, what
        was being done, the driver's sentence scrubbed of the password."""
        try:
            yield
        except SQLAlchemyError as exc:
            text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
            message = self._scrub(text[0] if text else type(exc).__name__)
            err = HistoryError(f"{SETTING} ({self.url}): {doing} failed: {message}")
            err.conflict = isinstance(exc, IntegrityError)
            # Not chained: the driver's exception may carry the connection string.
            raise err from None

    def _scrub(self, text: str) -> str:
        text = redact(text)
        return text.replace(self._secret, "***") if self._secret else text


# -- helpers ---------------------------------------------------------------------------------


def _engine(url: URL) -> Engine:
    """An engine for ``url``; SQLite: the file's folder made, WAL, a busy timeout, and
    ``BEGIN IMMEDIATE`` so a writer waits for the lock instead of failing on upgrade."""
    try:
        if url.get_backend_name() != "sqlite":
            return create_engine(url, pool_pre_ping=True)
        if url.database and url.database != ":memory:":
            try:
                Path(url.database).parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise HistoryError(
                    f"{SETTING} ({shown(url)}): cannot create {Path(url.database).parent}: "
                    f"{exc.strerror or exc}"
                ) from None
        engine = create_engine(url, connect_args={"timeout": _SQLITE_BUSY_S})
    except (NoSuchModuleError, ImportError) as exc:
        raise InputError(
            f"{SETTING} ({shown(url)}): no driver for {url.drivername} ({redact(str(exc))}); "
            "PostgreSQL needs psycopg (pip install 'psycopg[binary]')"
        ) from None
    except ArgumentError as exc:
        raise InputError(f"{SETTING} ({shown(url)}): {redact(str(exc))}") from None

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we say BEGIN ourselves (below)
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(_SQLITE_BUSY_S * 1000)}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def _known(script: Any, revision: str) -> bool:
    from alembic.util import CommandError

    try:
        return script.get_revision(revision) is not None
    except CommandError:
        return False


def _run_id(conn: Connection, uuid: str) -> int | None:
    found = conn.execute(select(schema.runs.c.id).where(schema.runs.c.uuid == uuid)).scalar()
    return None if found is None else int(found)


def _insert_run(conn: Connection, run: RunRecord) -> int:
    run_id = conn.execute(
        insert(schema.runs).values(
            uuid=run.uuid,
            started_at=_utc(run.started_at),
            finished_at=_utc(run.finished_at),
            source=run.source,
            hardware_key=run.hardware_key,
            git_commit=run.git_commit,
            plugin_version=run.plugin_version,
            sglang_version=run.sglang_version,
            provenance=dict(run.provenance),
        )
    ).inserted_primary_key
    assert run_id is not None
    rid = int(run_id[0])
    for point in run.points:
        pk = conn.execute(
            insert(schema.points).values(
                run_id=rid,
                config=point.config,
                workload_key=point.workload_key,
                concurrency=point.concurrency,
                hardware_key=point.hardware_key,
                verdict=point.verdict,
                valid=point.valid,
                invalid_reasons=list(point.invalid_reasons),
            )
        ).inserted_primary_key
        assert pk is not None
        rows = [
            {"point_id": int(pk[0]), "metric": name, "value": value, "samples": samples}
            for name, value, samples in _values(point.metrics, point.samples)
        ]
        if rows:
            conn.execute(insert(schema.values), rows)
    if run.checks:
        conn.execute(
            insert(schema.checks),
            [
                {
                    "run_id": rid,
                    "kind": c.kind,
                    "name": c.name,
                    "verdict": c.verdict,
                    "sentence": c.sentence,
                }
                for c in run.checks
            ],
        )
    return rid


def _values(
    metrics: Mapping[str, float], samples: Mapping[str, tuple[float, ...]]
) -> Iterator[tuple[str, float, list[float]]]:
    """Each metric's value and samples; a metric with samples but no value stands for their
    median. Non-finite numbers are left out (JSON and some databases have none)."""
    for name in sorted(set(metrics) | set(samples)):
        xs = [float(x) for x in samples.get(name, ()) if _finite(x)]
        value = metrics.get(name)
        if value is None or not _finite(value):
            if not xs:
                continue
            value = statistics.median(xs)
        yield name, float(value), xs


def _finite(x: float) -> bool:
    return x == x and x not in (float("inf"), float("-inf"))


def _utc(when: datetime) -> datetime:
    """Aware UTC (SQLite hands back naive datetimes; they were stored as UTC)."""
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
