"""The kinds of field a resource declares: how each reads a client's value, shows a stored one, and describes
itself in the OpenAPI document. A kind knows no resource."""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar, Protocol

from petrecords.text import (
    BIDI_CONTROLS,
    CONTROL_CHARACTERS,
    INVISIBLE_CHARACTERS,
    WHITE_SPACE,
    clean_name,
    clean_prose,
    match_key,
)
from petrecords.values import (
    EMAIL_PATTERN,
    MAX_EMAIL_LENGTH,
    format_timestamp,
    normalize_email,
    parse_datetime_ms,
    parse_record_id,
)

# The largest integer every JSON client reads exactly (IEEE 754 doubles).
MAX_SAFE_INTEGER = 2**53 - 1
DAY_MS = 86_400_000
LATEST_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z


class PetTypes:
    """The configured pet types, matched case-insensitively, returned in their configured spelling."""

    def __init__(self, spellings: Iterable[str]) -> None:
        self.spellings = tuple(spellings)
        self._by_folded = {spelling.casefold(): spelling for spelling in self.spellings}

    @property
    def sort_order(self) -> tuple[str, ...]:
        """The spellings in case-insensitive order: how `sort=petType` ranks them."""
        return tuple(sorted(self.spellings, key=lambda spelling: (match_key(spelling), spelling)))

    def resolve(self, value: str) -> str | None:
        return self._by_folded.get(value.casefold())

    @property
    def expected(self) -> str:
        return "one of " + ", ".join(self.spellings)


@dataclass(frozen=True)
class Context:
    """What reading a value may depend on besides the value: the configured pet types and the clock."""

    pet_types: PetTypes
    now_ms: int


Problem = str
"""What was expected, as the tail of a validation message: "must be a string."."""


class Kind(Protocol):
    """How one field is read from a client, shown to one, and described."""

    def read(self, value: Any, context: Context) -> tuple[Any, Problem | None]:
        """(stored value, None) when `value` (never None) is valid, else (None, what was expected)."""
        ...

    def show(self, stored: Any) -> Any:
        """The wire form of a stored value (never None)."""
        ...

    def schema(self, context: SchemaContext, *, sent: bool) -> dict[str, Any]:
        """The JSON Schema of the value as the service returns it, or (`sent`) as a client may send it."""
        ...


@dataclass(frozen=True)
class SchemaContext:
    """What a schema may depend on: the configured pet types."""

    pet_types: tuple[str, ...]


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
_SPACE = character_class(WHITE_SPACE)
_INVISIBLE_ONLY = {"pattern": f"^[{_SPACE}{character_class(INVISIBLE_CHARACTERS)}]*$"}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    description = schema.get("description")
    combined: dict[str, Any] = {"oneOf": [schema, {"type": "null"}]}
    if description:
        combined["description"] = description
    return combined


# --- the kinds -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Name:
    """A name: trimmed, 1 to `max_length` code points, no control characters or bidirectional controls, at least
    one visible character. Matched and sorted by its key (`key_column`): case-insensitive, in NFC."""

    max_length: int
    key_column: str
    example: str = "Rex"

    def read(self, value: Any, context: Context) -> tuple[Any, Problem | None]:
        return clean_name(value, max_length=self.max_length)

    def show(self, stored: Any) -> Any:
        return stored

    def description(self) -> str:
        return (
            f"Trimmed of white space at both ends, then 1–{self.max_length} characters (code points) "
            "with no control characters (C0, DEL, C1), no bidirectional embedding, override or isolate "
            "(U+202A–U+202E, U+2066–U+2069), and at least one visible character (not only zero-width or other "
            "default-ignorable characters). Stored as sent (after trimming); matched and sorted in Unicode "
            "normalization form C, case-insensitively."
        )

    def schema(self, context: SchemaContext, *, sent: bool) -> dict[str, Any]:
        forbidden = f"{CONTROL_CHARACTERS}{character_class(BIDI_CONTROLS)}"
        core = f"[^{_SPACE}{forbidden}](?:[^{forbidden}]{{0,{self.max_length - 2}}}[^{_SPACE}{forbidden}])?"
        # A name as sent may carry white space at both ends, so its length is only known after trimming; not
        # being made only of invisible characters is a second pattern, which a regular expression without
        # lookahead cannot combine with the first.
        schema: dict[str, Any] = {"type": "string"}
        if sent:
            schema["pattern"] = f"^[{_SPACE}]*{core}[{_SPACE}]*$"
        else:
            schema.update(minLength=1, maxLength=self.max_length, pattern=f"^{core}$")
        schema.update({"not": _INVISIBLE_ONLY, "description": self.description(), "examples": [self.example]})
        return schema


