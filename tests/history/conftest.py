"""Alembic's dialect modules imported before any test: pytester restores ``sys.modules`` after
each test, and SQLAlchemy warns when a dialect module registers its functions a second time."""

from __future__ import annotations

import alembic.ddl  # noqa: F401
import sqlalchemy.dialects.postgresql  # noqa: F401
