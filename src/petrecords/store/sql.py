"""Statements over the shared schema, and the transaction logic both SQL stores run them with."""

from __future__ import annotations

import abc
import collections
import functools
import random
import uuid
from collections.abc import Callable, Hashable, Iterable, Sequence
from functools import partial
from typing import Any

import msgspec
import sqlalchemy as sa

from petrecords.db import head_revision
from petrecords.errors import DatabaseUnavailable
from petrecords.store.base import (
    PetFilter,
    PetPageQuery,
    PetRow,
    SortField,
    SortKey,
    Store,
    StoredResponse,
    Transaction,
)
from petrecords.store.faults import DATABASE_ERRORS, raise_translated
from petrecords.store.pages import BLOCK, PageAnchors, SortKeyValues, seek_position, uniform_direction
from petrecords.tables import ALL_OWNERS, idempotency_keys, pet_counts, pets
from petrecords.values import fold_case

PET_COLUMNS = (
    pets.c.id,
    pets.c.created_at,
    pets.c.created_by,
    pets.c.modified_at,
    pets.c.modified_by,
    pets.c.owner_id,
    pets.c.name,
    pets.c.pet_type,
    pets.c.revision,
)


def _values_of(table: sa.Table, *, but: tuple[str, ...] = ()) -> dict[str, sa.BindParameter[Any]]:
    """A named parameter for each column of `table` (by the column's name), for VALUES or SET."""
    return {column.name: sa.bindparam(column.name) for column in table.c if column.name not in but}


# The statements every request runs, built once with named parameters: each store compiles each of them
# once for its database and runs it on the driver.
SELECT_PET = sa.select(*PET_COLUMNS).where(pets.c.id == sa.bindparam("pet_id"))
SELECT_PET_FOR_UPDATE = SELECT_PET.with_for_update()
INSERT_PET = sa.insert(pets).values(_values_of(pets))
UPDATE_PET = sa.update(pets).where(pets.c.id == sa.bindparam("pet_id")).values(_values_of(pets, but=("id",)))
DELETE_PET = sa.delete(pets).where(pets.c.id == sa.bindparam("pet_id"))

_IDEMPOTENCY_KEY_IS = (idempotency_keys.c.caller == sa.bindparam("caller")) & (
    idempotency_keys.c.key == sa.bindparam("key")
)
SELECT_IDEMPOTENT_RESPONSE = sa.select(
    idempotency_keys.c.request_hash,
    idempotency_keys.c.status,
    idempotency_keys.c.body,
    idempotency_keys.c.location,
    idempotency_keys.c.etag,
    idempotency_keys.c.expires_at,
).where(_IDEMPOTENCY_KEY_IS)
DELETE_IDEMPOTENCY_KEY = sa.delete(idempotency_keys).where(_IDEMPOTENCY_KEY_IS)
INSERT_IDEMPOTENCY_KEY = sa.insert(idempotency_keys).values(_values_of(idempotency_keys))
_EXPIRED_IDEMPOTENCY_KEYS = (
    sa.select(idempotency_keys.c.caller, idempotency_keys.c.key)
    .where(idempotency_keys.c.expires_at <= sa.bindparam("now_ms"))
    .limit(sa.bindparam("limit"))
)
PURGE_EXPIRED_IDEMPOTENCY_KEYS = sa.delete(idempotency_keys).where(
    sa.tuple_(idempotency_keys.c.caller, idempotency_keys.c.key).in_(_EXPIRED_IDEMPOTENCY_KEYS)
)

# Alembic's own table, which tables.py does not describe.
SCHEMA_VERSION = sa.select(sa.column("version_num", sa.String())).select_from(sa.table("alembic_version"))


def count_upsert(insert: Callable[[sa.Table], Any]) -> sa.Insert:
    """The change of one kept count, with the dialect's INSERT that supports ON CONFLICT DO UPDATE."""
    statement = insert(pet_counts).values(_values_of(pet_counts))
    upsert: sa.Insert = statement.on_conflict_do_update(
        index_elements=[pet_counts.c.scope, pet_counts.c.pet_type, pet_counts.c.slot],
        set_={
            "count": pet_counts.c.count + statement.excluded.count,
            "writes": pet_counts.c.writes + statement.excluded.writes,
        },
    )
    return upsert


