"""The grantees' kept counts: for each grantee (a user or a group), how many records of each shared collection the
shares naming them grant, in total and by period of the collection's counted time column, kept in the same rows as
the owners' (tables.record_counts and tables.period_counts, scope GRANTEE_SCOPE + grantee), so that a clinic's
lists are counted from a few rows however many patients it has.

What a grantee's counts hold: for each share naming them that is *counted* (it never expires, or it is listed in
tables.grant_expiries), each record it grants. A share is counted from its write while its expiry is in the
future; the expiry duty takes an expired share's grants out and its listing with them. Between its expiry and the
duty, a count subtracts them itself (`expired_grants`): exact at every instant, whoever writes meanwhile.

Who writes what, so that concurrent writers keep the counts exact: a shared record's write counts itself for the
grantees of its shares as they are when it runs (it holds the record it is shared through, a pet, shared); a
share's write, and the duty's, count what the share grants as it is then (holding that record exclusively, and
every record shared through it)."""

from __future__ import annotations

import collections
import functools
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from petrecords.store.base import Collection, Condition, Operator, Row, SharedBy
from petrecords.store.counts import (
    PERIOD_KEY,
    PeriodKey,
    Unseen,
    before_values,
    in_its_hour,
    periods_of,
    summed,
    time_range,
    took_time_bound,
    whole_periods_before,
)
from petrecords.tables import (
    ALL_OWNERS,
    PERIOD_SIZES,
    Text,
    grant_expiries,
    period_counts,
    period_of,
    record_counts,
)

GRANTEE_SCOPE = "shared "
"""The start of a grantee's scope in the kept counts: no e-mail address (an owner's scope) holds a space."""

RecordKey = tuple[str, str, str]


def grantee_scope(grantee: str) -> str:
    return GRANTEE_SCOPE + grantee


def add_grant_changes(
    records: collections.Counter[RecordKey],
    periods: collections.Counter[PeriodKey],
    collection: Collection,
    grantee: str,
    times: Iterable[Any],
    sign: int,
) -> None:
    """Count (sign 1) or uncount (-1) for a grantee records of the collection, one per value of its counted time
    column in `times` (of anything, without one)."""
    scope = grantee_scope(grantee)
    counted = 0
    for instant in times:
        counted += 1
        if collection.counted_over is not None:
            for size, period in enumerate(periods_of(instant)):
                periods[(collection.name, scope, size, period)] += sign
    records[(collection.name, scope, "")] += sign * counted


def unexpired(expires: sa.ColumnElement[Any], now: sa.ColumnElement[Any]) -> sa.ColumnElement[bool]:
    """A share whose expiry is `expires` grants at `now`."""
    return sa.or_(expires.is_(None), expires > now)


def counted(shared_by: SharedBy, shares: sa.FromClause) -> sa.ColumnElement[bool]:
    """A share of `shares` (the shares' table, or an alias of it) is counted: it never expires, or it is listed."""
    listed = sa.exists().where(grant_expiries.c.share_id == shares.c.id)
    return sa.or_(shares.c[shared_by.expires_column].is_(None), listed)


@functools.lru_cache(maxsize=16)
def counted_grantees_select(shared_by: SharedBy) -> sa.Select[Any]:
    """The grantees whose counts hold the records shared through the record of parameter `key`."""
    shares = shared_by.table
    return sa.select(shares.c[shared_by.grantee_column]).where(
        shares.c[shared_by.target_column] == sa.bindparam("key", type_=shares.c[shared_by.target_column].type),
        counted(shared_by, shares),
    )


@functools.lru_cache(maxsize=16)
def granted_times_select(collection: Collection) -> sa.Select[Any]:
    """One row per record of the collection shared through the record of parameter `target`: its counted time."""
    shared_by = collection.shared_by
    if shared_by is None:
        raise TypeError(f"{collection.name} records are not shared")
    table = collection.table
    key = table.c[shared_by.key_column]
    time = table.c[collection.counted_over] if collection.counted_over is not None else sa.literal(0)
    return sa.select(time).where(key == sa.bindparam("target", type_=key.type))


