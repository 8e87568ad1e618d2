"""Alembic migrations of the history database, run by ``HistoryStore.open``."""
