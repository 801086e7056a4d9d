"""The change log's statements: keep a change, read a record's history, read the log after a cursor in commit
order (up to the horizon of the transactions still in flight), and the service state it keeps its places in."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.compiler import compiles

from petrecords.store.base import (
    HISTORY_KEYS,
    Change,
    Cursor,
    Versions,
    Viewer,
)
from petrecords.store.records import padded, stored_uuid, values_of
from petrecords.tables import (
    SHARED,
    changes,
    service_state,
    share_windows,
)


class LeadingJoin(sa.Join):
    """A join whose left side is read first, each of its rows looked up in the right side's index. SQLite keeps the
    order of a CROSS JOIN: left to choose, it read the log's range after a feed's cursor (or the whole log, in its
    order) and looked each change up in the reader's share windows, 75 ms a page at 200,000 changes for a reader
    with no share, where the windows' few rows lead to the changes of their shared records."""

    inherit_cache = True


@compiles(LeadingJoin, "sqlite")
def _cross_join(join: LeadingJoin, compiler: Any, **kw: Any) -> str:
    kw["asfrom"] = True
    left, right = compiler.process(join.left, **kw), compiler.process(join.right, **kw)
    return f"{left} CROSS JOIN {right} ON {compiler.process(join.onclause, **kw)}"


CHANGE_COLUMNS = (
    changes.c.xid,
    changes.c.position,
    changes.c.resource,
    changes.c.record_id,
    changes.c.action,
    changes.c.version,
    changes.c.at,
    changes.c.by,
    changes.c.owner_before,
    changes.c.owner_after,
    changes.c.record,
    changes.c.shared_key,
    changes.c.grantee,
)
_change_cursor = sa.tuple_(changes.c.xid, changes.c.position)
AFTER_XID = sa.bindparam("after_xid", type_=sa.BigInteger())
AFTER_POSITION = sa.bindparam("after_position", type_=sa.BigInteger())
AFTER_CURSOR = _change_cursor > sa.tuple_(AFTER_XID, AFTER_POSITION)
_OF_RECORD = (changes.c.resource == sa.bindparam("resource")) & (
    changes.c.record_id == sa.bindparam("record_id", type_=changes.c.record_id.type)
)
SELECT_HISTORY_KEYS = (
    sa.select(changes.c.shared_key)
    .where(_OF_RECORD, changes.c.shared_key.is_not(None))
    .group_by(changes.c.shared_key)
    .order_by(sa.func.max(changes.c.version).desc())
    .limit(HISTORY_KEYS)
)


def _shown(keys: int, owners: int) -> sa.ColumnElement[bool]:
    """The changes of a record that a history shows (see Versions): those of the writes before or after which it
    was one of the owners', and those that kept it shared through one of the keys."""
    named = [sa.bindparam(f"owner_{i}", type_=changes.c.owner_after.type) for i in range(owners)]
    return sa.or_(
        changes.c.owner_before.in_(named),
        changes.c.owner_after.in_(named),
        changes.c.shared_key.in_([sa.bindparam(f"key_{i}", type_=changes.c.shared_key.type) for i in range(keys)]),
    )


Shown = tuple[int, int] | None
"""(keys, owners) of the Versions a history shows; None: every version."""


@functools.lru_cache(maxsize=HISTORY_KEYS + 1)
def _history_select(shown: Shown) -> sa.Select[Any]:
    where = [_OF_RECORD] if shown is None else [_OF_RECORD, _shown(*shown)]
    return (
        sa.select(*CHANGE_COLUMNS)
        .where(*where)
        # A reminder (contract section 15) does not move the version: it follows the write of that version.
        .order_by(changes.c.version, changes.c.position)
        .limit(sa.bindparam("limit"))
        .offset(sa.bindparam("offset"))
    )


@functools.lru_cache(maxsize=HISTORY_KEYS + 1)
def _count_history_select(shown: Shown) -> sa.Select[Any]:
    where = [_OF_RECORD] if shown is None else [_OF_RECORD, _shown(*shown)]
    return sa.select(sa.func.count()).select_from(changes).where(*where)


def _history_values(resource: str, record_id: uuid.UUID, versions: Versions | None) -> dict[str, Any]:
    values: dict[str, Any] = {"resource": resource, "record_id": record_id}
    if versions is not None:
        values.update({f"owner_{i}": owner for i, owner in enumerate(versions.owners)})
        values.update({f"key_{i}": key for i, key in enumerate(versions.keys)})
    return values