def changed_keys(collection: Collection, removed: Sequence[Row], added: Sequence[Row]) -> list[tuple[Any, Any, int]]:
    """(key, counted time, sign) for each record whose grants a write moves: a record that keeps its key and its
    counted time moves none (a pet's rename, a vaccination's note)."""
    shared_by = collection.shared_by
    if shared_by is None:
        return []
    key_column, time_column = shared_by.key_column, collection.counted_over

    def of(row: Row) -> tuple[Any, Any]:
        return row[key_column], row[time_column] if time_column is not None else 0

    before = collections.Counter(of(row) for row in removed)
    after = collections.Counter(of(row) for row in added)
    moved = [(key, time, -1) for (key, time), n in (before - after).items() for _ in range(n)]
    moved += [(key, time, 1) for (key, time), n in (after - before).items() for _ in range(n)]
    return moved


def expiry_listing(collection: Collection, row: Row) -> dict[str, Any]:
    granting = collection.granting
    if granting is None:
        raise TypeError(f"{collection.name} records are no shares")
    return {
        "share_id": row["id"],
        "resource": collection.name,
        "grantee": row[granting.grantee_column],
        "target_id": row[granting.target_column],
        "expires_at": row[granting.expires_column],
    }


LIST_EXPIRY = sa.insert(grant_expiries)
UNLIST_EXPIRY = sa.delete(grant_expiries).where(
    grant_expiries.c.share_id == sa.bindparam("share_id", type_=grant_expiries.c.share_id.type)
)
IS_LISTED = sa.select(sa.literal(1)).where(
    grant_expiries.c.share_id == sa.bindparam("share_id", type_=grant_expiries.c.share_id.type)
)
EXPIRED_LISTINGS = (
    sa.select(grant_expiries.c.share_id, grant_expiries.c.resource, grant_expiries.c.target_id)
    .where(grant_expiries.c.expires_at <= sa.bindparam("now", type_=sa.BigInteger()))
    .order_by(grant_expiries.c.expires_at, grant_expiries.c.share_id)
    .limit(sa.bindparam("limit", type_=sa.Integer()))
)


def grant_count_inserts(shares: Collection, *, now: int) -> list[sa.Insert]:
    """The grantees' kept counts of loaded records, and the listing of the shares that expire later than `now`, for
    tables of them that hold none of these shares' yet: a load's."""
    granting = shares.granting
    if granting is None:
        raise TypeError(f"{shares.name} records are no shares")
    table = shares.table
    expires, grantee, target = (
        table.c[granting.expires_column],
        table.c[granting.grantee_column],
        table.c[granting.target_column],
    )
    listing = sa.select(table.c.id, sa.literal(shares.name, Text), grantee, target, expires).where(expires > now)
    inserts = [sa.insert(grant_expiries).from_select(list(grant_expiries.c.keys()), listing)]
    granting_now = unexpired(expires, sa.literal(now, sa.BigInteger()))
    scope = sa.literal(GRANTEE_SCOPE, Text) + grantee
    for granted in granting.granted:
        shared_by = granted.shared_by
        if shared_by is None:
            raise TypeError(f"{granted.name} records are not shared")
        joined = table.join(granted.table, granted.table.c[shared_by.key_column] == target)
        name = sa.literal(granted.name, Text)
        records = (
            sa.select(
                name,
                scope,
                sa.literal("", Text),
                sa.literal(0, sa.SmallInteger()),
                sa.func.count(),
                sa.literal(0, sa.BigInteger()),
            )
            .select_from(joined)
            .where(granting_now)
            .group_by(grantee)
        )
        columns = ["resource", "scope", "partition", "slot", "count", "writes"]
        inserts.append(sa.insert(record_counts).from_select(columns, records))
        if granted.counted_over is None:
            continue
        for size in range(PERIOD_SIZES):
            period = period_of(granted.table.c[granted.counted_over], size)
            periods = (
                sa.select(
                    name,
                    scope,
                    sa.literal(size, sa.SmallInteger()),
                    period,
                    sa.literal(0, sa.SmallInteger()),
                    sa.func.count(),
                )
                .select_from(joined)
                .where(granting_now)
                .group_by(grantee, period)
            )
            inserts.append(sa.insert(period_counts).from_select([*PERIOD_KEY, "slot", "count"], periods))
    return inserts


@dataclass(frozen=True)
class SharedCount:
    """A list of what is shared with a caller (and not theirs) that the grantees' kept counts answer, with the
    caller's own records when `with_own`. The caller's keys (`grantees`) name both whose shares grant to them and
    whose records are theirs (a user's, and their groups')."""

    now: int
    grantees: tuple[str, ...]
    below: int | None = None
    at_least: int | None = None
    with_own: bool = False


