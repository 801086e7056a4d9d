"""What a database failure means for the client: "the database cannot serve now, retry later" (503/986),
or a fault of the statement or of the service, which stays an error (500).

Both stores translate their drivers' errors here, so that SQLite and PostgreSQL outages look alike to
clients, in the logs (a short cause, never SQL or parameters) and in the metrics.
"""

from __future__ import annotations

from typing import NoReturn

import asyncpg
import pysqlite3.dbapi2 as sqlite3
import sqlalchemy as sa

from petrecords.errors import DatabaseUnavailable


class PoolTimeout(Exception):
    """No pooled connection came free within the time allowed to wait for one."""


# What the database layer raises: SQLAlchemy's wrapped driver errors and pool timeout (SQLite's engine, and
# migrations); asyncpg's own errors, where the PostgreSQL store runs statements on the driver directly: the
# server's (PostgresError, with a SQLSTATE) and the client's (InterfaceError and InternalClientError: among
# others, a connection that closed under an operation); the PostgreSQL store's pool timeout; OSError for
# refused and reset connections and for the TimeoutError that asyncpg raises when a connection or a
# statement outlives its timeout; SQLite's own errors, where the store runs statements on the driver's
# connection directly.
DATABASE_ERRORS = (
    sa.exc.DBAPIError,
    sa.exc.TimeoutError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    PoolTimeout,
    OSError,
    sqlite3.Error,
)

# The causes, as logged and counted: a statement outlived its timeout; no pooled connection came free in
# time; the database cannot be reached or dropped the connection; a lock held elsewhere was not released in
# time; the storage refuses to write (full, read-only, I/O error); any other operational failure.
TIMEOUT, POOL, CONNECTION, LOCKED, STORAGE, OTHER = "timeout", "pool", "connection", "locked", "storage", "other"

# PostgreSQL SQLSTATE codes, then classes, that mean the server cannot serve now.
_SQLSTATE_CAUSES = {"57014": TIMEOUT, "55P03": LOCKED, "53300": CONNECTION, "53100": STORAGE}
_SQLSTATE_CLASS_CAUSES = {"08": CONNECTION, "57": CONNECTION, "53": STORAGE, "58": STORAGE}
# SQLite primary result codes (the low byte of the extended code): BUSY and LOCKED; READONLY, IOERR and
# FULL; CANTOPEN, SQLite's "cannot reach the database".
_SQLITE_CAUSES = {5: LOCKED, 6: LOCKED, 8: STORAGE, 10: STORAGE, 13: STORAGE, 14: CONNECTION}


def _sqlstate_cause(sqlstate: object) -> str | None:
    if not isinstance(sqlstate, str):
        return None
    return _SQLSTATE_CAUSES.get(sqlstate) or _SQLSTATE_CLASS_CAUSES.get(sqlstate[:2])


def _driver_cause(error: object) -> str | None:
    cause = _sqlstate_cause(getattr(error, "sqlstate", None))
    if cause is None and isinstance(code := getattr(error, "sqlite_errorcode", None), int):
        cause = _SQLITE_CAUSES.get(code & 0xFF)
    return cause


def unavailable_cause(exc: BaseException) -> str | None:
    """The kind of outage that `exc` shows, or None when it is not an outage (a wrong statement, a violated
    constraint, a bug)."""
    if isinstance(exc, sa.exc.TimeoutError | PoolTimeout):
        return POOL
    if isinstance(exc, TimeoutError):
        return TIMEOUT
    if isinstance(exc, OSError):
        return CONNECTION
    if isinstance(exc, asyncpg.PostgresError):
        return _driver_cause(exc)
    if isinstance(exc, asyncpg.InterfaceError | asyncpg.InternalClientError):
        # A value the driver cannot send, or a setting it cannot use, is a fault of the service (these are
        # also ValueErrors). The client's other errors mean that the connection cannot serve: it is closed,
        # the pool is closing, or the protocol went off track (as when the server ends a connection between
        # two statements and the next one runs into its farewell); the store discards that connection.
        return None if isinstance(exc, ValueError) else CONNECTION
    if isinstance(exc, sa.exc.DBAPIError):
        if exc.connection_invalidated:
            return CONNECTION
        cause = _driver_cause(exc.orig)
        if cause is None and isinstance(exc, sa.exc.OperationalError | sa.exc.InterfaceError):
            cause = CONNECTION if isinstance(exc, sa.exc.InterfaceError) else OTHER
        return cause
    if isinstance(exc, sqlite3.Error):
        cause = _driver_cause(exc)
        if cause is None and isinstance(exc, sqlite3.OperationalError):
            cause = OTHER
        return cause
    return None


def unavailable(exc: BaseException) -> DatabaseUnavailable | None:
    """The 503 to answer for `exc`, or None when `exc` is not an outage and must stay what it is."""
    cause = unavailable_cause(exc)
    if cause is None:
        return None
    # The driver's own words, without the SQL and parameters that SQLAlchemy adds to its messages
    # (SQLAlchemy's asyncpg adapter keeps asyncpg's own exception as the cause of its own).
    wrapped = exc.orig if isinstance(exc, sa.exc.DBAPIError) and exc.orig is not None else exc
    driver_error = wrapped.__cause__ or wrapped
    detail = f"{type(driver_error).__name__}: {driver_error}"[:300]
    return DatabaseUnavailable(cause=cause, detail=detail)


def raise_translated(exc: BaseException) -> NoReturn:
    """Raise the 503 for `exc` when it is an outage, from it; else `exc` itself, unchanged.

    For the handler of `exc`, in place of `raise`.
    """
    if (error := unavailable(exc)) is None:
        raise exc
    raise error from exc