# The data's version: it grows with every write through any instance (see tables.pet_counts).
WRITES_VERSION = sa.select(sa.func.coalesce(sa.func.sum(pet_counts.c.writes), 0)).where(
    pet_counts.c.scope == ALL_OWNERS
)


_SORT_EXPRESSIONS: dict[SortField, sa.ColumnElement[Any]] = {
    SortField.ID: pets.c.id,
    SortField.NAME: pets.c.name_key,
    SortField.OWNER_ID: pets.c.owner_id,
    SortField.CREATED_AT: pets.c.created_at,
    SortField.CREATED_BY: pets.c.created_by,
    SortField.MODIFIED_AT: pets.c.modified_at,
    SortField.MODIFIED_BY: pets.c.modified_by,
}


def name_key(name: str) -> str:
    """The form in which names are sorted and matched: the same on every database."""
    return fold_case(name)


def pet_values(pet: PetRow) -> dict[str, Any]:
    return {
        "id": pet.id,
        "created_at": pet.created_at,
        "created_by": pet.created_by,
        "modified_at": pet.modified_at,
        "modified_by": pet.modified_by,
        "owner_id": pet.owner_id,
        "name": pet.name,
        "name_key": name_key(pet.name),
        "pet_type": pet.pet_type,
        "revision": pet.revision,
    }


def row_to_pet(row: Sequence[Any]) -> PetRow:
    """A pet from the columns of PET_COLUMNS, in order (the id as a UUID or as SQLite stores it)."""
    return PetRow(
        id=row[0] if isinstance(row[0], uuid.UUID) else uuid.UUID(hex=row[0]),
        created_at=row[1],
        created_by=row[2],
        modified_at=row[3],
        modified_by=row[4],
        owner_id=row[5],
        name=row[6],
        pet_type=row[7],
        revision=row[8],
    )


# Statements are built once per query shape (which filters are set, how many values each has, the
# sort) with named parameters, and reused: building and hashing a SQLAlchemy statement for every
# request costs more than running it.
FilterShape = tuple[bool, int | None, int | None, int, bool, bool, bool, bool]
Statement = tuple[sa.Select[Any], dict[str, Any]]
"""A statement and the values of its parameters."""


def _filter_shape(pet_filter: PetFilter) -> FilterShape:
    return (
        pet_filter.owner_id is not None,
        None if pet_filter.ids is None else len(pet_filter.ids),
        None if pet_filter.pet_types is None else len(pet_filter.pet_types),
        len(pet_filter.name_like),
        pet_filter.created_from is not None,
        pet_filter.created_before is not None,
        pet_filter.modified_from is not None,
        pet_filter.modified_before is not None,
    )


def _filter_values(pet_filter: PetFilter) -> dict[str, Any]:
    values: dict[str, Any] = {}
    if pet_filter.owner_id is not None:
        values["owner_id"] = pet_filter.owner_id
    values.update({f"id_{index}": value for index, value in enumerate(pet_filter.ids or ())})
    values.update({f"pet_type_{index}": value for index, value in enumerate(pet_filter.pet_types or ())})
    values.update({f"name_like_{index}": value for index, value in enumerate(pet_filter.name_like)})
    bounds = {
        "created_from": pet_filter.created_from,
        "created_before": pet_filter.created_before,
        "modified_from": pet_filter.modified_from,
        "modified_before": pet_filter.modified_before,
    }
    values.update({name: value for name, value in bounds.items() if value is not None})
    return values


