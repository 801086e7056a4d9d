"""The embedded store: SQLite run on the event loop, and long reads on threads.

A SQLite primary-key lookup costs microseconds, far less than a hop to a worker thread, so
statements run inline. A read that outlasts a few milliseconds there (a search, a count over many records)
is interrupted and run again on a thread of its own, in the same transaction, so that it never holds up the
process's other requests: SQLite lets go of Python's lock while it works. The reads of a transaction that took a
long read's turn go to that thread at once. The process keeps its connections
each given by an asyncio lock to one transaction at a time: one for lookups by id alone, a few for read
transactions, which WAL never makes wait for writers, and one for writes.
Write transactions start with BEGIN IMMEDIATE so that writers from other processes queue there instead
of failing half-way. That queue is waited on here, asynchronously, for at most `busy_timeout`: SQLite's
own busy handler would sleep inline and stall every request of the process.

Group commit: a commit waits for its fsync, and SQLite has one writer, so one commit per request caps
writes at the disk's sync rate. Write requests that are ready at the same moment therefore share one
SQLite transaction, each in its own savepoint (a failed request rolls back only its own work), and
one COMMIT. No request of the group answers before that COMMIT has returned; if it fails, all of them
answer 503 and none of their work is kept (the write-ahead log sealed, see SqliteTransaction._seal_log).

Every statement (one per collection and query shape) is compiled once to SQL with positional parameters (their
names kept in order) and run on the driver's own connection: SQLAlchemy's per-execution work costs several times a
primary-key lookup.

In parts: `statements` (compiled once), `connections` (the file's connections, write groups), `transaction`,
`store`.
"""

from petrecords.store.sqlite.statements import as_sqlite_runs_it
from petrecords.store.sqlite.store import SqliteStore
from petrecords.store.sqlite.transaction import SqliteTransaction

__all__ = ["SqliteStore", "SqliteTransaction", "as_sqlite_runs_it"]
