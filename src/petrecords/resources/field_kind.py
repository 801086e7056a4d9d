"""The base of every kind of field: the `Kind` protocol and `PlainKind`, what reading a value depends on
(`Context`, `SchemaContext`, `Choices`), how a list compares a field (`Comparison`), and the JSON Schema
building blocks the kinds share. A kind knows no resource."""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from petrecords.auth import GROUP_NAME_RULE
from petrecords.store.base import SortKey
from petrecords.text import (
    WHITE_SPACE,
    match_key,
)
from petrecords.values import (
    EMAIL_PATTERN,
    MAX_EMAIL_LENGTH,
    uuid_of_hex,
)

# The largest integer every JSON client reads exactly (IEEE 754 doubles).
MAX_SAFE_INTEGER = 2**53 - 1
DAY_MS = 86_400_000
LATEST_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z


class Choices:
    """A list of values that a field takes: matched case-insensitively, returned in their listed spelling."""

    def __init__(self, spellings: Iterable[str]) -> None:
        self.spellings = tuple(spellings)
        self._by_folded = {spelling.casefold(): spelling for spelling in self.spellings}

    @property
    def sort_order(self) -> tuple[str, ...]:
        """The spellings in case-insensitive order: how a sort by the field ranks them."""
        return tuple(sorted(self.spellings, key=lambda spelling: (match_key(spelling), spelling)))

    def resolve(self, value: str) -> str | None:
        return self._by_folded.get(value.casefold())

    @property
    def expected(self) -> str:
        return "one of " + ", ".join(self.spellings)


PET_TYPES = "pet_types"
"""The configured list of pet types, by the name of its setting."""


@dataclass(frozen=True)
class Context:
    """What reading a value may depend on besides the value: the configured lists of values and the clock."""

    choices: Mapping[str, Choices]
    """Each configured list of values, by the name of its setting."""
    now_ms: int

    @classmethod
    def configured(cls, lists: Mapping[str, Iterable[str]], *, now_ms: int) -> Context:
        return cls({name: Choices(values) for name, values in lists.items()}, now_ms)


Problem = str
"""What was expected, as the tail of a validation message: "must be a string."."""


class Comparison(enum.Enum):
    """How a list may compare a field with a value a client names (beyond equality to one of several): a kind's
    `comparisons` give the list's `{field}_like`, `_gte`, `_lte` and `_ne` parameters."""

    MATCH = "like"
    """A pattern of its text (`{field}_like`)."""
    BOUND = "bound"
    """Ordered: inclusive bounds (`{field}_gte`, `{field}_lte`)."""
    DIFFER = "ne"
    """Every record whose value differs, null included (`{field}_ne`)."""


class Kind(Protocol):
    """Everything the layer needs to know of one kind of field: how it is read from a client, shown to one,
    compared, sorted and described."""

    @property
    def nullable(self) -> bool:
        """Whether a stored value may be null: a client's null then clears it (else null means not given)."""
        ...

    @property
    def key_column(self) -> str | None:
        """The column that holds the field's matching and sorting key (lower-cased text), if it has one."""
        ...

    @property
    def embeds(self) -> str | None:
        """For a field that shows another record whole: the reference field that names it."""
        ...

    @property
    def comparisons(self) -> frozenset[Comparison]:
        """The comparisons a list may make of it."""
        ...

    @property
    def kept_controls(self) -> str:
        """The control characters its text may hold (free text keeps line feeds and tabs): a pattern that
        matches it may hold them too, and no other."""
        ...

    def read(self, value: Any, context: Context) -> tuple[Any, Problem | None]:
        """(stored value, None) when `value` (never None) is valid, else (None, what was expected)."""
        ...

    def show(self, stored: Any) -> Any:
        """The wire form of a stored value (never None)."""
        ...

    def expected(self, context: Context) -> str:
        """What a value must be, as a noun phrase: "one of Dog, Cat", "a record id (a UUID)"."""
        ...

    def read_text(self, text: str, context: Context) -> tuple[Any, Problem | None]:
        """A value that a list compares the stored ones with, from a query parameter: (value, None), else (None,
        what was expected). No bounds of the field apply (a bound outside them simply matches or not)."""
        ...

    def text_schema(self, context: SchemaContext) -> dict[str, Any]:
        """The JSON Schema of a query parameter that `read_text` reads."""
        ...

    def sort_key(self, column: str, context: Context) -> SortKey:
        """How a sort by the field (stored in `column`) orders records, ascending."""
        ...

    def schema(self, context: SchemaContext, *, sent: bool) -> dict[str, Any]:
        """The JSON Schema of the value as the service returns it, or (`sent`) as a client may send it."""
        ...


@dataclass(frozen=True)
class SchemaContext:
    """What a schema may depend on: the configured lists of values, by the name of their setting."""

    lists: Mapping[str, tuple[str, ...]]