@dataclass(frozen=True)
class SharedCondition:
    """What a SHARED or OWNED_OR_SHARED condition names: whether it also lets through the records that the grantees
    own (OWNED_OR_SHARED: the caller's keys, see Operator), the instant it grants at, and the grantees (each once)."""

    owned: bool
    now: int
    grantees: tuple[str, ...]


def shared_condition(condition: Condition) -> SharedCondition | None:
    """The parts of a shared-list condition (in either form, see queries.SHARED_OPERATORS); None for another."""
    if condition.operator in (Operator.SHARED, Operator.SHARED_EACH):
        owned = False
    elif condition.operator in (Operator.OWNED_OR_SHARED, Operator.OWNED_OR_SHARED_EACH):
        owned = True
    else:
        return None
    now, *grantees = condition.values
    return SharedCondition(owned, int(now), tuple(dict.fromkeys(grantees)))


def shared_count_scope(collection: Collection, conditions: tuple[Condition, ...]) -> SharedCount | None:
    """The kept counts that answer how many records match, else None: when the conditions are what is shared with
    a caller and not theirs, or that and the caller's own, and at most a lower and an upper bound of the counted
    time column."""
    shared_by = collection.shared_by
    if shared_by is None or collection.owner_column is None:
        return None
    owners: tuple[str, ...] | None = None
    shared: SharedCondition | None = None
    bounds: dict[Operator, int] = {}
    for condition in conditions:
        column = condition.columns[0] if len(condition.columns) == 1 else None
        if column == collection.owner_column and condition.operator is Operator.DIFFERS and owners is None:
            owners = condition.values
        elif column == shared_by.key_column and condition.operator is Operator.SHARED and shared is None:
            shared = shared_condition(condition)
        elif (
            condition.columns == (collection.owner_column, shared_by.key_column)
            and condition.operator is Operator.OWNED_OR_SHARED
            and shared is None
            and owners is None
        ):
            shared = shared_condition(condition)
            owners = shared.grantees if shared is not None else None
        elif not took_time_bound(collection, condition, bounds):
            return None
    # The counts tell the caller's own records apart from the others by their keys: those the owners must be.
    if owners is None or shared is None or not shared.grantees or set(owners) != set(shared.grantees):
        return None
    return SharedCount(shared.now, shared.grantees, *time_range(bounds), with_own=shared.owned)


def _scopes(grantees: int) -> list[sa.BindParameter[Any]]:
    """The parameters `scope_{i}`: the grantees' scopes in the kept counts (see `grantee_scope_values`)."""
    return [sa.bindparam(f"scope_{index}", type_=record_counts.c.scope.type) for index in range(grantees)]


def grantee_scope_values(collection: Collection, grantees: Sequence[str]) -> dict[str, Any]:
    return {"resource": collection.name} | {
        f"scope_{index}": grantee_scope(name) for index, name in enumerate(grantees)
    }


@functools.lru_cache(maxsize=64)
def kept_sizes_select(grantees: int, *, owned: bool) -> sa.Select[Any]:
    """How many records of parameter `resource` each of the grantees' counts holds (parameters `scope_{i}`), with
    `owned` each of them as an owner's (parameters `owner_{i}`: the same names, an owner's scope), and every owner's
    (scope ALL_OWNERS): one row per scope that holds any."""
    every_owner = sa.bindparam("every_owner", ALL_OWNERS, type_=record_counts.c.scope.type)
    owners = [sa.bindparam(f"owner_{index}", type_=record_counts.c.scope.type) for index in range(grantees)]
    return (
        sa.select(record_counts.c.scope, sa.func.sum(record_counts.c.count))
        .where(
            record_counts.c.resource == sa.bindparam("resource"),
            record_counts.c.scope.in_([*_scopes(grantees), *(owners if owned else ()), every_owner]),
        )
        .group_by(record_counts.c.scope)
    )


def kept_sizes_values(collection: Collection, grantees: Sequence[str], *, owned: bool) -> dict[str, Any]:
    values = grantee_scope_values(collection, grantees)
    if owned:
        values.update({f"owner_{index}": name for index, name in enumerate(grantees)})
    return values