def history_statement(
    resource: str, record_id: uuid.UUID, versions: Versions | None, *, limit: int, offset: int
) -> tuple[sa.Select[Any], dict[str, Any]]:
    """A page of a record's changes (those `versions` says, or every one), oldest first."""
    statement = _history_select(None if versions is None else (len(versions.keys), len(versions.owners)))
    return statement, {**_history_values(resource, record_id, versions), "limit": limit, "offset": offset}


def count_history_statement(
    resource: str, record_id: uuid.UUID, versions: Versions | None
) -> tuple[sa.Select[Any], dict[str, Any]]:
    """How many changes of a record `versions` says (every one, when None)."""
    statement = _count_history_select(None if versions is None else (len(versions.keys), len(versions.owners)))
    return statement, _history_values(resource, record_id, versions)


SELECT_LAST_CHANGE = (
    sa.select(*CHANGE_COLUMNS).where(_OF_RECORD).order_by(changes.c.version.desc(), changes.c.position.desc()).limit(1)
)


@functools.lru_cache(maxsize=16)
def _kept_actions_select(records: int, actions: int) -> sa.Select[Any]:
    return sa.select(changes.c.record_id, changes.c.action, changes.c.version).where(
        changes.c.resource == sa.bindparam("resource"),
        changes.c.record_id.in_([sa.bindparam(f"record_{i}", type_=changes.c.record_id.type) for i in range(records)]),
        changes.c.action.in_([sa.bindparam(f"action_{i}", type_=changes.c.action.type) for i in range(actions)]),
    )


def kept_actions_statement(
    resource: str, record_ids: Sequence[uuid.UUID], actions: tuple[str, ...]
) -> tuple[sa.Select[Any], dict[str, Any]]:
    """The changes of these records (at least one) with these actions: (record id, action, version). The ids are
    padded (records.padded), so that a few statements serve every number of them."""
    records = padded(record_ids)
    values: dict[str, Any] = {"resource": resource}
    values.update({f"record_{i}": record_id for i, record_id in enumerate(records)})
    values.update({f"action_{i}": action for i, action in enumerate(actions)})
    return _kept_actions_select(len(records), len(actions)), values


_STATE_IS = service_state.c.name == sa.bindparam("name")
SELECT_STATE_CURSOR = sa.select(service_state.c.xid, service_state.c.position).where(_STATE_IS)
SELECT_CHANGE_AT = sa.select(sa.literal(1)).where(
    changes.c.xid == sa.bindparam("xid", type_=sa.BigInteger()),
    changes.c.position == sa.bindparam("position", type_=sa.BigInteger()),
)


def change_insert(xid: sa.ColumnElement[int]) -> sa.Insert:
    """Keep one change, with the dialect's id of the writing transaction."""
    values = values_of(changes, but=("position", "xid"))
    # Inline: the position the database gives it is not returned, as nothing reads it.
    return sa.insert(changes).values(xid=xid, **values).inline()


Horizon = sa.ColumnElement[int] | None
"""The first transaction id that a transaction still in flight may hold; None where every change has the same
transaction id (SQLite's one writer: 0), and the position alone orders the log."""


def _past_cursor(horizon: Horizon) -> list[Any]:
    """The changes after a cursor, as the start of a range of the (xid, position) index or of an owner's."""
    if horizon is None:
        # Equalities and one range on the position: SQLite seeks a row-value range only on the columns its
        # other bound names too, and read every change (of the owner) from the first to find those after the
        # cursor: 13 ms a poll at 200,000 changes, 0.8 ms this way. A cursor with another xid matches no change
        # either way.
        return [changes.c.xid == AFTER_XID, changes.c.position > AFTER_POSITION]
    return [AFTER_CURSOR]


def _below(horizon: Horizon) -> list[Any]:
    return [] if horizon is None else [changes.c.xid < horizon]


