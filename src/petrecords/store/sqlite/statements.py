"""Every statement compiled once, with positional parameters, and the values as the driver takes them."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.sql.compiler import SQLCompiler

from petrecords.store.base import Collection
from petrecords.store.records import Reader, reader_of, select_by_id
from petrecords.store.sql import SCHEMA_VERSION

_POSITIONAL = sqlite_dialect.dialect(paramstyle="qmark")
"""Parameters by position: the driver binds named ones by asking SQLite each one's name, which SQLite finds by
walking its list of names, so that a statement of a thousand ids (a batch of reminders reading its doses) took 2.4 ms
to bind where in order it takes 1.0 ms."""


@functools.lru_cache(maxsize=1024)
def _compiled(statement: sa.ClauseElement) -> tuple[str, tuple[str, ...], dict[str, Any]]:
    """The SQL of a reusable statement, its parameters' names in their order, and the values of the parameters it
    fixes itself."""
    compiled = statement.compile(dialect=_POSITIONAL)
    assert isinstance(compiled, SQLCompiler)  # noqa: S101 - for the type checker: a statement compiles to one
    return str(compiled), tuple(compiled.positiontup or ()), dict(compiled.params)


_SCHEMA_VERSION = _compiled(SCHEMA_VERSION)[0]


def _driver_value(value: Any) -> Any:
    # A UUID as SQLAlchemy's Uuid type stores it in SQLite (a create passes some forty values through here).
    return value.hex if isinstance(value, uuid.UUID) else value


def _in_order(names: tuple[str, ...], fixed: dict[str, Any], values: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(_driver_value(values[name]) if name in values else fixed[name] for name in names)


def _driver_values(statement: sa.ClauseElement, values: Mapping[str, Any]) -> tuple[str, tuple[Any, ...]]:
    sql, names, fixed = _compiled(statement)
    return sql, _in_order(names, fixed, values)


def as_sqlite_runs_it(
    statement: sa.ClauseElement, values: Mapping[str, Any] | None = None
) -> tuple[str, tuple[Any, ...]]:
    """A statement's SQL, compiled once (see `_compiled`), and its parameters in order as the driver takes them."""
    return _driver_values(statement, values or {})


@functools.lru_cache(maxsize=64)
def _lookup_of(collection: Collection) -> tuple[str, Reader]:
    """The SQL of a record's lookup by id, and the reader of its row."""
    sql, names, _ = _compiled(select_by_id(collection))
    if names != ("record_id",):  # its one value is given by position, as (record_id.hex,)
        raise TypeError(f"a lookup by id takes its id alone, not {names}")
    return sql, reader_of(collection)