SizesKey = tuple[str, bool, tuple[str, ...]]
"""(resource, whether the grantees' own too, grantees): whose kept sizes `kept_sizes_select` reads."""


class PlanSizes:
    """The kept sizes that a store's lists last read, for a moment: a grantee's list chooses its plan and the order
    of its grantees by them, which set what the list costs, never what it answers, so sizes read a moment ago serve
    (and the list runs one statement fewer). Whether the grantees hold anything at all decides how a list reads:
    that is read afresh whenever these say they hold nothing."""

    def __init__(self, *, seconds: float = 1.0, most: int = 1024, clock: Callable[[], float] = time.monotonic) -> None:
        self._seconds, self._most, self._clock = seconds, most, clock
        self._read: dict[SizesKey, tuple[float, dict[str, int]]] = {}

    def get(self, key: SizesKey) -> dict[str, int] | None:
        found = self._read.get(key)
        if found is None or self._clock() - found[0] > self._seconds:
            return None
        return found[1]

    def put(self, key: SizesKey, sizes: dict[str, int]) -> None:
        self._read.pop(key, None)
        if len(self._read) >= self._most:
            del self._read[next(iter(self._read))]
        self._read[key] = (self._clock(), sizes)


SHARED_GATHERING_COST = 4
"""What gathering and sorting one shared record costs, in records looked up one by one in a list's order."""