def after_cursor(horizon: Horizon, owner: tuple[sa.Column[Any], sa.ColumnElement[Any]] | None = None) -> list[Any]:
    """The changes after a cursor and below the horizon, as one range of the (xid, position) index, or of an
    owner's (owner, xid, position) index."""
    if owner is None:
        return [*_past_cursor(horizon), *_below(horizon)]
    if horizon is None:
        return [owner[0] == owner[1], *_past_cursor(None)]
    # One owner's changes as one range of that owner's index, bounded on its leading column and read in its
    # order. Written as `owner = value`, PostgreSQL's generic plan of the prepared statement, which cannot tell a
    # rare owner from a common one, walked the whole (xid, position) index instead.
    column, value = owner
    return [
        sa.tuple_(column, changes.c.xid, changes.c.position) > sa.tuple_(value, AFTER_XID, AFTER_POSITION),
        sa.tuple_(column, changes.c.xid) < sa.tuple_(value, horizon),
    ]


@functools.lru_cache(maxsize=64)
def changes_after_select(
    horizon: Horizon, *, by_reader: bool, resources: int | None, dialect: str = "sqlite", owners: int = 1
) -> sa.Select[Any]:
    """The changes after a cursor, below `horizon`, in order. For a reader: the union of index ranges (shared
    records, records they own after the write, records they owned before it, and, through their shares' windows, the
    shared records' changes), each read in order, so that the few changes of one caller among many are found without
    reading the others. A reader in groups owns as each of them too (`owners`: parameters `reader_{i}`, else one,
    `reader`): two more ranges for each."""

    def resource_filter(where: list[Any], *, by_expression: bool) -> None:
        if resources is not None:
            # For one owner, compared as an expression, so that no index of `resource` can serve it: the owner's
            # range is the one to read. Given the choice, SQLite read every change of the resource through the
            # history's index (70 ms at 200,000 changes) to find a reader who has none.
            resource: sa.ColumnElement[Any] = changes.c.resource
            if by_expression:
                resource = resource.op("||")(sa.literal("", changes.c.resource.type))
            where.append(resource.in_([sa.bindparam(f"resource_{i}") for i in range(resources)]))

    def branch(owner: tuple[sa.Column[Any], sa.ColumnElement[Any]] | None = None) -> sa.Select[Any]:
        where = after_cursor(horizon, owner)
        order: tuple[sa.ColumnElement[Any], ...] = (changes.c.xid, changes.c.position)
        if owner is not None:
            order = (owner[0], *order)
            # Implied by the ranges, but stated: PostgreSQL proves a partial index usable (the owners before's
            # leaves out the changes of creates) from a plain condition, not from a row comparison.
            where.append(owner[0].is_not(None))
        resource_filter(where, by_expression=owner is not None)
        return sa.select(*CHANGE_COLUMNS).where(*where).order_by(*order).limit(sa.bindparam("limit"))

    def granted() -> sa.Select[Any]:
        where = [*after_cursor(horizon), list_in(share_windows.c.grantee, "grantees", dialect), *_in_window()]
        resource_filter(where, by_expression=True)
        # DISTINCT: a change that two of the reader's grantees were let see is one change of the page.
        return (
            sa.select(*CHANGE_COLUMNS)
            .distinct()
            .select_from(LeadingJoin(share_windows, changes, share_windows.c.shared_key == changes.c.shared_key))
            .where(*where)
            .order_by(changes.c.xid, changes.c.position)
            .limit(sa.bindparam("limit"))
        )

    if not by_reader:
        return branch()
    readers: list[sa.BindParameter[str]] = (
        [sa.bindparam("reader")] if owners == 1 else [sa.bindparam(f"reader_{i}") for i in range(owners)]
    )
    branches = (
        branch((changes.c.owner_after, sa.literal(SHARED, changes.c.owner_after.type))),
        *(branch((column, reader)) for reader in readers for column in (changes.c.owner_after, changes.c.owner_before)),
        granted(),
    )
    # A change of a record the reader owned before and after is in the last two ranges: UNION keeps it once
    # (filtering it out of the last range instead made PostgreSQL read that range whole, with a sort).
    union = sa.union(*(sa.select(*one.subquery().c) for one in branches)).subquery()
    return sa.select(*union.c).order_by(union.c.xid, union.c.position).limit(sa.bindparam("limit"))