def _conditions(shape: FilterShape) -> list[sa.ColumnElement[bool]]:
    owner, ids, pet_types, patterns, created_from, created_before, modified_from, modified_before = shape
    conditions: list[sa.ColumnElement[bool]] = []
    if owner:
        conditions.append(pets.c.owner_id == sa.bindparam("owner_id"))
    if ids is not None:
        conditions.append(pets.c.id.in_([sa.bindparam(f"id_{index}", type_=pets.c.id.type) for index in range(ids)]))
    if pet_types is not None:
        conditions.append(pets.c.pet_type.in_([sa.bindparam(f"pet_type_{index}") for index in range(pet_types)]))
    conditions.extend(
        pets.c.name_key.like(sa.bindparam(f"name_like_{index}"), escape="\\") for index in range(patterns)
    )
    if created_from:
        conditions.append(pets.c.created_at >= sa.bindparam("created_from"))
    if created_before:
        conditions.append(pets.c.created_at < sa.bindparam("created_before"))
    if modified_from:
        conditions.append(pets.c.modified_at >= sa.bindparam("modified_from"))
    if modified_before:
        conditions.append(pets.c.modified_at < sa.bindparam("modified_before"))
    return conditions


def _sort_expressions(field: SortField, pet_type_order: tuple[str, ...]) -> list[sa.ColumnElement[Any]]:
    if field is not SortField.PET_TYPE:
        return [_SORT_EXPRESSIONS[field]]
    # SQL lower() folds only ASCII on both databases; the configured types are ranked in Python instead.
    rank = sa.case({pet_type: index for index, pet_type in enumerate(pet_type_order)}, value=pets.c.pet_type)
    return [sa.func.coalesce(rank, len(pet_type_order)), sa.func.lower(pets.c.pet_type)]


def _sort_columns(
    sort: tuple[SortKey, ...], pet_type_order: tuple[str, ...]
) -> tuple[list[sa.ColumnElement[Any]], list[bool]]:
    """The expressions a list is ordered by, and whether each is descending."""
    expressions, directions = [], []
    for key in sort:
        for expression in _sort_expressions(key.field, pet_type_order):
            expressions.append(expression)
            directions.append(key.descending)
    return expressions, directions


@functools.lru_cache(maxsize=512)
def _list_select(
    shape: FilterShape, sort: tuple[SortKey, ...], pet_type_order: tuple[str, ...], *, keys_only: bool, after: bool
) -> sa.Select[Any]:
    expressions, directions = _sort_columns(sort, pet_type_order)
    conditions = _conditions(shape)
    if after:
        # Rows after a sort key: one row-value comparison, which an index on the sort columns serves.
        row = sa.tuple_(*expressions)
        key = sa.tuple_(*(sa.bindparam(f"after_{index}", type_=e.type) for index, e in enumerate(expressions)))
        conditions.append(row < key if directions[0] else row > key)
    return (
        sa.select(*(expressions if keys_only else PET_COLUMNS))
        .where(*conditions)
        .order_by(*(e.desc() if d else e.asc() for e, d in zip(expressions, directions, strict=True)))
        .limit(sa.bindparam("limit"))
        .offset(sa.bindparam("offset"))
    )


def list_statement(
    query: PetPageQuery, *, keys_only: bool = False, after_key: SortKeyValues | None = None
) -> Statement:
    """The page's rows (or only their sort keys); with `after_key`, only rows after that sort key."""
    statement = _list_select(
        _filter_shape(query.filter), query.sort, query.pet_type_order, keys_only=keys_only, after=after_key is not None
    )
    values = _filter_values(query.filter)
    values["limit"], values["offset"] = query.limit, query.offset
    values.update({f"after_{index}": value for index, value in enumerate(after_key or ())})
    return statement, values


def sort_directions(query: PetPageQuery) -> list[bool]:
    return _sort_columns(query.sort, query.pet_type_order)[1]


@functools.lru_cache(maxsize=256)
def _count_select(shape: FilterShape, *, kept: bool) -> sa.Select[Any]:
    if kept:
        pet_types = shape[2]
        conditions = [pet_counts.c.scope == sa.bindparam("scope")]
        if pet_types is not None:
            conditions.append(pet_counts.c.pet_type.in_([sa.bindparam(f"pet_type_{i}") for i in range(pet_types)]))
        return sa.select(sa.func.coalesce(sa.func.sum(pet_counts.c.count), 0)).where(*conditions)
    return sa.select(sa.func.count()).select_from(pets).where(*_conditions(shape))