class PlainKind:
    """What most kinds answer: no null, no key, nothing embedded, sorted by the stored value (nulls last), compared
    with a query parameter read as a value is."""

    nullable = False
    key_column: str | None = None
    embeds: str | None = None
    comparisons: frozenset[Comparison] = frozenset()
    kept_controls = ""

    def read(self, value: Any, context: Context) -> tuple[Any, Problem | None]:
        raise NotImplementedError

    def schema(self, context: SchemaContext, *, sent: bool) -> dict[str, Any]:
        raise NotImplementedError

    def show(self, stored: Any) -> Any:
        return stored

    def sort_key(self, column: str, context: Context) -> SortKey:
        return SortKey(column, nullable=self.nullable)

    def read_text(self, text: str, context: Context) -> tuple[Any, Problem | None]:
        return self.read(text, context)

    def text_schema(self, context: SchemaContext) -> dict[str, Any]:
        schema = self.schema(context, sent=True)
        schema.pop("description", None)
        return schema


# --- JSON Schema building blocks -------------------------------------------------------------------


def character_class(chars: str) -> str:
    """The body of a character class of `chars` (which may itself hold `a-b` ranges), runs of consecutive
    code points as ranges. Code points beyond the Basic Multilingual Plane are written as themselves: ECMA 262,
    Python and Rust regular expressions spell their escapes differently."""
    points = sorted({ord(char) for char in _expand_ranges(chars)})
    runs: list[list[int]] = []
    for point in points:
        if runs and runs[-1][1] == point - 1:
            runs[-1][1] = point
        else:
            runs.append([point, point])
    return "".join(
        _class_char(first) if first == last else f"{_class_char(first)}-{_class_char(last)}" for first, last in runs
    )


def _class_char(point: int) -> str:
    return f"\\u{point:04x}" if point <= 0xFFFF else chr(point)


def _expand_ranges(chars: str) -> str:
    out: list[str] = []
    index = 0
    while index < len(chars):
        if index + 2 < len(chars) and chars[index + 1] == "-":
            out.extend(chr(point) for point in range(ord(chars[index]), ord(chars[index + 2]) + 1))
            index += 3
        else:
            out.append(chars[index])
            index += 1
    return "".join(out)


UUID_SCHEMA: dict[str, Any] = {"type": "string", "format": "uuid", "examples": ["019a8a4e-1f2b-7c3d-8e4f-5a6b7c8d9e0f"]}
TIMESTAMP_SCHEMA: dict[str, Any] = {
    "type": "string",
    "format": "date-time",
    "pattern": r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$",
    "description": "RFC 3339, UTC, millisecond precision.",
    "examples": ["2026-11-21T16:06:29.123Z"],
}
# An e-mail address as the service reads one: an ASCII dot-atom local part and a host name of at least two
# labels. Not `format: email`, whose validators differ from it (some limit the local part to 64 characters).
EMAIL_SCHEMA: dict[str, Any] = {
    "type": "string",
    "maxLength": MAX_EMAIL_LENGTH,
    "pattern": f"^{EMAIL_PATTERN}$",
    "examples": ["alice@example.com"],
}
GROUP_SCHEMA: dict[str, Any] = {
    "type": "string",
    "pattern": r"^group:/?[A-Za-z0-9._:@-][A-Za-z0-9._:@/-]{0,99}$",
    "examples": ["group:clinic-42"],
}
"""`group:NAME` (auth.group_name: one leading `/` is not part of the name)."""
USER_OR_GROUP_SCHEMA: dict[str, Any] = {"oneOf": [EMAIL_SCHEMA, GROUP_SCHEMA]}
USER_OR_GROUP = "an e-mail address, or group:NAME (a group name of " + GROUP_NAME_RULE + ")"
# Of RFC 3339 date-times, the service reads those with any number of digits of a second, no leap second and a
# year from 0001.
DATE_TIME_INPUT_PATTERN = (
    r"^(?:000[1-9]|00[1-9]\d|0[1-9]\d{2}|[1-9]\d{3})-\d{2}-\d{2}[Tt]\d{2}:\d{2}:[0-5]\d(?:\.\d+)?"
    r"(?:[Zz]|[+-]\d{2}:\d{2})$"
)
DATE_TIME_INPUT_SCHEMA: dict[str, Any] = {
    "type": "string",
    "format": "date-time",
    "pattern": DATE_TIME_INPUT_PATTERN,
    "examples": ["2026-11-21T16:06:29.123Z"],
}
SPACE_CLASS = character_class(WHITE_SPACE)


def nullable_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` or null, under the same description."""
    description = schema.get("description")
    combined: dict[str, Any] = {"oneOf": [schema, {"type": "null"}]}
    if description:
        combined["description"] = description
    return combined


def record_uuid(value: Any) -> uuid.UUID:
    """A stored id as a UUID, whichever form the driver returned it in."""
    return value if isinstance(value, uuid.UUID) else uuid_of_hex(value)
