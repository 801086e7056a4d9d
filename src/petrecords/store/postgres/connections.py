"""The pool's connections and the server's sessions: when one is broken, how a session is bounded, and what
became of a write whose commit went unanswered."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import sqlalchemy as sa

from petrecords.config import Settings
from petrecords.store.postgres.statements import _arguments, _compiled
from petrecords.tables import changes


def session_bounds(settings: Settings) -> dict[str, str]:
    """The server's settings that end a session whose client has gone (see the package's docstring): idle inside a
    transaction, or silent. Keepalives begin after half the TCP timeout and end it with three probes."""
    tcp_seconds = settings.db_tcp_timeout_seconds
    return {
        "idle_in_transaction_session_timeout": str(int(settings.db_idle_in_transaction_timeout_seconds * 1000)),
        "tcp_keepalives_idle": str(max(1, tcp_seconds // 2)),
        "tcp_keepalives_interval": str(max(1, tcp_seconds // 6)),
        "tcp_keepalives_count": "3",
        "tcp_user_timeout": str(tcp_seconds * 1000),
    }


def _terminate(connection: Any) -> None:
    """Close a pooled connection at once, which gives it back to the pool (that opens a new one when needed)."""
    with contextlib.suppress(asyncpg.InterfaceError):  # it is closed already, and back in the pool
        connection.terminate()


def _usable(connection: Any) -> bool:
    try:
        return not connection.is_closed()
    except asyncpg.InterfaceError:  # closed, and back in the pool
        return False


def _broken(exc: BaseException) -> bool:
    """Whether a connection that raised `exc` may be in an unknown state: anything but the server's own errors."""
    return not isinstance(exc, asyncpg.PostgresError) or isinstance(exc, asyncpg.PostgresConnectionError)


def _session_ended(exc: BaseException) -> bool:
    """Whether `exc` ended the session: the connection broke, or the server ended it (a connection exception, an
    operator's intervention, its idle-in-transaction bound). A COMMIT that raised it may have committed; one that
    failed otherwise rolled back."""
    sqlstate = getattr(exc, "sqlstate", None) or ""
    return _broken(exc) or sqlstate[:2] in ("08", "57") or sqlstate == "25P03"


def _cut_short(exc: BaseException) -> bool:
    """Whether `exc` cut a statement short on the client's side: asyncpg then sends the server a cancel request."""
    return isinstance(exc, TimeoutError | asyncio.CancelledError)


Session = tuple[int, datetime.datetime]
"""A session of the server: the process id of its backend, and when that began (a process id is used again)."""
_SESSION = "SELECT pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()"


class _Connection(asyncpg.Connection):  # type: ignore[misc]
    """A pooled connection, and the session of the server it is to, where a write may be sent outside a
    transaction (see PostgresTransaction._write_deferred): what ends that session if the write's answer is lost."""

    session: Session | None = None


async def _set_up(connection: _Connection, *, statements: str, session: bool) -> None:
    """What a new connection of the pool runs first: `statements` (settings of the session, in one round trip),
    and, with `session`, a look at its session."""
    if statements:
        await connection.execute(statements)
    if session:
        row = await connection.fetchrow(_SESSION)
        connection.session = (row[0], row[1])


_WAIT_FOR_AN_END_MS = 1000
"""How long one attempt to end a session waits for its backend to exit."""
_END_TRANSACTION = (
    "SELECT pg_terminate_backend(pid, $2) FROM pg_stat_activity WHERE backend_xid::text::bigint = ($1 & 4294967295)"
)
"""Ends the session whose transaction has the id $1 (32 bits of it: pg_stat_activity's, see _HORIZON), if one has."""
_TRANSACTION_STATUS = "SELECT pg_xact_status(CAST(CAST($1 AS bigint) AS text)::xid8)"
_END_SESSION = "SELECT pg_terminate_backend(pid, $3) FROM pg_stat_activity WHERE pid = $1 AND backend_start = $2"


async def _transaction_outcome(connection: Any, *, xid: int) -> bool | None:
    """Whether the transaction `xid` committed; None while it is in progress. A session that still holds it (its
    COMMIT may still be on its way) is ended first: then it never commits."""
    status = await connection.fetchval(_TRANSACTION_STATUS, xid)
    if status == "in progress":
        # Refused for a session of another role (a pooler's own): the bounds of its session end it then.
        with contextlib.suppress(asyncpg.InsufficientPrivilegeError):
            await connection.fetch(_END_TRANSACTION, xid, _WAIT_FOR_AN_END_MS)
        status = await connection.fetchval(_TRANSACTION_STATUS, xid)
    return {"committed": True, "aborted": False}.get(status)


_CHANGE_KEPT = sa.select(
    sa.exists().where(
        changes.c.resource == sa.bindparam("resource"),
        changes.c.record_id == sa.bindparam("record_id", type_=changes.c.record_id.type),
        changes.c.version == sa.bindparam("version"),
    )
)


async def _statement_outcome(connection: Any, *, session: Session, change: dict[str, Any]) -> bool | None:
    """Whether a write sent on its own (a transaction of its own) in `session` committed, by the `change` it keeps,
    once that session has ended (ended here if need be); None when it could not be ended."""
    ended = await connection.fetch(_END_SESSION, *session, _WAIT_FOR_AN_END_MS)
    if not all(row[0] for row in ended):
        return None
    compiled = _compiled(_CHANGE_KEPT)
    return bool(await connection.fetchval(compiled[0], *_arguments(compiled, change)))


Outcome = Callable[[Any], Awaitable[bool | None]]
"""What became of a write whose commit went unanswered, asked on a connection of its own: True committed, False
not, None not known yet."""


async def _keep_session(_connection: Any) -> None:
    """What the pool does to a connection given back (asyncpg has rolled back a transaction left open):
    nothing. The store leaves no session state behind (no SET, LISTEN, cursors or session-level locks), so
    asyncpg's default reset (RESET ALL and more) would only cost a round trip per request."""
