"""Every statement compiled once, with named parameters, and the values as the driver takes them."""

from __future__ import annotations

import functools
import uuid
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite as sqlite_dialect

from petrecords.store.base import Collection
from petrecords.store.records import Reader, reader_of, select_by_id
from petrecords.store.sql import SCHEMA_VERSION

_NAMED = sqlite_dialect.dialect(paramstyle="named")


@functools.lru_cache(maxsize=1024)
def _compiled(statement: sa.ClauseElement) -> tuple[str, dict[str, Any]]:
    """The SQL of a reusable statement, and the values of the parameters it fixes itself."""
    compiled = statement.compile(dialect=_NAMED)
    return str(compiled), dict(compiled.params)


_SCHEMA_VERSION = _compiled(SCHEMA_VERSION)[0]


def _driver_values(statement: sa.ClauseElement, values: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    sql, fixed = _compiled(statement)
    driven = dict(fixed)
    for name, value in values.items():
        # A UUID as SQLAlchemy's Uuid type stores it in SQLite (a create passes some forty values through here).
        driven[name] = value.hex if isinstance(value, uuid.UUID) else value
    return sql, driven


def as_sqlite_runs_it(statement: sa.ClauseElement, values: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """A statement's SQL, compiled once (see `_compiled`), and its named parameters as the driver takes them."""
    return _driver_values(statement, values or {})


@functools.lru_cache(maxsize=64)
def _lookup_of(collection: Collection) -> tuple[str, Reader]:
    """The SQL of a record's lookup by id, and the reader of its row."""
    return _compiled(select_by_id(collection))[0], reader_of(collection)