def changes_seen_by_select(
    horizon: Horizon,
    readers_in: Callable[[sa.ColumnElement[Any]], sa.ColumnElement[bool]],
    gathered: Callable[[sa.ColumnElement[Any]], sa.ColumnElement[Any]],
) -> sa.Select[Any]:
    """The changes after a cursor and at or before another, in order, that any of a set of callers may see: of
    shared records, or of records one of them owned before or after the write (`readers_in`: whether a column
    holds one of them, in the dialect's form of a list given as one parameter). The range is read whole (a live
    hub's poll: a fraction of a second of the log) and filtered, so that only the changes some subscriber may
    see come out of the database. The upper bound is a cursor read before, under the horizon: nothing up to it
    is in flight any more, so no bound on the horizon is needed."""
    through_position = sa.bindparam("through_position", type_=sa.BigInteger())
    if horizon is None:
        through = changes.c.position <= through_position
    else:
        through = _change_cursor <= sa.tuple_(sa.bindparam("through_xid", type_=sa.BigInteger()), through_position)
    cursor_range = [*_past_cursor(horizon), through]
    # The owners as expressions, which no index serves: the range of the log is the one to read, however many
    # changes the planner thinks these callers have (a generic plan cannot know).
    owner_after, owner_before = (
        column.op("||")(sa.literal("", column.type)) for column in (changes.c.owner_after, changes.c.owner_before)
    )
    # The grantees among the readers that a share let see each change of the range (`gathered`: their names in
    # one text, in the dialect's aggregate), one row a change.
    granted = (
        sa.select(
            changes.c.xid.label("xid"),
            changes.c.position.label("position"),
            gathered(share_windows.c.grantee).label("seen_by"),
        )
        .select_from(share_windows.join(changes, share_windows.c.shared_key == changes.c.shared_key))
        .where(*cursor_range, readers_in(share_windows.c.grantee), *_in_window())
        .group_by(changes.c.xid, changes.c.position)
        .subquery("granted")
    )
    seen = sa.or_(
        owner_after == sa.literal(SHARED, changes.c.owner_after.type),
        readers_in(owner_after),
        readers_in(owner_before),
        granted.c.seen_by.is_not(None),
    )
    return (
        sa.select(*CHANGE_COLUMNS, granted.c.seen_by)
        .select_from(
            changes.outerjoin(
                granted, sa.and_(changes.c.xid == granted.c.xid, changes.c.position == granted.c.position)
            )
        )
        .where(*cursor_range, seen)
        .order_by(changes.c.xid, changes.c.position)
        .limit(sa.bindparam("limit"))
    )


def changes_values(
    cursor: Cursor, limit: int, reader: Viewer | None, resources: tuple[str, ...] | None, grantees: Any = None
) -> dict[str, Any]:
    """The values of the parameters of `changes_after_select` (`grantees`: the reader's, as the dialect takes a
    list)."""
    values: dict[str, Any] = {"after_xid": cursor[0], "after_position": cursor[1], "limit": limit}
    if reader is not None:
        # The reader's keys as owners: the same names as their grantees (see changes_after_select).
        if len(reader.grantees) == 1:
            values["reader"] = reader.grantees[0]
        else:
            values.update({f"reader_{i}": owner for i, owner in enumerate(reader.grantees)})
        values["grantees"] = grantees
    values.update({f"resource_{i}": name for i, name in enumerate(resources or ())})
    return values


@functools.lru_cache(maxsize=8)
def head_select(horizon: Horizon) -> sa.CompoundSelect[Any]:
    """The cursor of the last change below the horizon, and that of the last one retention removed (the head when
    the log is empty): one statement, as a live hub's every poll reads it."""
    last = (
        sa.select(changes.c.xid, changes.c.position)
        .where(*_below(horizon))
        .order_by(changes.c.xid.desc(), changes.c.position.desc())
        .limit(1)
        .subquery("last")
    )
    purged = SELECT_STATE_CURSOR.params(name=PURGED)
    return sa.union_all(sa.select(last.c.xid, last.c.position), purged)


@functools.lru_cache(maxsize=8)
def oldest_changes_select(horizon: Horizon) -> sa.Select[Any]:
    return (
        sa.select(changes.c.xid, changes.c.position, changes.c.at)
        .where(*_below(horizon))
        .order_by(changes.c.xid, changes.c.position)
        .limit(sa.bindparam("limit"))
    )


