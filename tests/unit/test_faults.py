"""Which database errors are outages (503/986, by cause) and which are bugs (500): the whole table.

The API tests inject each fault that a test can cause for real (tests/api/test_database_gone.py,
tests/api/test_database_bugs.py and tests/api/test_database_faults.py); this is the table they sample.
"""

from __future__ import annotations

import errno
import socket

import asyncpg
import pysqlite3.dbapi2 as sqlite3
import pytest
import sqlalchemy as sa

from petrecords.store.faults import CAUSES, PoolTimeout, unavailable, unavailable_cause


def _postgres(sqlstate: str) -> asyncpg.PostgresError:
    error_class = asyncpg.PostgresError.get_message_class_for_sqlstate(sqlstate)
    error: asyncpg.PostgresError = error_class(f"the server said {sqlstate}")
    return error


def _sqlite(code: int, error_class: type[sqlite3.Error] = sqlite3.OperationalError) -> sqlite3.Error:
    error = error_class(f"SQLite said {code}")
    error.sqlite_errorcode = code
    return error


@pytest.mark.parametrize(
    ("sqlstate", "cause"),
    [
        ("08006", "connection"),  # connection_failure
        ("08001", "connection"),  # sqlclient_unable_to_establish_sqlconnection
        ("08003", "connection"),  # connection_does_not_exist
        ("28P01", "connection"),  # invalid_password
        ("28000", "connection"),  # invalid_authorization_specification
        ("3D000", "vanished"),  # invalid_catalog_name: the database does not exist
        ("57P04", "vanished"),  # database_dropped
        ("57P01", "connection"),  # admin_shutdown
        ("57P02", "connection"),  # crash_shutdown
        ("57P03", "connection"),  # cannot_connect_now
        ("53300", "connection"),  # too_many_connections
        ("53100", "storage"),  # disk_full
        ("58030", "storage"),  # io_error
        ("25006", "storage"),  # read_only_sql_transaction
        ("57014", "timeout"),  # query_canceled: the statement timeout
        ("25P03", "connection"),  # idle_in_transaction_session_timeout: the server ended the session
        ("55P03", "locked"),  # lock_not_available
        ("42601", None),  # syntax_error
        ("42P01", None),  # undefined_table
        ("42703", None),  # undefined_column
        ("23505", None),  # unique_violation
        ("22001", None),  # string_data_right_truncation
        ("40P01", None),  # deadlock_detected: the service orders its locks, so one is a bug
        ("55000", None),  # object_not_in_prerequisite_state, from a statement
        ("42501", None),  # insufficient_privilege, from a statement
        ("XX000", None),  # internal_error
    ],
)
def test_postgresql_sqlstates(sqlstate: str, cause: str | None) -> None:
    assert unavailable_cause(_postgres(sqlstate)) == cause


@pytest.mark.parametrize("sqlstate", ["55000", "42501"])
def test_refusals_of_a_new_connection_are_outages(sqlstate: str) -> None:
    """A database that does not accept connections now; a role that lost its CONNECT privilege."""
    assert unavailable_cause(_postgres(sqlstate), connecting=True) == "connection"


@pytest.mark.parametrize(
    ("code", "cause"),
    [
        (5, "locked"),  # BUSY
        (5 | (3 << 8), "locked"),  # BUSY_TIMEOUT
        (6, "locked"),  # LOCKED
        (15, "locked"),  # PROTOCOL
        (8, "storage"),  # READONLY
        (8 | (4 << 8), "vanished"),  # READONLY_DBMOVED
        (10, "storage"),  # IOERR
        (10 | (4 << 8), "storage"),  # IOERR_FSYNC
        (13, "storage"),  # FULL
        (3, "storage"),  # PERM
        (11, "storage"),  # CORRUPT
        (26, "storage"),  # NOTADB
        (14, "connection"),  # CANTOPEN
        (1, None),  # ERROR: a syntax error, no such table or column
        (17, None),  # SCHEMA
        (19, None),  # CONSTRAINT
        (19 | (6 << 8), None),  # CONSTRAINT_PRIMARYKEY
        (20, None),  # MISMATCH
        (18, None),  # TOOBIG
        (21, None),  # MISUSE
        (25, None),  # RANGE
        (2, None),  # INTERNAL
        (4, None),  # ABORT
        (9, None),  # INTERRUPT
    ],
)
def test_sqlite_result_codes(code: int, cause: str | None) -> None:
    assert unavailable_cause(_sqlite(code)) == cause
    wrapped = sa.exc.OperationalError("INSERT …", {}, _sqlite(code))
    assert unavailable_cause(wrapped) == cause


def test_a_sqlite_error_without_a_code_is_a_bug() -> None:
    assert unavailable_cause(sqlite3.OperationalError("no code")) is None
    assert unavailable_cause(sqlite3.ProgrammingError("Cannot operate on a closed database.")) is None


@pytest.mark.parametrize(
    ("error", "cause"),
    [
        (ConnectionRefusedError(errno.ECONNREFUSED, "refused"), "connection"),
        (ConnectionResetError(errno.ECONNRESET, "reset"), "connection"),
        (BrokenPipeError(errno.EPIPE, "broken pipe"), "connection"),
        (socket.gaierror(socket.EAI_NONAME, "Name or service not known"), "connection"),
        (OSError(errno.EHOSTUNREACH, "No route to host"), "connection"),
        (OSError(errno.ENETUNREACH, "Network is unreachable"), "connection"),
        (TimeoutError(), "timeout"),
        (FileNotFoundError(errno.ENOENT, "No such file or directory"), None),
        (PermissionError(errno.EACCES, "Permission denied"), None),
        (OSError("Multiple exceptions: [Errno 111] …, [Errno 111] …"), None),
    ],
)
def test_os_errors(error: OSError, cause: str | None) -> None:
    assert unavailable_cause(error) == cause


def test_every_os_error_of_a_new_connection_is_an_outage() -> None:
    """asyncio's one error for every address of a host that refused has no errno; TLS failures neither."""
    assert unavailable_cause(OSError("Multiple exceptions: …"), connecting=True) == "connection"


@pytest.mark.parametrize(
    ("error", "cause"),
    [
        (PoolTimeout("no pooled connection came free"), "pool"),
        (sa.exc.TimeoutError("QueuePool limit reached"), "pool"),
        (asyncpg.InterfaceError("connection is closed"), "connection"),
        (asyncpg.exceptions.DataError("invalid input for query argument $1"), None),
        (ValueError("not a database error"), None),
    ],
)
def test_client_and_pool_errors(error: Exception, cause: str | None) -> None:
    assert unavailable_cause(error) == cause


def test_causes_are_a_closed_set() -> None:
    assert CAUSES == ("timeout", "pool", "connection", "locked", "storage", "vanished", "other")


def test_an_outage_says_the_drivers_words_without_sql() -> None:
    wrapped = sa.exc.OperationalError("INSERT INTO pets VALUES (?)", {"secret": 1}, _sqlite(13))

    error = unavailable(wrapped)

    assert error is not None
    assert (error.cause, error.status, error.code) == ("storage", 503, 986)
    assert error.detail == "OperationalError: SQLite said 13"
