"""The embedded store: SQLite run on the event loop, and long reads on threads (see `transaction`)."""

from petrecords.store.sqlite.transaction import SqliteStore, SqliteTransaction, as_sqlite_runs_it

__all__ = ["SqliteStore", "SqliteTransaction", "as_sqlite_runs_it"]