@functools.lru_cache(maxsize=8)
def committed_after_select(horizon: Horizon) -> sa.Select[Any]:
    """The cursors of the changes after a cursor, committed whether or not past the horizon."""
    return (
        sa.select(changes.c.xid, changes.c.position)
        .where(*_past_cursor(horizon))
        .order_by(changes.c.xid, changes.c.position)
        .limit(sa.bindparam("limit"))
    )


@functools.lru_cache(maxsize=8)
def count_after_select(horizon: Horizon) -> sa.Select[Any]:
    """How many changes follow a cursor, committed whether or not past the horizon."""
    return sa.select(sa.func.count()).select_from(changes).where(*_past_cursor(horizon))


PURGE_CHANGES = sa.delete(changes).where(
    _change_cursor
    <= sa.tuple_(
        sa.bindparam("through_xid", type_=sa.BigInteger()), sa.bindparam("through_position", type_=sa.BigInteger())
    )
)


def state_upserts(insert: Callable[[sa.Table], Any]) -> tuple[sa.Insert, sa.Insert]:
    """(set a cursor, take a lease) in the dialect's INSERT … ON CONFLICT."""
    cursor_values: dict[str, Any] = {
        "name": sa.bindparam("name"),
        "xid": sa.bindparam("xid"),
        "position": sa.bindparam("position"),
    }
    set_cursor = insert(service_state).values(cursor_values)
    set_cursor = set_cursor.on_conflict_do_update(
        index_elements=[service_state.c.name],
        set_={"xid": set_cursor.excluded.xid, "position": set_cursor.excluded.position},
    )
    lease_values: dict[str, Any] = {
        "name": sa.bindparam("name"),
        "holder": sa.bindparam("holder"),
        "lease_until": sa.bindparam("until"),
    }
    lease = insert(service_state).values(lease_values)
    lease = lease.on_conflict_do_update(
        index_elements=[service_state.c.name],
        set_={"holder": lease.excluded.holder, "lease_until": lease.excluded.lease_until},
        where=(service_state.c.lease_until < sa.bindparam("now")) | (service_state.c.holder == lease.excluded.holder),
    ).returning(service_state.c.holder)
    return set_cursor, lease


SET_LEASED_CURSOR = (
    sa.update(service_state)
    .where(_STATE_IS, service_state.c.holder == sa.bindparam("holder"))
    .values(xid=sa.bindparam("xid"), position=sa.bindparam("position"))
    .returning(service_state.c.name)
)


SELECT_LAPSED_LEASES = (  # in the order of names, which `after` pages through
    sa.select(service_state.c.name)
    .where(
        service_state.c.name.like(sa.bindparam("pattern"), escape="\\"),
        service_state.c.name > sa.bindparam("after"),
        service_state.c.lease_until <= sa.bindparam("now", type_=sa.BigInteger()),
    )
    .order_by(service_state.c.name)
    .limit(sa.bindparam("limit", type_=sa.Integer()))
)
DROP_LAPSED_LEASE = (
    sa.delete(service_state)
    .where(_STATE_IS, service_state.c.lease_until <= sa.bindparam("now", type_=sa.BigInteger()))
    .returning(service_state.c.name)
)


def change_of(row: Sequence[Any], seen_by: tuple[str, ...] = ()) -> Change:
    """A change from the columns of CHANGE_COLUMNS, in order."""
    xid, position, resource, record_id, action, version, at, by, owner_before, owner_after, record = row[:11]
    shared_key, grantee = row[11], row[12]
    return Change(
        cursor=(xid, position),
        resource=resource,
        record_id=stored_uuid(record_id),
        action=action,
        version=version,
        at=at,
        by=by,
        owner_before=owner_before,
        owner_after=owner_after,
        record=bytes(record),
        shared_key=None if shared_key is None else stored_uuid(shared_key),
        grantee=grantee,
        seen_by=seen_by,
    )


# --- shares ---------------------------------------------------------------------------------------------
#
# A change that a share let a grantee see lies in one of the share's windows (see tables.share_windows): at or
# after the change that opened it, at or before the one that closed it, made before the share expired; and a
# share's own change is seen only by whom it names.

SEEN_BY_SEPARATOR = "\n"
"""Between the grantees of a change, as a read gathers them (no grantee holds one)."""


