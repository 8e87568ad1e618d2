"""Alembic's environment for the history database.

``HistoryStore.open`` runs it with its own connection, inside the transaction that holds the
migration lock (``config.attributes["connection"]``). Run by hand (``alembic -x url=...``), it
connects to that URL.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine

from pytest_llmperf.history.schema import VERSION_TABLE, metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        render_as_batch=True,  # SQLite alters a table by copying it
    )
    with context.begin_transaction():
        context.run_migrations()


connection = context.config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    url = context.get_x_argument(as_dictionary=True).get("url") or context.config.get_main_option(
        "sqlalchemy.url"
    )
    if not url:
        raise SystemExit("history migrations: pass -x url=<database URL>")
    with create_engine(url).begin() as conn:
        _run(conn)
