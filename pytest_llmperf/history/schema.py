"""The history database's tables (SQLAlchemy core), as the newest migration leaves them.

Every name starts with ``llmperf_`` (Alembic's version table too), so the store can live in a
team's existing database beside other tables. ``migrations/`` creates and changes them; a test
holds the two equal.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

VERSION_TABLE = "llmperf_alembic_version"

metadata = MetaData()

runs = Table(
    "llmperf_runs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    # A retried append carries the same uuid: the constraint makes it land once.
    Column("uuid", String(64), nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True), nullable=False),
    Column("source", String(16), nullable=False),
    Column("hardware_key", String(255), nullable=False),
    Column("git_commit", String(64), nullable=True),
    Column("plugin_version", String(64), nullable=False),
    Column("sglang_version", String(64), nullable=True),
    Column("provenance", JSON, nullable=False),
    UniqueConstraint("uuid", name="uq_llmperf_runs_uuid"),
)

points = Table(
    "llmperf_points",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column(
        "run_id",
        Integer,
        ForeignKey("llmperf_runs.id", ondelete="CASCADE", name="fk_llmperf_points_run"),
        nullable=False,
    ),
    Column("config", String(255), nullable=False),
    Column("workload_key", String(255), nullable=False),
    Column("concurrency", Integer, nullable=False),
    Column("hardware_key", String(255), nullable=False),
    Column("verdict", String(16), nullable=True),
    Column("valid", Boolean, nullable=False),
    Column("invalid_reasons", JSON, nullable=False),
    Index("ix_llmperf_points_key", "config", "workload_key", "concurrency", "hardware_key"),
    Index("ix_llmperf_points_run", "run_id"),
)

values = Table(
    "llmperf_values",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column(
        "point_id",
        Integer,
        ForeignKey("llmperf_points.id", ondelete="CASCADE", name="fk_llmperf_values_point"),
        nullable=False,
    ),
    Column("metric", String(64), nullable=False),
    Column("value", Float, nullable=False),
    Column("samples", JSON, nullable=False),
    UniqueConstraint("point_id", "metric", name="uq_llmperf_values_point_metric"),
)

checks = Table(
    "llmperf_checks",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column(
        "run_id",
        Integer,
        ForeignKey("llmperf_runs.id", ondelete="CASCADE", name="fk_llmperf_checks_run"),
        nullable=False,
    ),
    Column("kind", String(16), nullable=False),
    Column("name", String(255), nullable=False),
    Column("verdict", String(16), nullable=False),
    Column("sentence", Text, nullable=False),
    Index("ix_llmperf_checks_run", "run_id"),
)
