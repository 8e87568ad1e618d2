"""The first schema: runs, their points, each point's metric values with all samples, checks.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "llmperf_runs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("uuid", sa.String(64), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("hardware_key", sa.String(255), nullable=False),
        sa.Column("git_commit", sa.String(64), nullable=True),
        sa.Column("plugin_version", sa.String(64), nullable=False),
        sa.Column("sglang_version", sa.String(64), nullable=True),
        sa.Column("provenance", sa.JSON, nullable=False),
        sa.UniqueConstraint("uuid", name="uq_llmperf_runs_uuid"),
    )
    op.create_table(
        "llmperf_points",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column(
            "run_id",
            sa.Integer,
            sa.ForeignKey("llmperf_runs.id", ondelete="CASCADE", name="fk_llmperf_points_run"),
            nullable=False,
        ),
        sa.Column("config", sa.String(255), nullable=False),
        sa.Column("workload_key", sa.String(255), nullable=False),
        sa.Column("concurrency", sa.Integer, nullable=False),
        sa.Column("hardware_key", sa.String(255), nullable=False),
        sa.Column("verdict", sa.String(16), nullable=True),
        sa.Column("valid", sa.Boolean, nullable=False),
        sa.Column("invalid_reasons", sa.JSON, nullable=False),
    )
    op.create_index(
        "ix_llmperf_points_key",
        "llmperf_points",
        ["config", "workload_key", "concurrency", "hardware_key"],
    )
    op.create_index("ix_llmperf_points_run", "llmperf_points", ["run_id"])
    op.create_table(
        "llmperf_values",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column(
            "point_id",
            sa.Integer,
            sa.ForeignKey("llmperf_points.id", ondelete="CASCADE", name="fk_llmperf_values_point"),
            nullable=False,
        ),
        sa.Column("metric", sa.String(64), nullable=False),
        sa.Column("value", sa.Float, nullable=False),
        sa.Column("samples", sa.JSON, nullable=False),
        sa.UniqueConstraint("point_id", "metric", name="uq_llmperf_values_point_metric"),
    )
    op.create_table(
        "llmperf_checks",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column(
            "run_id",
            sa.Integer,
            sa.ForeignKey("llmperf_runs.id", ondelete="CASCADE", name="fk_llmperf_checks_run"),
            nullable=False,
        ),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("verdict", sa.String(16), nullable=False),
        sa.Column("sentence", sa.Text, nullable=False),
    )
    op.create_index("ix_llmperf_checks_run", "llmperf_checks", ["run_id"])


def downgrade() -> None:
    op.drop_table("llmperf_checks")
    op.drop_table("llmperf_values")
    op.drop_table("llmperf_points")
    op.drop_table("llmperf_runs")