@dataclass(frozen=True)
class Prose:
    """Free text or null: trimmed; empty or blank is null; at most `max_length` code points; no control
    characters but line feed and tab. Searched by its key (`key_column`) when it has one."""

    max_length: int
    key_column: str | None = None
    nullable: ClassVar[bool] = True

    def read(self, value: Any, context: Context) -> tuple[Any, Problem | None]:
        return clean_prose(value, max_length=self.max_length)

    def show(self, stored: Any) -> Any:
        return stored

    def schema(self, context: SchemaContext, *, sent: bool) -> dict[str, Any]:
        description = (
            f"Trimmed of white space at both ends; at most {self.max_length} characters (code points); no control "
            "characters other than line feed and tab. Empty, blank or absent is stored and returned as null."
        )
        forbidden = r"\u0000-\u0008\u000b-\u001f\u007f-\u009f"
        core = f"[^{_SPACE}{forbidden}](?:[^{forbidden}]{{0,{self.max_length - 2}}}[^{_SPACE}{forbidden}])?"
        # As sent, white space at both ends does not count, and blank text stands for null.
        pattern = f"^[{_SPACE}]*(?:{core})?[{_SPACE}]*$" if sent else f"^{core}$"
        text: dict[str, Any] = {"type": "string", "pattern": pattern}
        if not sent:
            text.update(minLength=1, maxLength=self.max_length)
        return {"oneOf": [text, {"type": "null"}], "description": description}


@dataclass(frozen=True)
class PetType:
    """One of the configured pet types, matched case-insensitively, stored in its configured spelling."""

    def read(self, value: Any, context: Context) -> tuple[Any, Problem | None]:
        resolved = context.pet_types.resolve(value) if isinstance(value, str) else None
        if resolved is None:
            return None, f"must be {context.pet_types.expected}."
        return resolved, None

    def show(self, stored: Any) -> Any:
        return stored

    def schema(self, context: SchemaContext, *, sent: bool) -> dict[str, Any]:
        return {
            "type": "string",
            "enum": list(context.pet_types),
            "description": "One of the configured pet types, matched case-insensitively (any letter case is "
            "accepted); returned in its configured spelling.",
            "examples": [context.pet_types[0]],
        }


@dataclass(frozen=True)
class Email:
    """A user identifier: an e-mail address, stored in lower case."""

    description: str = ""

    def read(self, value: Any, context: Context) -> tuple[Any, Problem | None]:
        email = normalize_email(value) if isinstance(value, str) else None
        if email is None:
            return None, "must be an e-mail address."
        return email, None

    def show(self, stored: Any) -> Any:
        return stored

    def schema(self, context: SchemaContext, *, sent: bool) -> dict[str, Any]:
        return {**EMAIL_SCHEMA, "description": self.description} if self.description else dict(EMAIL_SCHEMA)


@dataclass(frozen=True)
class WholeNumber:
    """An integer from `minimum` to `maximum`; a JSON number with a fraction (even `.0`) is refused."""

    minimum: int
    maximum: int
    description: str = ""

    def read(self, value: Any, context: Context) -> tuple[Any, Problem | None]:
        if isinstance(value, bool) or not isinstance(value, int) or not self.minimum <= value <= self.maximum:
            return None, f"must be a whole number from {self.minimum} to {self.maximum}."
        return value, None

    def show(self, stored: Any) -> Any:
        return stored

    def schema(self, context: SchemaContext, *, sent: bool) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "integer", "minimum": self.minimum, "maximum": self.maximum}
        # JSON Schema reads 365.0 as the integer 365, so only the description can say that it is refused.
        written = "Written as a whole number: a number with a fraction or an exponent (365.0, 3.65e2) is refused."
        schema["description"] = f"{self.description} {written}" if self.description else written
        return schema


