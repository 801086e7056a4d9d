"""`GET /v1/due`'s pages as the database reads them (petrecords.due serves them): only what an item shows, the ids
written by the database, and a grantee's page from the due rows by grantee (petrecords.due_rows.due_grants), each of
the caller's keys walking its own rows in the page's order, merged here.
"""

from __future__ import annotations

import dataclasses
import functools
import uuid
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

import msgspec
import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.visitors import InternalTraversal

from petrecords.due_rows import due_doses, due_grants
from petrecords.store.base import Condition, Operator, SortKey
from petrecords.store.records import Statement
from petrecords.values import format_timestamp


class DueItem(msgspec.Struct, rename="camel"):
    pet_id: str
    pet_name: str
    pet_type: str
    owner_id: str
    group: str
    vaccine_id: str
    vaccine_name: str
    vaccination_id: str
    applied_at: str
    due_at: str


class UuidText(sa.ColumnElement[str]):
    """A stored id as the database writes it in canonical form (8-4-4-4-12, lower case): a page of 100 items shows
    300 ids, which the database writes in less time than Python makes and formats a UUID of each."""

    inherit_cache = True
    # Read from the class by SQLAlchemy to key its cache of compiled statements; never changed.
    _traverse_internals = [("column", InternalTraversal.dp_clauseelement)]  # noqa: RUF012
    type = sa.String()

    def __init__(self, column: sa.ColumnElement[uuid.UUID]) -> None:
        self.column = column


@compiles(UuidText)
def _uuid_text(element: UuidText, compiler: Any, **kw: Any) -> str:
    # PostgreSQL's uuid type writes itself in canonical form.
    return f"CAST({compiler.process(element.column, **kw)} AS TEXT)"


@compiles(UuidText, "sqlite")
def _uuid_text_sqlite(element: UuidText, compiler: Any, **kw: Any) -> str:
    # SQLite keeps an id as its 32 hexadecimal digits, in lower case.
    column = compiler.process(element.column, **kw)
    return " || '-' || ".join(f"substr({column}, {start}, {length})" for start, length in _UUID_PARTS)


_UUID_PARTS = ((1, 8), (9, 4), (13, 4), (17, 4), (21, 12))


def _item_columns(table: sa.Table, dose: str = "id") -> tuple[sa.ColumnElement[Any], ...]:
    """What an item shows, in DueItem's order, from the due rows (or those by grantee, whose `dose` is `due_id`):
    only these are read for a page."""
    c = table.c
    return (
        UuidText(c.pet_id).label("item_pet_id"),
        c.pet_name,
        c.pet_type,
        c.owner_id,
        c.group_label,
        UuidText(c.vaccine_id).label("item_vaccine_id"),
        c.vaccine_name,
        UuidText(c[dose]).label("item_id"),
        c.applied_at.label("item_applied_at"),
        c.due_at.label("item_due_at"),
    )


ITEM_COLUMNS = _item_columns(due_doses)


@functools.lru_cache(maxsize=256)
def items_select(page: sa.Select[Any]) -> sa.Select[Any]:
    """A page's statement of due rows (the list's, cached per shape) reading only what its items show."""
    return page.with_only_columns(*ITEM_COLUMNS, maintain_column_froms=False)


def due_items(rows: Sequence[Sequence[Any]]) -> list[DueItem]:
    """The items of a page read by an items_select (or granted_page_select): each row's values in DueItem's order,
    the two instants still to format (and, after them, what a granted page is ordered by)."""
    return [
        DueItem(
            pet, name, kind, owner, group, vaccine, vaccine_name, dose, format_timestamp(applied), format_timestamp(due)
        )
        for pet, name, kind, owner, group, vaccine, vaccine_name, dose, applied, due, *_ in rows
    ]


GRANTED_PAGE_DEPTH = 10_000
"""How deep a grantee's page is read from the due rows by grantee: each of the caller's keys gives up to this many
rows, merged; a deeper page walks the due rows' order (see the store's shared lists)."""
_PLAIN = {Operator.EQUAL, Operator.IN, Operator.BELOW, Operator.AT_LEAST, Operator.DIFFERS}
_GRANTED = {Operator.SHARED, Operator.OWNED_OR_SHARED}
DUE_ORDER = ("due_at", "pet_id", "label_key", "id")

PlainShape = tuple[tuple[str, Operator, int], ...]


@dataclasses.dataclass(frozen=True)
class GrantedPage:
    """A page of what is shared with a caller (and, `owners`, their own) in the default order, from the due rows by
    grantee: what every other condition (`plain`) lets through, the rows of each grantee's shares that grant `now`
    and those of each owner, merged."""

    plain: tuple[Condition, ...]
    now: int
    grantees: tuple[str, ...]
    owners: tuple[str, ...]