def count_statement(pet_filter: PetFilter) -> Statement:
    """The number of pets that match: from the kept counts when the filter allows, else counted."""
    values = _filter_values(pet_filter)
    if counted_by_owner_and_type(pet_filter):
        values["scope"] = values.pop("owner_id", ALL_OWNERS)
        return _count_select(_filter_shape(pet_filter), kept=True), values
    return _count_select(_filter_shape(pet_filter), kept=False), values


def counted_by_owner_and_type(pet_filter: PetFilter) -> bool:
    return (
        pet_filter.ids is None
        and not pet_filter.name_like
        and pet_filter.created_from is None
        and pet_filter.created_before is None
        and pet_filter.modified_from is None
        and pet_filter.modified_before is None
    )


CountChange = tuple[str, str, int]
"""(scope, pet type, change in the number of pets)."""


def count_changes(removed: Iterable[PetRow], added: Iterable[PetRow]) -> list[CountChange]:
    """What a write does to the kept counts, in one fixed order so that concurrent writers lock
    counter rows in the same order and cannot deadlock. The every-owner rows of the types touched
    stay even when their count does not change: the write is counted in one of them."""
    changes: collections.Counter[tuple[str, str]] = collections.Counter()
    for pets_, sign in ((removed, -1), (added, 1)):
        for pet in pets_:
            changes[(pet.owner_id, pet.pet_type)] += sign
            changes[(ALL_OWNERS, pet.pet_type)] += sign
    return sorted(
        (scope, pet_type, change) for (scope, pet_type), change in changes.items() if change or scope == ALL_OWNERS
    )


