"""The history store: every session's points, samples, verdicts and provenance, in one SQL
database (a SQLite file by default, any SQLAlchemy URL for a team). See docs/history.md."""