def list_in(column: sa.ColumnElement[Any], name: str, dialect: str) -> sa.ColumnElement[bool]:
    """Whether `column` holds one of a list given as one parameter `name`, in the dialect's form (SQLite: a JSON
    array; PostgreSQL: an array)."""
    if dialect == "sqlite":
        return column.in_(sa.select(sa.literal_column("value")).select_from(sa.func.json_each(sa.bindparam(name))))
    return column == sa.any_(sa.bindparam(name, type_=postgresql.ARRAY(sa.String())))


def _in_window() -> list[sa.ColumnElement[bool]]:
    """The changes of the shared record that a window of the share took in (joined on the shared key)."""
    window = share_windows
    return [
        window.c.shared_key == changes.c.shared_key,
        _change_cursor >= sa.tuple_(window.c.from_xid, window.c.from_position),
        sa.or_(window.c.until_xid.is_(None), _change_cursor <= sa.tuple_(window.c.until_xid, window.c.until_position)),
        sa.or_(window.c.expires_at.is_(None), changes.c.at < window.c.expires_at),
        sa.or_(changes.c.grantee.is_(None), changes.c.grantee == window.c.grantee),
    ]


def window_statements(xid: sa.ColumnElement[int], position: sa.ColumnElement[int]) -> tuple[sa.Update, sa.Insert]:
    """Close a share's open window, and open another, at the change just kept (its cursor: the dialect's id of
    the writing transaction, and the position the log gave it)."""
    window = share_windows
    close = (
        sa.update(window)
        .where(
            window.c.share_id == sa.bindparam("share_id", type_=window.c.share_id.type), window.c.until_xid.is_(None)
        )
        .values(until_xid=xid, until_position=position)
    )
    opening = values_of(window, but=("from_xid", "from_position", "until_xid", "until_position"))
    open_ = sa.insert(window).values(from_xid=xid, from_position=position, **opening).inline()
    return close, open_


def share_windows_of(
    share_changes: Sequence[Sequence[Any]], expires_of: Callable[[bytes], int | None]
) -> list[dict[str, Any]]:
    """The windows in which shares granted access, from their changes (as `share_changes_select` reads them: record
    id, cursor, action, shared key, grantee, record) in the order of each record's changes, as the store keeps them
    (see `window_statements`): each write but a deletion opens one, and the record's next write closes it.
    `expires_of`: the expiry a change's record held (epoch milliseconds), or None."""
    windows: list[dict[str, Any]] = []
    for index, (share_id, xid, position, action, shared_key, grantee, record) in enumerate(share_changes):
        following = share_changes[index + 1] if index + 1 < len(share_changes) else None
        if action == "deleted":
            continue
        closed = following is not None and following[0] == share_id
        windows.append(
            {
                "share_id": share_id,
                "from_xid": xid,
                "from_position": position,
                "grantee": grantee,
                "shared_key": shared_key,
                "until_xid": following[1] if closed and following is not None else None,
                "until_position": following[2] if closed and following is not None else None,
                "expires_at": expires_of(record),
            }
        )
    return windows


def share_changes_select(resource: str) -> sa.Select[Any]:
    """A share resource's changes, as `share_windows_of` takes them."""
    order = (changes.c.record_id, changes.c.xid, changes.c.position)
    columns = (*order, changes.c.action, changes.c.shared_key, changes.c.grantee, changes.c.record)
    return sa.select(*columns).where(changes.c.resource == resource).order_by(*order)


def shared_at_select(dialect: str) -> sa.Select[Any]:
    """Whether a share let one of the grantees see a change (its cursor, when it was made) of a shared record."""
    window = share_windows
    cursor = sa.tuple_(sa.bindparam("xid", type_=sa.BigInteger()), sa.bindparam("position", type_=sa.BigInteger()))
    return (
        sa.select(sa.literal(1))
        .where(
            window.c.shared_key == sa.bindparam("shared_key", type_=window.c.shared_key.type),
            list_in(window.c.grantee, "grantees", dialect),
            sa.tuple_(window.c.from_xid, window.c.from_position) <= cursor,
            sa.or_(window.c.until_xid.is_(None), sa.tuple_(window.c.until_xid, window.c.until_position) >= cursor),
            sa.or_(window.c.expires_at.is_(None), sa.bindparam("at", type_=sa.BigInteger()) < window.c.expires_at),
        )
        .limit(1)
    )


PURGED = "changes-purged"
"""The service state that holds the cursor of the last change retention removed."""
