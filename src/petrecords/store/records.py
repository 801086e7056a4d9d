"""A record's statements, for every declared collection: read it by id (with its joined records), insert,
update and delete it, find the records that refer to it."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Sequence
from typing import Any, TypeVar

import sqlalchemy as sa

from petrecords.store.base import (
    Collection,
    Join,
    Row,
)
from petrecords.values import uuid_of_hex

Statement = tuple[sa.ClauseElement, dict[str, Any]]
"""A statement and the values of its parameters."""


def values_of(table: sa.Table, *, but: tuple[str, ...] = ()) -> dict[str, sa.BindParameter[Any]]:
    """A named parameter for each column of `table` (by the column's name), for VALUES or SET."""
    return {column.name: sa.bindparam(column.name, type_=column.type) for column in table.c if column.name not in but}


def stored_uuid(value: Any) -> Any:
    """A stored UUID as a UUID, whichever form the driver returned it in (SQLite's is hex)."""
    return value if value is None or isinstance(value, uuid.UUID) else uuid_of_hex(value)


class Reader:
    """How the rows of a table's queries become Rows: its own columns, then each join's. (Not
    portability.records.Reader, which reads the records of an export file.)"""

    def __init__(self, table: sa.Table, joins: tuple[Join, ...] = ()) -> None:
        self.columns: list[sa.ColumnElement[Any]] = list(table.c)
        self._names = [column.name for column in table.c]
        self._uuid_names = [column.name for column in table.c if isinstance(column.type, sa.Uuid)]
        self._boolean_names = [column.name for column in table.c if isinstance(column.type, sa.Boolean)]
        self._joins = [(join.name, reader_of(join.target)) for join in joins]
        self.from_clause: sa.FromClause = table
        for join in joins:
            target = join.target.table
            self.columns.extend(target.c)
            self.from_clause = self.from_clause.join(target, target.c.id == table.c[join.column])

    @property
    def width(self) -> int:
        return len(self._names)

    def row(self, values: Sequence[Any], start: int = 0) -> Row:
        width = len(self._names)
        own = values if not start and len(values) == width else values[start : start + width]
        row: Row = dict(zip(self._names, own, strict=True))
        for name in self._uuid_names:
            if (value := row[name]) is not None:
                row[name] = stored_uuid(value)
        for name in self._boolean_names:
            if (value := row[name]) is not None:
                row[name] = bool(value)  # SQLite's are 0 and 1
        offset = start + width
        for name, reader in self._joins:
            row[name] = reader.row(values, offset)
            offset += reader.width
        return row


T = TypeVar("T")


def padded(values: Sequence[T]) -> list[T]:
    """`values` (at least one) padded, repeating the last, to a power of two: statements with a parameter for each
    then come in a few sizes, each compiled (and prepared) once, whatever the number of values."""
    size = 1 << (len(values) - 1).bit_length()
    return [*values, *[values[-1]] * (size - len(values))]


@functools.lru_cache(maxsize=64)
def reader_of(collection: Collection) -> Reader:
    """The reader of a collection's records, with their joined records."""
    return Reader(collection.table, collection.joins)


@functools.lru_cache(maxsize=64)
def table_reader(table: sa.Table) -> Reader:
    """The reader of a table's own columns."""
    return Reader(table)


@functools.lru_cache(maxsize=256)
def select_by_id(collection: Collection) -> sa.Select[Any]:
    reader = reader_of(collection)
    table = collection.table
    record_id = sa.bindparam("record_id", type_=table.c.id.type)
    return sa.select(*reader.columns).select_from(reader.from_clause).where(table.c.id == record_id)


@functools.lru_cache(maxsize=64)
def insert_statement(collection: Collection) -> sa.Insert:
    return sa.insert(collection.table).values(values_of(collection.table))


@functools.lru_cache(maxsize=64)
def update_statement(collection: Collection) -> sa.Update:
    table = collection.table
    return (
        sa.update(table)
        .where(table.c.id == sa.bindparam("record_id", type_=table.c.id.type))
        .values(values_of(table, but=("id",)))
    )


@functools.lru_cache(maxsize=64)
def set_if_statement(collection: Collection, expected: tuple[str, ...], values: tuple[str, ...]) -> sa.Update:
    """Set the `values` columns of a record whose `expected` columns hold the parameters `expected_{name}`; the id
    of the record set, if it was."""
    table = collection.table
    return (
        sa.update(table)
        .where(
            table.c.id == sa.bindparam("record_id", type_=table.c.id.type),
            *(table.c[name] == sa.bindparam(f"expected_{name}", type_=table.c[name].type) for name in expected),
        )
        .values({name: sa.bindparam(name, type_=table.c[name].type) for name in values})
        .returning(table.c.id)
    )


@functools.lru_cache(maxsize=64)
def set_all_if_statement(
    collection: Collection, count: int, expected: tuple[str, ...], values: tuple[str, ...]
) -> sa.Update:
    """`set_if_statement` of `count` records at once (the parameters `record_id_{index}`); the ids of those set."""
    table = collection.table
    return (
        sa.update(table)
        .where(
            table.c.id.in_([sa.bindparam(f"record_id_{index}", type_=table.c.id.type) for index in range(count)]),
            *(table.c[name] == sa.bindparam(f"expected_{name}", type_=table.c[name].type) for name in expected),
        )
        .values({name: sa.bindparam(name, type_=table.c[name].type) for name in values})
        .returning(table.c.id)
    )


@functools.lru_cache(maxsize=64)
def delete_statement(collection: Collection) -> sa.Delete:
    table = collection.table
    return sa.delete(table).where(table.c.id == sa.bindparam("record_id", type_=table.c.id.type))


@functools.lru_cache(maxsize=64)
def referrers_statement(collection: Collection, column: str, *, exists: bool) -> sa.Select[Any]:
    table = collection.table
    condition = table.c[column] == sa.bindparam("record_id", type_=table.c[column].type)
    if exists:
        return sa.select(sa.literal(1)).select_from(table).where(condition).limit(1)
    return sa.select(*table.c).where(condition).order_by(table.c.id)


def record_values(collection: Collection, row: Row) -> dict[str, Any]:
    """The parameters of an insert or update: the row's value of each column of the table."""
    return {column.name: row.get(column.name) for column in collection.table.c}