def granted_page(conditions: tuple[Condition, ...], sort: tuple[SortKey, ...], depth: int) -> GrantedPage | None:
    """Whether the page's conditions and order are served by the due rows by grantee, and how; None otherwise."""
    if (
        tuple(key.column for key in sort) != DUE_ORDER
        or any(key.descending for key in sort)
        or depth > (GRANTED_PAGE_DEPTH)
    ):
        return None
    granted = [condition for condition in conditions if condition.operator in _GRANTED]
    plain = tuple(condition for condition in conditions if condition.operator in _PLAIN)
    if len(granted) != 1 or len(plain) + 1 != len(conditions):
        return None
    if any(len(condition.columns) != 1 or condition.columns[0] not in due_grants.c for condition in plain):
        return None
    now, *keys = granted[0].values
    grantees = tuple(dict.fromkeys(keys))
    owners = grantees if granted[0].operator is Operator.OWNED_OR_SHARED else ()
    return GrantedPage(plain, int(now), grantees, owners)


def _plain_conditions(table: sa.Table, shape: PlainShape) -> list[sa.ColumnElement[bool]]:
    where: list[sa.ColumnElement[bool]] = []
    for index, (column, operator, count) in enumerate(shape):
        values = [sa.bindparam(f"c{index}_{position}", type_=table.c[column].type) for position in range(count)]
        first = table.c[column]
        if operator is Operator.IN:
            where.append(first.in_(values))
        elif operator is Operator.DIFFERS:
            where.append(first.not_in(values))
        elif operator is Operator.EQUAL:
            where.append(first == values[0])
        elif operator is Operator.BELOW:
            where.append(first < values[0])
        else:
            where.append(first >= values[0])
    return where


@functools.lru_cache(maxsize=256)
def granted_page_select(shape: PlainShape, grantees: int, owners: int) -> sa.Select[Any] | sa.CompoundSelect[Any]:
    """The rows a page's items are among (parameters `depth`, `now`, `grantee_{i}`, `owner_{i}` and the plain
    conditions' `c{i}_{j}`): each grantee's rows in its index's order, and each owner's in theirs, up to `depth`
    each, each row's item (in DueItem's order) and then its place in the page's order. A grantee's arm reads its
    index alone: it holds what an item shows."""
    depth = sa.bindparam("depth", type_=sa.Integer())
    arms: list[sa.Select[Any]] = []
    for index in range(grantees):
        grant = due_grants.c
        arms.append(
            sa.select(*_item_columns(due_grants, "due_id"), grant.due_at, grant.pet_id, grant.label_key, grant.due_id)
            .where(
                grant.grantee == sa.bindparam(f"grantee_{index}", type_=grant.grantee.type),
                sa.or_(grant.expires_at.is_(None), grant.expires_at > sa.bindparam("now", type_=sa.BigInteger())),
                *_plain_conditions(due_grants, shape),
            )
            .order_by(grant.due_at, grant.pet_id, grant.label_key, grant.due_id)
            .limit(depth)
        )
    for index in range(owners):
        due = due_doses.c
        arms.append(
            sa.select(*ITEM_COLUMNS, due.due_at, due.pet_id, due.label_key, due.id.label("due_id"))
            .where(
                due.owner_id == sa.bindparam(f"owner_{index}", type_=due.owner_id.type),
                *_plain_conditions(due_doses, shape),
            )
            .order_by(due.due_at, due.pet_id, due.label_key, due.id)
            .limit(depth)
        )
    # Each arm a subquery of its own: its ORDER BY and LIMIT stay its own on both databases. The arms' rows are merged
    # by granted_rows: a few hundred rows at most, sorted in less time than the database's sorts of them take.
    if len(arms) == 1:
        return arms[0]
    return sa.union_all(*(sa.select(arm.subquery()) for arm in arms))


_ITEM_ID = 7
_PAGE_ORDER = itemgetter(*range(len(ITEM_COLUMNS), len(ITEM_COLUMNS) + len(DUE_ORDER)))


def granted_rows(rows: Sequence[Sequence[Any]], *, arms: int, limit: int, offset: int) -> Sequence[Sequence[Any]]:
    """The page of a granted_page_select's rows: merged in the page's order, each row once (a pet shared with a vet
    and with their clinic is in both arms). The order is the database's: ids compare as their bytes (PostgreSQL's
    uuid, SQLite's hex), and label keys in the C collation, as Python's str compares code points."""
    if arms == 1:
        return rows[offset : offset + limit]
    once = {row[_ITEM_ID]: row for row in rows}
    return sorted(once.values(), key=_PAGE_ORDER)[offset : offset + limit]


def granted_page_statement(page: GrantedPage, *, limit: int, offset: int) -> Statement:
    shape = tuple((condition.columns[0], condition.operator, len(condition.values)) for condition in page.plain)
    values: dict[str, Any] = {"depth": offset + limit, "now": page.now}
    for index, condition in enumerate(page.plain):
        values.update({f"c{index}_{position}": value for position, value in enumerate(condition.values)})
    values.update({f"grantee_{index}": name for index, name in enumerate(page.grantees)})
    values.update({f"owner_{index}": name for index, name in enumerate(page.owners)})
    return granted_page_select(shape, len(page.grantees), len(page.owners)), values
