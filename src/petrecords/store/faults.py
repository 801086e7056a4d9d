"""What a database failure means for the client: "the database cannot serve now, retry later" (503/986),
or a fault of the statement or of the service, which stays an error (500).

Both stores translate their drivers' errors here, so that SQLite and PostgreSQL outages look alike to
clients, in the logs (a short cause, never SQL or parameters) and in the metrics. Only unavailability is an
outage: the database is unreachable, refuses the connection, is locked, busy, read-only, full, damaged or
gone. An error that the same request would meet again however long it waited (a syntax error, a missing
table or column, a violated constraint) is a bug, and stays a 500 with its traceback in the log.
"""

from __future__ import annotations

import errno
import socket
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

# The causes, as logged and counted (a closed set: the label values of petrecords_db_unavailable_total): a
# statement outlived its timeout; no pooled connection came free in time; the database cannot be reached,
# refuses the connection or dropped it; a lock held elsewhere was not released in time; the storage refuses
# to write or to read (full, read-only, I/O error, a damaged file); the database is no longer where the
# configuration says (the SQLite file was deleted or replaced, the PostgreSQL database dropped or renamed);
# an operational failure that the driver reported without a code.
TIMEOUT, POOL, CONNECTION, LOCKED, STORAGE, VANISHED, OTHER = (
    "timeout",
    "pool",
    "connection",
    "locked",
    "storage",
    "vanished",
    "other",
)
CAUSES = (TIMEOUT, POOL, CONNECTION, LOCKED, STORAGE, VANISHED, OTHER)

# PostgreSQL SQLSTATE codes, then classes, that mean the server cannot serve now. Everything else, among them
# class 42 (syntax_error 42601, undefined_table 42P01, undefined_column 42703), class 23 (constraints) and
# class 22 (data), is a bug.
_SQLSTATE_CAUSES = {
    "57014": TIMEOUT,  # query_canceled: the statement timeout
    "55P03": LOCKED,  # lock_not_available
    "53300": CONNECTION,  # too_many_connections (for the server, the database or the role)
    "57P04": VANISHED,  # database_dropped
    "3D000": VANISHED,  # invalid_catalog_name: the database does not exist (dropped, renamed)
    "25006": STORAGE,  # read_only_sql_transaction: a standby, or a database made read-only
    "25P03": CONNECTION,  # idle_in_transaction_session_timeout: the server ended the session, its client too slow
}
_SQLSTATE_CLASS_CAUSES = {
    "08": CONNECTION,  # connection exceptions
    "28": CONNECTION,  # invalid authorization: a wrong password, a role that may not log in or is gone
    "53": STORAGE,  # insufficient resources: disk full, out of memory
    "57": CONNECTION,  # operator intervention: admin_shutdown, crash_shutdown, cannot_connect_now
    "58": STORAGE,  # system errors: I/O
}
# What the server answers to a new connection, and to nothing else, when it refuses it:
# object_not_in_prerequisite_state (the database does not accept connections now) and
# insufficient_privilege (the role lost its CONNECT privilege). Raised by a statement, they are bugs.
_CONNECT_SQLSTATE_CAUSES = {"55000": CONNECTION, "42501": CONNECTION}

# SQLite primary result codes (the low byte of the extended code): BUSY, LOCKED and PROTOCOL (a WAL lock
# race); PERM, READONLY, IOERR, FULL, NOLFS; CORRUPT and NOTADB (the file is damaged, or is not a database);
# CANTOPEN, SQLite's "cannot reach the database". SQLITE_ERROR (a syntax error, no such table or column),
# CONSTRAINT, MISMATCH, TOOBIG, RANGE, MISUSE, INTERNAL, ABORT, INTERRUPT and SCHEMA are bugs.
_SQLITE_CAUSES = {
    5: LOCKED,
    6: LOCKED,
    15: LOCKED,
    3: STORAGE,
    8: STORAGE,
    10: STORAGE,
    13: STORAGE,
    22: STORAGE,
    11: STORAGE,
    26: STORAGE,
    14: CONNECTION,
}
# SQLITE_READONLY_DBMOVED: SQLite's own finding that the file it opened is no longer at its path.
_SQLITE_EXTENDED_CAUSES = {8 | (4 << 8): VANISHED}

# Socket errors that mean the network or the server is not there.
_NETWORK_ERRNOS = frozenset(
    {
        errno.ECONNREFUSED,
        errno.ECONNRESET,
        errno.ECONNABORTED,
        errno.EPIPE,
        errno.ETIMEDOUT,
        errno.ENETUNREACH,
        errno.ENETDOWN,
        errno.EHOSTUNREACH,
        errno.EHOSTDOWN,
        errno.EADDRNOTAVAIL,
    }
)


