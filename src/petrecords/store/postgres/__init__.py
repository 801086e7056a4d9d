"""The scale-out store: PostgreSQL through asyncpg, with a connection pool per process (see `transaction`)."""

from petrecords.store.postgres.transaction import LONG_READ_SLICE, PostgresStore, PostgresTransaction, lock_key

__all__ = ["LONG_READ_SLICE", "PostgresStore", "PostgresTransaction", "lock_key"]
