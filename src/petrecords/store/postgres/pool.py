"""The store on PostgreSQL: the pool of a process, the replicas, and the settling of unanswered commits."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import Any

import asyncpg

from petrecords.config import Settings
from petrecords.db import postgres_connect_args, postgres_dsn, statement_timeout_ms
from petrecords.store.base import Principal
from petrecords.store.faults import DATABASE_ERRORS, PoolTimeout, unavailable, unconfirmed
from petrecords.store.grants import PlanSizes
from petrecords.store.pages import PageAnchors
from petrecords.store.postgres.connections import (
    Outcome,
    _Connection,
    _keep_session,
    _set_up,
    _terminate,
    session_bounds,
)
from petrecords.store.postgres.transaction import PostgresTransaction
from petrecords.store.replicas import ReadReplicas
from petrecords.store.sql import SqlStore

log = logging.getLogger("petrecords.replicas")
outcomes_log = logging.getLogger("petrecords.store")


class PostgresStore(SqlStore):
    dialect = "postgresql"

    def __init__(self, settings: Settings, *, url: str | None = None) -> None:
        super().__init__()
        self._dsn = postgres_dsn(url or settings.resolved_database_url)
        self._connect_args = postgres_connect_args(settings)
        timeout_ms = statement_timeout_ms(settings)
        pooler = settings.db_pooler
        bounds = session_bounds(settings)
        idle_ms = bounds["idle_in_transaction_session_timeout"]
        if pooler == "none":
            self._connect_args["server_settings"] = {**self._connect_args["server_settings"], **bounds}
        self.begin_statement = "BEGIN"
        if pooler == "transaction":
            # In the round trip of BEGIN: a simple query may hold several statements.
            self.begin_statement = (
                f"BEGIN; SET LOCAL statement_timeout = {timeout_ms}; "
                f"SET LOCAL idle_in_transaction_session_timeout = {idle_ms}"
            )
        self.statement_timeout_seconds = settings.db_statement_timeout_seconds
        self.statement_timeout_ms = timeout_ms
        self.long_read_idle_ms = max(timeout_ms, int(idle_ms))
        """How long a long read's transaction may stay idle between its slices: as long as the statement timeout
        lets it rest, and never less than any other transaction's bound (a statement timeout of 1 ms would
        otherwise end the session in the client's own moments between two statements on a busy machine)."""
        self.long_read_share = settings.long_read_share
        self.read_timeout: float | None = settings.db_statement_timeout_seconds if pooler == "transaction" else None
        """The client's bound on a read outside a transaction, when the server has none (None: the default)."""
        self.writes_alone = pooler != "transaction"
        """Whether writes that read nothing may run as one statement outside BEGIN and COMMIT: not where the
        statement timeout holds only inside a transaction (SET LOCAL)."""
        self.recovers_cut_short = pooler == "transaction"
        """Whether a connection cut short is recovered rather than terminated: only the client's cancel request
        can end its statement on the server, where nothing else bounds it."""
        # In session pooling a client connection keeps one server connection throughout, until it is closed.
        settings_of_session = ""
        if pooler == "session":
            settings_of_session = (
                f"SET statement_timeout = {timeout_ms}; SET idle_in_transaction_session_timeout = {idle_ms}"
            )
        self._set_up = functools.partial(
            _set_up, statements=settings_of_session, session=self.writes_alone and url is None
        )
        self._recovering: set[asyncio.Task[None]] = set()
        self._size = settings.db_pool_size
        self.replicas: ReadReplicas[PostgresStore] | None = None
        if url is None and settings.database_read_urls:
            replicas = [PostgresStore(settings, url=replica_url) for replica_url in settings.database_read_urls]
            self.replicas = ReadReplicas(settings, self, replicas)
        self._wait_seconds = settings.db_connect_timeout_seconds
        """The longest wait for a connection: for a pooled one to come free, or for a new one to be set up."""
        self._pool: Any = None
        self._pool_lock = asyncio.Lock()
        self._checked_out = 0
        self.page_anchors = PageAnchors()
        self.plan_sizes = PlanSizes()

    @property
    def read_connections(self) -> int:
        return self._size

    def transaction(self, *, write: bool, single: bool = False, caller: Principal | None = None) -> PostgresTransaction:
        # Reads run without BEGIN and COMMIT anyway (see the package's docstring).
        return PostgresTransaction(self, write=write, caller=caller)

    async def _open_pool(self) -> Any:
        # On first use: the pool belongs to the event loop of the process's server worker. It opens
        # connections only when they are needed, so that creating it cannot fail while the database is away.
        async with self._pool_lock:
            if self._pool is None:
                self._pool = await asyncpg.create_pool(
                    self._dsn,
                    min_size=0,
                    max_size=self._size,
                    reset=_keep_session,
                    init=self._set_up,
                    connection_class=_Connection,
                    **self._connect_args,
                )
        return self._pool

    async def acquire(self) -> Any:
        """A connection of the pool, for one transaction, or DatabaseUnavailable within the wait allowed."""
        pool = self._pool if self._pool is not None else await self._open_pool()
        try:
            async with asyncio.timeout(self._wait_seconds):
                connection = await pool.acquire()
        except DATABASE_ERRORS as exc:
            # Acquiring sets up a new connection when the pool has no open one free: the server's refusals of a
            # connection (a database that does not accept connections, a role without CONNECT) are outages.
            error = unavailable(exc, connecting=True)
            if isinstance(exc, TimeoutError) and self._checked_out >= self._size:
                # Every connection was in use all along: the wait was for one of them, not for the database.
                pool_timeout = PoolTimeout(f"no pooled connection came free within {self._wait_seconds:g} s")
                error = unavailable(pool_timeout)
            if error is None:
                raise
            raise error from exc
        self._checked_out += 1
        return connection

    async def release(self, connection: Any) -> None:
        try:
            await self._pool.release(connection, timeout=self._wait_seconds)
        except DATABASE_ERRORS:
            pass  # asyncpg has terminated the connection instead; the pool opens a new one when it needs one
        finally:
            self._checked_out -= 1

    async def give_back(self, connection: Any, *, recover: bool) -> None:
        if not recover:
            await self.release(connection)
            return
        task = asyncio.get_running_loop().create_task(self.recover(connection))
        self._recovering.add(task)
        task.add_done_callback(self._recovering.discard)

    async def recover(self, connection: Any) -> None:
        """Give back a connection whose statement was cut short, once the server has answered asyncpg's cancel
        request (the next statement waits for that), with no transaction left open on it; terminated instead
        when that does not happen within the connect timeout."""
        try:
            async with asyncio.timeout(self._wait_seconds):
                await connection.execute("ROLLBACK")
        except Exception:  # whatever went wrong, the connection is not reused
            _terminate(connection)
        except BaseException:
            _terminate(connection)
            raise
        finally:
            await self.release(connection)

    async def settle(self, unanswered: BaseException, outcome: Outcome | None) -> None:
        """After a write whose commit went unanswered (`unanswered`: a connection that broke or timed out): return
        when it committed after all, else raise the 503 that says what became of it, changed nothing or not known.
        Asked on connections of its own (the pool's may all be in use, or broken), for up to the statement timeout,
        the database being away meanwhile; `outcome` None: there is no asking."""
        error = unavailable(unanswered)
        if error is None:
            raise unanswered
        committed = None
        deadline = time.monotonic() + self.statement_timeout_seconds
        while outcome is not None and (remaining := deadline - time.monotonic()) > 0:
            try:
                async with asyncio.timeout(remaining):
                    connection = await asyncpg.connect(self._dsn, **self._connect_args)
                    try:
                        committed = await outcome(connection)
                    finally:
                        connection.terminate()
            except DATABASE_ERRORS:
                committed = None
            if committed is not None:
                break
            await asyncio.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
        said = {True: "it committed", False: "it changed nothing", None: "what became of it is not known"}[committed]
        outcomes_log.warning(
            "a write's commit went unanswered (%s): %s",
            error.cause,
            said,
            extra={"fields": {"cause": error.cause, "detail": error.detail, "committed": committed}},
        )
        if committed:
            return
        raise (error if committed is False else unconfirmed(error)) from unanswered

    def pool_figures(self) -> dict[str, int]:
        idle = 0 if self._pool is None else self._pool.get_idle_size()
        return {"size": self._size, "checked_out": self._checked_out, "overflow": 0, "idle": idle}

    async def close(self) -> None:
        if self.replicas is not None:
            await self.replicas.close()
        if self._recovering:
            await asyncio.wait(self._recovering)
        if self._pool is None:
            return
        try:
            # Gracefully, once every connection has come back, which the server's draining lets happen.
            await asyncio.wait_for(self._pool.close(), self._wait_seconds)
        except DATABASE_ERRORS:
            self._pool.terminate()