def _sqlstate_cause(sqlstate: object, *, connecting: bool) -> str | None:
    if not isinstance(sqlstate, str):
        return None
    cause = _SQLSTATE_CAUSES.get(sqlstate) or _SQLSTATE_CLASS_CAUSES.get(sqlstate[:2])
    if cause is None and connecting:
        cause = _CONNECT_SQLSTATE_CAUSES.get(sqlstate)
    return cause


def _sqlite_cause(code: object) -> str | None:
    if not isinstance(code, int):
        return None
    return _SQLITE_EXTENDED_CAUSES.get(code) or _SQLITE_CAUSES.get(code & 0xFF)


def _driver_cause(error: object, *, connecting: bool) -> str | None:
    return _sqlstate_cause(getattr(error, "sqlstate", None), connecting=connecting) or _sqlite_cause(
        getattr(error, "sqlite_errorcode", None)
    )


def _has_code(error: object) -> bool:
    sqlstate, sqlite_code = getattr(error, "sqlstate", None), getattr(error, "sqlite_errorcode", None)
    return isinstance(sqlstate, str) or isinstance(sqlite_code, int)


def _network_cause(exc: OSError, *, connecting: bool) -> str | None:
    if isinstance(exc, ConnectionError | socket.gaierror | socket.herror) or exc.errno in _NETWORK_ERRNOS:
        return CONNECTION
    # Setting up a connection raises more than these: asyncio's one OSError for every address of a host
    # that refused ("Multiple exceptions: …", without an errno), a TLS handshake that failed.
    return CONNECTION if connecting else None


def unavailable_cause(exc: BaseException, *, connecting: bool = False) -> str | None:
    """The kind of outage that `exc` shows, or None when it is not an outage (a wrong statement, a violated
    constraint, a bug). `connecting`: `exc` came from setting up a new connection, where a few more of the
    server's refusals, and every OSError, mean that the database cannot be reached."""
    if isinstance(exc, sa.exc.TimeoutError | PoolTimeout):
        return POOL
    if isinstance(exc, TimeoutError):
        return TIMEOUT
    if isinstance(exc, OSError):
        return _network_cause(exc, connecting=connecting)
    if isinstance(exc, asyncpg.PostgresError):
        return _driver_cause(exc, connecting=connecting)
    if isinstance(exc, asyncpg.InterfaceError | asyncpg.InternalClientError):
        # A value the driver cannot send, or a setting it cannot use, is a fault of the service (these are
        # also ValueErrors). The client's other errors mean that the connection cannot serve: it is closed,
        # the pool is closing, or the protocol went off track (as when the server ends a connection between
        # two statements and the next one runs into its farewell); the store discards that connection.
        return None if isinstance(exc, ValueError) else CONNECTION
    if isinstance(exc, sa.exc.DBAPIError):
        if exc.connection_invalidated:
            return CONNECTION
        if _has_code(exc.orig):
            return _driver_cause(exc.orig, connecting=connecting)
        if isinstance(exc, sa.exc.InterfaceError):
            return CONNECTION
        return OTHER if isinstance(exc, sa.exc.OperationalError) else None
    if isinstance(exc, sqlite3.Error):
        return _driver_cause(exc, connecting=connecting)
    return None


def unavailable(exc: BaseException, *, connecting: bool = False) -> DatabaseUnavailable | None:
    """The 503 to answer for `exc`, or None when `exc` is not an outage and must stay what it is."""
    cause = unavailable_cause(exc, connecting=connecting)
    if cause is None:
        return None
    # The driver's own words, without the SQL and parameters that SQLAlchemy adds to its messages
    # (SQLAlchemy's asyncpg adapter keeps asyncpg's own exception as the cause of its own).
    wrapped = exc.orig if isinstance(exc, sa.exc.DBAPIError) and exc.orig is not None else exc
    driver_error = wrapped.__cause__ or wrapped
    return DatabaseUnavailable(cause=cause, detail=_detail(driver_error))


def _detail(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:300]


def vanished(detail: str) -> DatabaseUnavailable:
    """The 503 for a database that is not, or no longer, where the configuration says."""
    return DatabaseUnavailable(cause=VANISHED, detail=detail)


UNCONFIRMED = (
    "The database did not confirm the write, which may have been made or not. Send it again with the same "
    "Idempotency-Key, or read the record and send it again with If-Match."
)


def unconfirmed(error: DatabaseUnavailable) -> DatabaseUnavailable:
    """The 503 for a write whose commit went unanswered, of which the database could not say whether it committed:
    not the plain 503, which promises that nothing changed (docs/explanation/promises.md)."""
    return DatabaseUnavailable(UNCONFIRMED, cause=error.cause, detail=f"{error.detail} (commit not confirmed)")


def raise_translated(exc: BaseException, *, connecting: bool = False) -> NoReturn:
    """Raise the 503 for `exc` when it is an outage, from it; else `exc` itself, unchanged.

    For the handler of `exc`, in place of `raise`.
    """
    if (error := unavailable(exc, connecting=connecting)) is None:
        raise exc
    raise error from exc