@dataclass(frozen=True)
class Instant:
    """A moment a client names: an RFC 3339 date-time with `Z` or an offset, any number of fraction digits,
    rounded to the millisecond; at or after `earliest_ms`, not later than the service's clock plus
    `latest_ahead_ms` when that is set, and never after the end of the year 9999 in UTC. Returned in UTC with
    milliseconds."""

    earliest_ms: int
    latest_ahead_ms: int | None = None
    description: str = ""
    example: str = "2026-11-21T16:06:29.123Z"

    def read(self, value: Any, context: Context) -> tuple[Any, Problem | None]:
        moment = parse_datetime_ms(value) if isinstance(value, str) else None
        if moment is None:
            return None, "must be an RFC 3339 date-time with Z or an offset, e.g. 2026-11-21T16:06:29.123Z."
        rounded = math.floor(moment + Fraction(1, 2))
        if rounded < self.earliest_ms:
            return None, f"must not be before {format_timestamp(self.earliest_ms)}."
        if self.latest_ahead_ms is not None and rounded > context.now_ms + self.latest_ahead_ms:
            minutes = self.latest_ahead_ms // 60_000
            return None, f"must not be later than {minutes} minutes after the service's clock."
        if rounded > LATEST_MS:
            # 9999-12-31T23:30:00-01:00 is a valid RFC 3339 date-time, but in UTC its year has five digits.
            return None, f"must not be later than {format_timestamp(LATEST_MS)}, the last moment RFC 3339 writes."
        return rounded, None

    def show(self, stored: Any) -> Any:
        return format_timestamp(stored)

    def schema(self, context: SchemaContext, *, sent: bool) -> dict[str, Any]:
        schema = dict(DATE_TIME_INPUT_SCHEMA if sent else TIMESTAMP_SCHEMA)
        schema["examples"] = [self.example]
        if self.description:
            schema["description"] = self.description
        return schema


@dataclass(frozen=True)
class RecordId:
    """The id of a record of another resource (checked against it by the resource's references)."""

    description: str = ""

    def read(self, value: Any, context: Context) -> tuple[Any, Problem | None]:
        record_id = parse_record_id(value) if isinstance(value, str) else None
        if record_id is None:
            return None, "must be a record id (a UUID)."
        return record_id, None

    def show(self, stored: Any) -> Any:
        return str(stored)

    def schema(self, context: SchemaContext, *, sent: bool) -> dict[str, Any]:
        return {**UUID_SCHEMA, "description": self.description} if self.description else dict(UUID_SCHEMA)


@dataclass(frozen=True)
class Embedded:
    """The record that `reference` names, shown whole, as its own GET returns it. Read-only."""

    reference: str

    def read(self, value: Any, context: Context) -> tuple[Any, Problem | None]:
        raise TypeError("an embedded record is read-only")

    def show(self, stored: Any) -> Any:
        raise TypeError("an embedded record is shown by its own resource")

    def schema(self, context: SchemaContext, *, sent: bool) -> dict[str, Any]:
        raise TypeError("an embedded record is described by its own resource")


def nullable_schema(schema: dict[str, Any]) -> dict[str, Any]:
    return _nullable(schema)


def record_uuid(value: Any) -> uuid.UUID:
    """A stored id as a UUID, whichever form the driver returned it in."""
    return value if isinstance(value, uuid.UUID) else uuid.UUID(hex=value)


__all__ = [
    "DAY_MS",
    "MAX_SAFE_INTEGER",
    "Context",
    "Email",
    "Instant",
    "Kind",
    "Name",
    "PetType",
    "PetTypes",
    "Prose",
    "RecordId",
    "SchemaContext",
    "WholeNumber",
]
