"""The change log in a transaction: a change kept with its write, a record's history, the feed's reads up to the
horizon, retention, and the cursors kept in its state."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Sequence
from typing import Any

import msgspec
import sqlalchemy as sa

from petrecords.store.base import Change, Cursor, NewChange, ShareWindow, Versions, Viewer, WriteInFlight
from petrecords.store.changelog import (
    PURGE_CHANGES,
    PURGED,
    SEEN_BY_SEPARATOR,
    SELECT_CHANGE_AT,
    SELECT_HISTORY_KEYS,
    SELECT_LAST_CHANGE,
    SELECT_STATE_CURSOR,
    SET_LEASED_CURSOR,
    Horizon,
    change_of,
    changes_after_select,
    changes_values,
    committed_after_select,
    count_after_select,
    count_history_statement,
    head_select,
    history_statement,
    kept_actions_statement,
    oldest_changes_select,
)
from petrecords.store.records import stored_uuid
from petrecords.store.runner import Runner


class SqlChangeLog(Runner):
    """The change log's statements run; a part of SqlTransaction."""

    horizon: Horizon
    change_insert: sa.Insert
    changes_seen_by_statement: sa.Select[Any]
    """`changes_seen_by_select` in the dialect's form."""
    state_upserts: tuple[sa.Insert, sa.Insert]

    window_statements: tuple[sa.Update, sa.Insert]
    """`changelog.window_statements` at the dialect's cursor of the change just kept."""
    shared_at_statement: sa.Select[Any]
    dialect_name: str

    async def record_change(self, change: NewChange, window: ShareWindow | None = None) -> None:
        values = msgspec.structs.asdict(change)
        await self.execute(self.change_insert, values)
        if window is not None:
            # Right after the change: they take its cursor from the database, as the log gave it.
            close, open_ = self.window_statements
            await self.execute(close, {"share_id": window.share_id})
            if window.opens:
                opened = {
                    "share_id": window.share_id,
                    "grantee": window.grantee,
                    "shared_key": window.shared_key,
                    "expires_at": window.expires_at,
                }
                await self.execute(open_, opened)

    async def record_changes(self, changes: Sequence[NewChange]) -> None:
        if changes:
            await self.execute(self.change_insert, [msgspec.structs.asdict(change) for change in changes])

    async def shared_at(self, shared_key: uuid.UUID, grantees: tuple[str, ...], cursor: Cursor, at: int) -> bool:
        values = {
            "shared_key": shared_key,
            "grantees": self.readers_value(grantees),
            "xid": cursor[0],
            "position": cursor[1],
            "at": at,
        }
        return bool(await self.fetch((self.shared_at_statement, values)))

    async def history(
        self, resource: str, record_id: uuid.UUID, *, limit: int, offset: int, versions: Versions | None = None
    ) -> Sequence[Change]:
        statement = history_statement(resource, record_id, versions, limit=limit, offset=offset)
        return [change_of(row) for row in await self.fetch(statement)]

    async def count_history(self, resource: str, record_id: uuid.UUID, *, versions: Versions | None = None) -> int:
        return int((await self.fetch(count_history_statement(resource, record_id, versions)))[0][0])

    async def history_keys(self, resource: str, record_id: uuid.UUID) -> Sequence[uuid.UUID]:
        rows = await self.fetch((SELECT_HISTORY_KEYS, {"resource": resource, "record_id": record_id}))
        return [stored_uuid(row[0]) for row in rows]

    async def last_change(self, resource: str, record_id: uuid.UUID) -> Change | None:
        rows = await self.fetch((SELECT_LAST_CHANGE, {"resource": resource, "record_id": record_id}))
        return change_of(rows[0]) if rows else None

    async def kept_actions(
        self, resource: str, record_ids: Sequence[uuid.UUID], actions: tuple[str, ...]
    ) -> set[tuple[uuid.UUID, str, int]]:
        if not record_ids:
            return set()
        rows = await self.fetch(kept_actions_statement(resource, record_ids, actions))
        return {(stored_uuid(row[0]), row[1], row[2]) for row in rows}

    async def changes_after(
        self, cursor: Cursor, *, limit: int, reader: Viewer | None, resources: tuple[str, ...] | None
    ) -> Sequence[Change]:
        statement = changes_after_select(
            self.horizon,
            by_reader=reader is not None,
            resources=None if resources is None else len(resources),
            dialect=self.dialect_name,
            owners=1 if reader is None else len(reader.grantees),
        )
        values = self.changes_values(cursor, limit, reader, resources)
        return [change_of(row) for row in await self.fetch((statement, values))]

    def changes_values(
        self, cursor: Cursor, limit: int, reader: Viewer | None, resources: tuple[str, ...] | None
    ) -> dict[str, Any]:
        grantees = None if reader is None else self.readers_value(reader.grantees)
        return changes_values(cursor, limit, reader, resources, grantees)

    async def changes_seen_by(
        self, cursor: Cursor, *, through: Cursor, readers: Sequence[str], limit: int
    ) -> Sequence[Change]:
        values = {
            "after_xid": cursor[0],
            "after_position": cursor[1],
            "through_xid": through[0],
            "through_position": through[1],
            "readers": self.readers_value(readers),
            "limit": limit,
        }
        rows = await self.fetch((self.changes_seen_by_statement, values))
        return [change_of(row, tuple(row[13].split(SEEN_BY_SEPARATOR)) if row[13] is not None else ()) for row in rows]

    @staticmethod
    def readers_value(readers: Sequence[str]) -> Any:
        """A list of callers as `changes_seen_by_statement` takes it."""
        raise NotImplementedError

    async def head_cursor(self) -> Cursor:
        rows = await self.fetch((head_select(self.horizon), {}))
        return max(((row[0], row[1]) for row in rows), default=(0, 0))

    async def committed_after(self, cursor: Cursor, *, limit: int) -> Sequence[Cursor]:
        values = {"after_xid": cursor[0], "after_position": cursor[1], "limit": limit}
        return [(row[0], row[1]) for row in await self.fetch((committed_after_select(self.horizon), values))]

    async def count_changes_after(self, cursor: Cursor) -> int:
        values = {"after_xid": cursor[0], "after_position": cursor[1]}
        return int((await self.fetch((count_after_select(self.horizon), values)))[0][0])

    async def oldest_write_in_flight(self) -> WriteInFlight | None:
        return None  # one writer (SQLite): the log has no horizon to wait for anything

    async def is_a_change(self, cursor: Cursor) -> bool:
        # One point of the (xid, position) index, not bounded by the horizon: a transaction still in flight
        # (of another database, on PostgreSQL, that the horizon cannot tell apart) must not unmake a cursor.
        return bool(await self.fetch((SELECT_CHANGE_AT, {"xid": cursor[0], "position": cursor[1]})))

    async def purged_through(self) -> Cursor:
        return await self.state_cursor(PURGED)

    async def state_cursor(self, name: str) -> Cursor:
        rows = await self.fetch((SELECT_STATE_CURSOR, {"name": name}))
        return (rows[0][0], rows[0][1]) if rows else (0, 0)

    async def purge_changes(self, *, before_ms: int, limit: int) -> int:
        oldest = await self.fetch((oldest_changes_select(self.horizon), {"limit": limit}))
        expired = list(itertools.takewhile(lambda row: row[2] < before_ms, oldest))
        if not expired:
            return 0
        through = (expired[-1][0], expired[-1][1])
        await self.execute(PURGE_CHANGES, {"through_xid": through[0], "through_position": through[1]})
        await self.execute(self.state_upserts[0], {"name": PURGED, "xid": through[0], "position": through[1]})
        return len(expired)

    async def set_state_cursor(self, name: str, cursor: Cursor, *, holder: str) -> bool:
        values = {"name": name, "holder": holder, "xid": cursor[0], "position": cursor[1]}
        return bool(await self.fetch((SET_LEASED_CURSOR, values)))