class SqlTransaction(Transaction):
    """The pet and idempotency statements of one transaction; subclasses say how to run them.

    The transaction begins on its first statement, so that a request holds no connection (or, on
    SQLite, the process's connection) while it is still reading and checking its input.
    """

    page_anchors: PageAnchors
    counter_slots = 1
    """Rows over which the every-owner counts are spread (see tables.pet_counts)."""
    change_count: sa.Insert
    """The dialect's `count_upsert`."""

    def __init__(self, *, write: bool) -> None:
        self.write = write
        self.begun = False

    async def __aenter__(self) -> SqlTransaction:
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        if self.begun:
            self.begun = False
            await self._end(commit=exc_type is None)

    @abc.abstractmethod
    async def _begin(self) -> None: ...

    @abc.abstractmethod
    async def _end(self, *, commit: bool) -> None: ...

    @abc.abstractmethod
    async def _execute(self, statement: sa.Executable, rows: dict[str, Any] | Sequence[dict[str, Any]]) -> None:
        """Run a statement that returns no rows, once (with the given parameters), or once per row of them."""

    @abc.abstractmethod
    async def fetch(self, statement: Statement) -> Sequence[Sequence[Any]]:
        """The rows of a query, as sequences of column values."""

    async def execute(self, statement: sa.Executable, rows: dict[str, Any] | Sequence[dict[str, Any]]) -> None:
        if not self.begun:
            await self._begin()
            self.begun = True
        try:
            await self._execute(statement, rows)
        except DATABASE_ERRORS as exc:
            raise_translated(exc)

    async def get_pet(self, pet_id: uuid.UUID, *, for_update: bool = False) -> PetRow | None:
        rows = await self.fetch((SELECT_PET_FOR_UPDATE if for_update else SELECT_PET, {"pet_id": pet_id}))
        return row_to_pet(rows[0]) if rows else None

    async def insert_pets(self, new_pets: Sequence[PetRow]) -> None:
        await self.execute(INSERT_PET, [pet_values(pet) for pet in new_pets])
        await self._change_counts(count_changes((), new_pets))

    async def update_pet(self, pet: PetRow, *, previous: PetRow) -> None:
        values = pet_values(pet)
        values["pet_id"] = values.pop("id")
        await self.execute(UPDATE_PET, values)
        await self._change_counts(count_changes([previous], [pet]))

    async def delete_pet(self, pet: PetRow) -> None:
        await self.execute(DELETE_PET, {"pet_id": pet.id})
        await self._change_counts(count_changes([pet], ()))

    async def _change_counts(self, changes: list[CountChange]) -> None:
        if changes:
            await self.execute(self.change_count, self.count_rows(changes))

    def count_rows(self, changes: list[CountChange]) -> list[dict[str, Any]]:
        slot = random.randrange(self.counter_slots)  # noqa: S311 - spreads lock contention, not a secret
        rows = [
            {"scope": scope, "pet_type": pet_type, "slot": slot if scope == ALL_OWNERS else 0, "count": change}
            for scope, pet_type, change in changes
        ]
        first_of_all_owners = next(index for index, (scope, _, _) in enumerate(changes) if scope == ALL_OWNERS)
        for index, row in enumerate(rows):
            row["writes"] = int(index == first_of_all_owners)
        return rows

    async def count_pets(self, pet_filter: PetFilter) -> int:
        return int((await self.fetch(count_statement(pet_filter)))[0][0])

    async def list_pets(self, query: PetPageQuery) -> Sequence[PetRow]:
        after_key = None
        if query.offset >= BLOCK and uniform_direction(sort_directions(query)):
            version = await self.data_version()
            if version is not None:
                anchors = self.page_anchors.of(version, (query.filter, query.sort, query.pet_type_order))
                after_key, remaining = await seek_position(anchors, query.offset, partial(self._key_at, query))
                query = msgspec.structs.replace(query, offset=remaining)
        return [row_to_pet(row) for row in await self.fetch(list_statement(query, after_key=after_key))]

    async def _key_at(self, query: PetPageQuery, after_key: SortKeyValues | None, skip: int) -> SortKeyValues | None:
        one_row = msgspec.structs.replace(query, limit=1, offset=skip)
        rows = await self.fetch(list_statement(one_row, keys_only=True, after_key=after_key))
        return tuple(rows[0]) if rows else None

    async def data_version(self) -> Hashable | None:
        """A value that changes whenever the stored pets may have; None when there is no cheap one."""
        return None

    async def _hold_idempotency_key(self, caller: str, key: str) -> None:
        """Make concurrent holders of the same key exclusive; the default relies on a single writer."""

    async def claim_idempotency_key(self, caller: str, key: str, *, now_ms: int) -> StoredResponse | None:
        await self._hold_idempotency_key(caller, key)
        held = {"caller": caller, "key": key}
        rows = await self.fetch((SELECT_IDEMPOTENT_RESPONSE, held))
        if not rows:
            return None
        request_hash, status, body, location, etag, expires_at = rows[0]
        if expires_at <= now_ms:
            await self.execute(DELETE_IDEMPOTENCY_KEY, held)
            return None
        return StoredResponse(request_hash=request_hash, status=status, body=bytes(body), location=location, etag=etag)

    async def save_idempotent_response(
        self, caller: str, key: str, response: StoredResponse, *, expires_at_ms: int
    ) -> None:
        await self.execute(
            INSERT_IDEMPOTENCY_KEY,
            {
                "caller": caller,
                "key": key,
                "request_hash": response.request_hash,
                "status": response.status,
                "body": response.body,
                "location": response.location,
                "etag": response.etag,
                "expires_at": expires_at_ms,
            },
        )

    async def purge_expired_idempotency_keys(self, *, now_ms: int, limit: int) -> None:
        await self.execute(PURGE_EXPIRED_IDEMPOTENCY_KEYS, {"now_ms": now_ms, "limit": limit})


class SqlStore(Store):
    """What both SQL stores share: readiness means the database answers and its schema is at head."""

    def __init__(self) -> None:
        self.head = head_revision()
        """The schema revision this version of the service runs on."""

    async def schema_is_current(self) -> bool:
        try:
            async with self.transaction(write=False) as tx:
                rows = await tx.fetch((SCHEMA_VERSION, {}))
        except (DatabaseUnavailable, *DATABASE_ERRORS):
            return False
        return bool(rows) and rows[0][0] == self.head

    @abc.abstractmethod
    def transaction(self, *, write: bool) -> SqlTransaction: ...