@functools.lru_cache(maxsize=64)
def shared_count_select(
    collection: Collection, grantees: int, *, below: bool, at_least: bool, with_own: bool
) -> sa.Select[Any]:
    """How many records are shared with a caller's grantees (parameters `grantee_{i}` and `scope_{i}`, the largest
    first) and not theirs (owned by none of the same names: the caller's keys), now (`now`), with the counted time
    column within the bounds given (as `before_values` names them): what the grantees' counts hold, less what they
    hold of shares that have expired, of the caller's own records, and of records shared with more than one of the
    grantees (counted at the first); and, `with_own`, what the counts of each of the caller's keys as an owner hold
    (scopes `grantee_{i}`: an owner's scope is the owner). One statement, so that it reads one snapshot."""
    shared_by = collection.shared_by
    if shared_by is None or collection.owner_column is None:
        raise TypeError(f"{collection.name} records are not shared")
    table, shares = collection.table, shared_by.table
    key, owner = table.c[shared_by.key_column], table.c[collection.owner_column]
    target, grantee = shares.c[shared_by.target_column], shares.c[shared_by.grantee_column]
    expires = shares.c[shared_by.expires_column]
    # Every value unseen by PostgreSQL's planner (counts.Unseen): the statement's best plan is the same for any.
    now = Unseen("now", sa.BigInteger())
    names = [Unseen(f"grantee_{index}", grantee.type) for index in range(grantees)]
    # The caller's own records: a user's, or their groups' (one key: an equality, as it was before groups owned).
    mine = owner == names[0] if grantees == 1 else owner.in_(names)
    scopes = [Unseen(f"scope_{index}", record_counts.c.scope.type) for index in range(grantees)]
    in_range: list[sa.ColumnElement[bool]] = []
    if collection.counted_over is not None:
        time = table.c[collection.counted_over]
        if below:
            in_range.append(time < Unseen("below_instant", sa.BigInteger()))
        if at_least:
            in_range.append(time >= Unseen("at_least_instant", sa.BigInteger()))

    # With the caller's own records, their counts are read in the same rows' scans as the grantees', and their
    # records of the bound's hour with the grantees'.
    read_scopes = [*scopes, *names] if with_own else scopes

    def kept_before(bound: str) -> sa.ColumnElement[Any]:
        time = table.c[collection.counted_over or ""]
        # The records of the bound's own hour, one per counted share that grants each: its shares are counted for
        # each record, so that every plan, one made for any value among them, leads with the hour's few records.
        # Joined, PostgreSQL's plan for any value led with the grantees' shares, every one of them (95,000: 300 ms a
        # count), and a plan made for each run's values took 2–3 ms to make.
        counted_each: sa.ColumnElement[Any] = (
            sa.select(sa.func.count())
            .select_from(shares)
            .where(target == key, grantee.in_(names), counted(shared_by, shares))
            .correlate(table)
            .scalar_subquery()
        )
        if with_own:
            counted_each = counted_each + sa.case((mine, 1), else_=0)
        of_its_hour = (
            sa.select(sa.func.coalesce(sa.func.sum(counted_each), 0))
            .select_from(table)
            .where(*in_its_hour(time, bound))
            .scalar_subquery()
        )
        return whole_periods_before(bound, period_counts.c.scope.in_(read_scopes)) + of_its_hour

    resource = Unseen("resource", record_counts.c.resource.type)
    everything = summed(
        record_counts, record_counts.c.resource == resource, record_counts.c.scope.in_(read_scopes)
    ).scalar_subquery()
    kept: sa.ColumnElement[Any] = kept_before("below") if below else everything
    if at_least:
        kept = kept - kept_before("at_least")
    # Each part below leads with its few rows and looks up, for each, what it counts (a correlated count, and an
    # EXISTS kept a lookup by OFFSET 0): single-table subqueries, which PostgreSQL plans in a fraction of the time
    # of the joins that say the same, and SQLite reads in the same order.

    def records_of(shared_key: sa.ColumnElement[Any], *also: sa.ColumnElement[bool]) -> sa.ScalarSelect[Any]:
        """How many records within the bounds are shared through the record whose key is `shared_key`."""
        return (
            sa.select(sa.func.count()).select_from(table).where(key == shared_key, *also, *in_range).scalar_subquery()
        )

    def total(counted_each: sa.ScalarSelect[Any], source: sa.FromClause, *where: sa.ColumnElement[bool]) -> Any:
        return sa.select(sa.func.coalesce(sa.func.sum(counted_each), 0)).select_from(source).where(*where)

    # Held in the counts, though expired: listed, and past.
    expired = total(
        records_of(grant_expiries.c.target_id),
        grant_expiries,
        grant_expiries.c.grantee.in_(names),
        grant_expiries.c.expires_at <= now,
        grant_expiries.c.resource == Unseen("shares", grant_expiries.c.resource.type),
    ).scalar_subquery()
    # The caller's own records, read from theirs: shared with them only through a group they are in.
    granting_each = (
        sa.select(sa.func.count())
        .select_from(shares)
        .where(target == key, grantee.in_(names), unexpired(expires, now))
        .correlate(table)
        .scalar_subquery()
    )
    own = total(granting_each, table, mine, *in_range).scalar_subquery()
    count = kept - expired - own
    if grantees > 1:
        earlier = shares.alias("earlier")
        rank = sa.case(*((grantee == name, index) for index, name in enumerate(names)))
        other_rank = sa.case(
            *((earlier.c[shared_by.grantee_column] == name, index) for index, name in enumerate(names))
        )
        granted_before = sa.exists(
            sa.select(earlier.c[shared_by.target_column])
            .where(
                earlier.c[shared_by.target_column] == target,
                _one_of(earlier.c[shared_by.grantee_column], names[:-1]),
                other_rank < rank,
                unexpired(earlier.c[shared_by.expires_column], now),
            )
            .offset(0)
        )
        repeated = total(
            records_of(target, sa.not_(mine)),
            shares,
            _one_of(grantee, names[1:]),
            unexpired(expires, now),
            granted_before,
        ).scalar_subquery()
        count = count - repeated
    return sa.select(count)


def _one_of(column: sa.ColumnElement[Any], names: Sequence[Unseen]) -> sa.ColumnElement[bool]:
    """The column equal to one of the unseen names. One name an equality: `IN ((SELECT $1))` is a subquery that
    PostgreSQL pulls up into a join, and so sees the value in each run's plan. That plan then estimated the vet's
    shares by their own statistics (34 rows) where the plan for any value took the average grantee's (43): 12%
    dearer, and PostgreSQL planned the vet's due count again on every request (2-3 ms, against 0.3-0.7 ms run with
    the plan it keeps)."""
    return column == names[0] if len(names) == 1 else column.in_(names)


def shared_count_values(collection: Collection, shared: SharedCount, order: Sequence[str]) -> dict[str, Any]:
    shared_by = collection.shared_by
    values = grantee_scope_values(collection, order) | {
        "now": shared.now,
        "shares": "" if shared_by is None else shared_by.shares,
    }
    values.update({f"grantee_{index}": name for index, name in enumerate(order)})
    for bound, instant in (("below", shared.below), ("at_least", shared.at_least)):
        if instant is not None:
            values.update(before_values(bound, instant))
    return values
