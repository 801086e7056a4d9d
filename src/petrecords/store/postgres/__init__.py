"""The scale-out store: PostgreSQL through asyncpg, with a connection pool per process.

Every statement is compiled once (per statement object: the fixed ones of the store's modules, and one per
list or count query shape) from the SQLAlchemy schema by SQLAlchemy's asyncpg dialect, and run on asyncpg
directly, which prepares it once per connection. SQLAlchemy's per-execution work (greenlet hops, cache
keys, result wrapping) costs more than a primary-key lookup itself.

Reads run without an explicit transaction: under READ COMMITTED every statement has a snapshot of its
own anyway, so BEGIN and COMMIT would only add round trips. A write request runs in one transaction,
committed when it ends normally and rolled back when it raises.

A connection that broke, or whose state is unknown (a client-side timeout, a cancellation), is
terminated at once; the pool opens a new one when one is next needed, as it does for a connection that
the other end closed while it sat in the pool. The server's own errors (its statement timeout, a lock it
could not take) leave the connection usable.

Behind PgBouncer in transaction pooling (PETRECORDS_DB_POOLER=transaction) a client connection has no
session of its own: each transaction may run on another server connection. Nothing the store relies on
outlives a transaction there (advisory locks are transaction-scoped, the change feed's horizon is read in
the statement that uses it, statements are prepared unnamed), and the statement timeout is set per
transaction: `SET LOCAL` in the round trip of `BEGIN` for a write; a read, which runs without a
transaction, is bounded by the client, whose cancel request PgBouncer passes on to the server connection
running it. Such a connection is not terminated, which would leave the statement running on the server,
but recovered in the background once the cancel has been answered (or terminated if it is not).

Every session is bounded on the server (see `session_bounds`), so that one whose client has gone (a host lost,
a partition) ends within seconds: left idle in its transaction, it would keep its locks, and the change feed of
every instance would wait for its transaction id, for the two hours that the server's TCP keepalive takes by
default. A session goes after PETRECORDS_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS idle inside a transaction, and
a connection whose client has gone silent after about PETRECORDS_DB_TCP_TIMEOUT_SECONDS (keepalives, and
tcp_user_timeout for what it sends). Behind PgBouncer, which refuses startup parameters it does not know, the
first is set by a statement (per session in session pooling, per transaction in transaction pooling) and the
TCP settings are PgBouncer's own.

In parts: `statements` (compiled once), `writes` (deferred writes, pipelined), `reads` (long reads in slices),
`connections` (broken connections, session bounds, unanswered commits), `transaction`, `pool` (the store).
"""

from petrecords.store.postgres.pool import PostgresStore
from petrecords.store.postgres.reads import LONG_READ_SLICE
from petrecords.store.postgres.statements import lock_key
from petrecords.store.postgres.transaction import PostgresTransaction

__all__ = ["LONG_READ_SLICE", "PostgresStore", "PostgresTransaction", "lock_key"]
