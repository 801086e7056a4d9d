"""The kinds of field a resource declares: how each reads a client's value, shows a stored one, and describes
itself in the OpenAPI document. A kind knows no resource."""

from __future__ import annotations

import datetime
import enum
import functools
import math
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, Protocol

from petrecords.auth import GROUP_NAME_RULE, user_or_group
from petrecords.store.base import SortKey
from petrecords.text import (
    BIDI_CONTROLS,
    CONTROL_CHARACTERS,
    INVISIBLE_CHARACTERS,
    PROSE_CONTROLS,
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


class Operation(enum.Enum):
    """How a list may compare a field with a value a client names (beyond equality to one of several). Not an
    OpenAPI operation (an endpoint's entry in the document, petrecords.openapi_document)."""

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
    def operations(self) -> frozenset[Operation]:
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
    operations: frozenset[Operation] = frozenset()
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
class Name(PlainKind):
    """A name: trimmed, 1 to `max_length` code points, no control characters or bidirectional controls, at least
    one visible character. Matched and sorted by its key (`key_column`): case-insensitive, in NFC. `nullable`:
    an optional name, which blank text (or null) clears. `meaning`: what the name is of, before its rules in the
    document."""

    max_length: int
    key_column: str | None = None
    example: str = "Rex"
    nullable: bool = False
    meaning: str = ""
    operations: frozenset[Operation] = frozenset({Operation.MATCH})

    def read(self, value: Any, context: Context) -> tuple[Any, Problem | None]:
        if self.nullable and isinstance(value, str) and not _VISIBLE_TEXT.search(value):
            return None, None
        return clean_name(value, max_length=self.max_length)

    def expected(self, context: Context) -> str:
        return f"a name of 1 to {self.max_length} characters"

    def sort_key(self, column: str, context: Context) -> SortKey:
        return SortKey(self.key_column or column, nullable=self.nullable)

    def text_schema(self, context: SchemaContext) -> dict[str, Any]:
        # A filter names a name: blank text, which clears an optional one in a body, names nothing.
        schema = replace(self, nullable=False).schema(context, sent=True)
        schema.pop("description", None)
        return schema

    def description(self) -> str:
        blank = " Blank text or null clears it (it is then null)." if self.nullable else ""
        meaning = f"{self.meaning} " if self.meaning else ""
        return (
            f"{meaning}Trimmed of white space at both ends, then 1–{self.max_length} characters (code points) "
            "with no control characters (C0, DEL, C1), no bidirectional embedding, override or isolate "
            "(U+202A–U+202E, U+2066–U+2069), and at least one visible character (not only zero-width or other "
            "default-ignorable characters). Stored as sent (after trimming); matched and sorted in Unicode "
            f"normalization form C, case-insensitively.{blank}"
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
        if not self.nullable:
            return schema
        if sent:
            # As sent, blank text stands for null as well.
            return {"oneOf": [schema, _INVISIBLE_ONLY_TEXT, {"type": "null"}], "description": self.description()}
        return _nullable(schema)


_INTEGER_TEXT = re.compile(r"-?[0-9]{1,16}", re.ASCII)
# A `+` in a query string decodes to a space; `... 01:00` is read as the offset `+01:00` it was.
_SPACE_FOR_PLUS = re.compile(r" (\d{2}:\d{2})$", re.ASCII)
_VISIBLE_TEXT = re.compile(f"[^{WHITE_SPACE}{INVISIBLE_CHARACTERS}]")
_INVISIBLE_ONLY_TEXT = {"type": "string", **_INVISIBLE_ONLY}


@dataclass(frozen=True)
class Prose(PlainKind):
    """Free text or null: trimmed; empty or blank is null; at most `max_length` code points; no control
    characters but line feed and tab. Searched by its key (`key_column`) when it has one. `meaning`: what the text
    is, before its rules in the document."""

    max_length: int
    key_column: str | None = None
    nullable: bool = True
    meaning: str = ""
    operations: frozenset[Operation] = frozenset({Operation.MATCH})
    kept_controls = PROSE_CONTROLS

    def read(self, value: Any, context: Context) -> tuple[Any, Problem | None]:
        return clean_prose(value, max_length=self.max_length)

    def expected(self, context: Context) -> str:
        return f"text of at most {self.max_length} characters"

    def sort_key(self, column: str, context: Context) -> SortKey:
        return SortKey(self.key_column or column, nullable=True)

    def schema(self, context: SchemaContext, *, sent: bool) -> dict[str, Any]:
        description = (f"{self.meaning} " if self.meaning else "") + (
            f"Trimmed of white space at both ends; at most {self.max_length} characters (code points); no control "
            "characters other than line feed and tab. Empty, blank or null is stored and returned as null."
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
class Listed(PlainKind):
    """One of a list of values, matched case-insensitively, stored and returned in the list's spelling, sorted
    case-insensitively: fixed `values`, or the list configured in the setting `setting` (the pet types)."""

    values: tuple[str, ...] = ()
    setting: str | None = None
    description: str = ""
    nullable: bool = False
    operations: frozenset[Operation] = frozenset({Operation.DIFFER})

    def __post_init__(self) -> None:
        if bool(self.values) == (self.setting is not None):
            raise ValueError("a listed kind takes either its values or the setting that configures them")

    def choices(self, context: Context) -> Choices:
        return _fixed_choices(self.values) if self.setting is None else context.choices[self.setting]

    def spellings(self, context: SchemaContext) -> tuple[str, ...]:
        return self.values if self.setting is None else context.lists[self.setting]

    def read(self, value: Any, context: Context) -> tuple[Any, Problem | None]:
        choices = self.choices(context)
        resolved = choices.resolve(value) if isinstance(value, str) else None
        if resolved is None:
            return None, f"must be {choices.expected}."
        return resolved, None

    def expected(self, context: Context) -> str:
        return self.choices(context).expected

    def sort_key(self, column: str, context: Context) -> SortKey:
        # SQL lower() folds only ASCII on both databases; the listed values are ranked here instead.
        return SortKey(column, rank=self.choices(context).sort_order, nullable=self.nullable)

    def schema(self, context: SchemaContext, *, sent: bool) -> dict[str, Any]:
        spellings = list(self.spellings(context))
        described = self.description or "One of the listed values"
        schema = {
            "type": "string",
            "enum": spellings,
            "description": f"{described}, matched case-insensitively (any letter case is accepted); returned in "
            "its listed spelling.",
            "examples": [spellings[0]],
        }
        return _nullable(schema) if self.nullable else schema

    def text_schema(self, context: SchemaContext) -> dict[str, Any]:
        spellings = list(self.spellings(context))
        return {"type": "string", "enum": spellings, "examples": [spellings[0]]}


@functools.lru_cache(maxsize=64)
def _fixed_choices(values: tuple[str, ...]) -> Choices:
    return Choices(values)


def pet_type(description: str = "One of the configured pet types") -> Listed:
    """The kind of a pet type: one of the configured ones."""
    return Listed(setting=PET_TYPES, description=description)


@dataclass(frozen=True)
class Email(PlainKind):
    """A user identifier: an e-mail address, stored in lower case."""

    description: str = ""
    operations: frozenset[Operation] = frozenset({Operation.DIFFER})

    def read(self, value: Any, context: Context) -> tuple[Any, Problem | None]:
        email = normalize_email(value) if isinstance(value, str) else None
        if email is None:
            return None, "must be an e-mail address."
        return email, None

    def expected(self, context: Context) -> str:
        return "an e-mail address"

    def schema(self, context: SchemaContext, *, sent: bool) -> dict[str, Any]:
        return {**EMAIL_SCHEMA, "description": self.description} if self.description else dict(EMAIL_SCHEMA)


@dataclass(frozen=True)
class UserOrGroup(PlainKind):
    """A user, by e-mail address (stored in lower case), or everyone whose token lists a group, as `group:NAME` (the
    name compared exactly, case included; a leading `/`, as Keycloak writes a group's path, is not part of it)."""

    description: str = ""
    examples: tuple[str, ...] = ("alice@example.com", "group:clinic-42")
    operations: frozenset[Operation] = frozenset({Operation.DIFFER})

    def read(self, value: Any, context: Context) -> tuple[Any, Problem | None]:
        named = user_or_group(value) if isinstance(value, str) else None
        return (named, None) if named is not None else (None, f"must be {self.expected(context)}.")

    def expected(self, context: Context) -> str:
        return USER_OR_GROUP

    def schema(self, context: SchemaContext, *, sent: bool) -> dict[str, Any]:
        schema: dict[str, Any] = {**USER_OR_GROUP_SCHEMA, "examples": list(self.examples)}
        if self.description:
            schema["description"] = self.description
        return schema


@dataclass(frozen=True)
class WholeNumber(PlainKind):
    """An integer from `minimum` to `maximum`. A JSON number that is a whole number is one, however it is
    written (`365.0`, `3.65e2`), as JSON Schema counts it; one with a non-zero fraction is refused."""

    minimum: int
    maximum: int
    description: str = ""
    operations: frozenset[Operation] = frozenset({Operation.BOUND})

    def read(self, value: Any, context: Context) -> tuple[Any, Problem | None]:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not self.minimum <= value <= self.maximum:
            return None, f"must be a whole number from {self.minimum} to {self.maximum}."
        return value, None

    def expected(self, context: Context) -> str:
        return f"a whole number from {self.minimum} to {self.maximum}"

    def read_text(self, text: str, context: Context) -> tuple[Any, Problem | None]:
        number = int(text) if _INTEGER_TEXT.fullmatch(text) else None
        if number is None or not -MAX_SAFE_INTEGER <= number <= MAX_SAFE_INTEGER:
            return None, f"must be a whole number from {-MAX_SAFE_INTEGER} to {MAX_SAFE_INTEGER}."
        return number, None

    def text_schema(self, context: SchemaContext) -> dict[str, Any]:
        return {"type": "integer", "minimum": -MAX_SAFE_INTEGER, "maximum": MAX_SAFE_INTEGER}

    def schema(self, context: SchemaContext, *, sent: bool) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "integer", "minimum": self.minimum, "maximum": self.maximum}
        written = "A number with a non-zero fraction is refused; 365.0 is the whole number 365."
        schema["description"] = f"{self.description} {written}" if self.description else written
        return schema


@dataclass(frozen=True)
class Instant(PlainKind):
    """A moment a client names: an RFC 3339 date-time with `Z` or an offset, any number of fraction digits,
    rounded to the millisecond; at or after `earliest_ms`, not later than the service's clock plus
    `latest_ahead_ms` when that is set, and never after the end of the year 9999 in UTC. Returned in UTC with
    milliseconds. `future`: later than the service's clock."""

    earliest_ms: int
    latest_ahead_ms: int | None = None
    description: str = ""
    example: str = "2026-11-21T16:06:29.123Z"
    nullable: bool = False
    future: bool = False
    operations: frozenset[Operation] = frozenset({Operation.BOUND})

    def read(self, value: Any, context: Context) -> tuple[Any, Problem | None]:
        moment = parse_datetime_ms(value) if isinstance(value, str) else None
        if moment is None:
            return None, f"must be {self.expected(context)}."
        rounded = math.floor(moment + Fraction(1, 2))
        if rounded < self.earliest_ms:
            return None, f"must not be before {format_timestamp(self.earliest_ms)}."
        if self.latest_ahead_ms is not None and rounded > context.now_ms + self.latest_ahead_ms:
            minutes = self.latest_ahead_ms // 60_000
            return None, f"must not be later than {minutes} minutes after the service's clock."
        if self.future and rounded <= context.now_ms:
            return None, "must be in the future."
        if rounded > LATEST_MS:
            # 9999-12-31T23:30:00-01:00 is a valid RFC 3339 date-time, but in UTC its year has five digits.
            return None, f"must not be later than {format_timestamp(LATEST_MS)}, the last moment RFC 3339 writes."
        return rounded, None

    def show(self, stored: Any) -> Any:
        return format_timestamp(stored)

    def expected(self, context: Context) -> str:
        return "an RFC 3339 date-time with Z or an offset, e.g. 2026-11-21T16:06:29.123Z"

    def read_text(self, text: str, context: Context) -> tuple[Any, Problem | None]:
        """The exact moment (epoch milliseconds, maybe with a fraction): compared exactly with the whole
        milliseconds stored."""
        moment = parse_datetime_ms(_SPACE_FOR_PLUS.sub(r"+\1", text))
        if moment is None:
            return None, "must be an RFC 3339 date-time, e.g. 2026-11-21T16:06:29.123Z."
        return moment, None

    def text_schema(self, context: SchemaContext) -> dict[str, Any]:
        return {"type": "string", "format": "date-time", "pattern": DATE_TIME_INPUT_PATTERN}

    def schema(self, context: SchemaContext, *, sent: bool) -> dict[str, Any]:
        schema = dict(DATE_TIME_INPUT_SCHEMA if sent else TIMESTAMP_SCHEMA)
        schema["examples"] = [self.example]
        if self.description:
            schema["description"] = self.description
        return _nullable(schema) if self.nullable else schema


@dataclass(frozen=True)
class CalendarDate(PlainKind):
    """A calendar date, `YYYY-MM-DD` (RFC 3339 full-date), from `earliest` to today in UTC (when `until_today`):
    stored as days since 1970-01-01, so that it sorts and compares as a number."""

    earliest: str = "1900-01-01"
    until_today: bool = True
    description: str = ""
    nullable: bool = False
    operations: frozenset[Operation] = frozenset({Operation.BOUND})

    def read(self, value: Any, context: Context) -> tuple[Any, Problem | None]:
        days = _days_of(value)
        if days is None:
            return None, f"must be {self.expected(context)}."
        if days < (_days_of(self.earliest) or 0):
            return None, f"must not be before {self.earliest}."
        if self.until_today and days > context.now_ms // DAY_MS:
            return None, "must not be after today (UTC)."
        return days, None

    def show(self, stored: Any) -> Any:
        return (_EPOCH + datetime.timedelta(days=stored)).isoformat()

    def expected(self, context: Context) -> str:
        return "a calendar date written YYYY-MM-DD, e.g. 2019-04-23"

    def read_text(self, text: str, context: Context) -> tuple[Any, Problem | None]:
        days = _days_of(text)
        return (days, None) if days is not None else (None, f"must be {self.expected(context)}.")

    def text_schema(self, context: SchemaContext) -> dict[str, Any]:
        return {"type": "string", "format": "date", "pattern": _DATE_PATTERN}

    def schema(self, context: SchemaContext, *, sent: bool) -> dict[str, Any]:
        bound = " and not after today (UTC)" if self.until_today else ""
        schema = {
            "type": "string",
            "format": "date",
            "pattern": _DATE_PATTERN,
            "description": self.description or f"A calendar date, YYYY-MM-DD, not before {self.earliest}{bound}.",
            "examples": ["2019-04-23"],
        }
        return _nullable(schema) if self.nullable else schema


_EPOCH = datetime.date(1970, 1, 1)
_DATE_PATTERN = r"^\d{4}-\d{2}-\d{2}$"
_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})", re.ASCII)


def _days_of(value: Any) -> int | None:
    """Days since 1970-01-01 of a `YYYY-MM-DD` date, or None when it is no such date."""
    match = _DATE.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        return None
    try:
        return (datetime.date(*map(int, match.groups())) - _EPOCH).days
    except ValueError:
        return None


@dataclass(frozen=True)
class Flag(PlainKind):
    """True or false."""

    description: str = ""
    nullable: bool = False
    operations: frozenset[Operation] = frozenset({Operation.DIFFER})

    def read(self, value: Any, context: Context) -> tuple[Any, Problem | None]:
        if not isinstance(value, bool):
            return None, "must be true or false."
        return value, None

    def expected(self, context: Context) -> str:
        return "true or false"

    def read_text(self, text: str, context: Context) -> tuple[Any, Problem | None]:
        if text.lower() not in ("true", "false"):
            return None, "must be true or false."
        return text.lower() == "true", None

    def text_schema(self, context: SchemaContext) -> dict[str, Any]:
        return {"type": "boolean"}

    def schema(self, context: SchemaContext, *, sent: bool) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "boolean"}
        if self.description:
            schema["description"] = self.description
        return _nullable(schema) if self.nullable else schema


def _code_text(kind: Kind, value: Any, context: Context) -> tuple[str, Problem | None]:
    """A code as sent, trimmed of white space ("" when blank, which is null), or what was expected of it."""
    if not isinstance(value, str):
        return "", f"must be a string: {kind.expected(context)}."
    return value.strip(WHITE_SPACE), None


def _read_present(kind: Kind, text: str, context: Context) -> tuple[Any, Problem | None]:
    """A value that a list compares with, read as a body's is, except that blank text (null in a body) is none."""
    value, problem = kind.read(text, context)
    return (None, f"must be {kind.expected(context)}.") if value is None else (value, problem)


@dataclass(frozen=True)
class Microchip(PlainKind):
    """A transponder code, in one of the three formats that pets' chips carry: ISO 11784 (15 digits), FDX-A (10
    characters 0-9 and A-F, matched case-insensitively and returned in upper case) or AVID (9 digits). It may be
    sent with one space, dot, hyphen or `*` between two of its characters (they are removed) and white space
    around it; blank is null. Returned as its characters alone."""

    description: str = ""
    nullable: bool = True
    operations: frozenset[Operation] = frozenset({Operation.DIFFER})

    def read(self, value: Any, context: Context) -> tuple[Any, Problem | None]:
        text, problem = _code_text(self, value, context)
        if problem is not None or not text:
            return None, problem
        code = _MICROCHIP_SEPARATORS.sub("", text) if _MICROCHIP.fullmatch(text) else ""
        if not (len(code) in _MICROCHIP_DIGITS and code.isdigit()) and len(code) != _FDX_A_LENGTH:
            separators = "a space, dot, hyphen or * between two characters is allowed"
            return None, f"must be {self.expected(context)}; {separators}."
        return code.upper(), None

    def expected(self, context: Context) -> str:
        return "a transponder code: 15 digits (ISO 11784), 10 characters 0-9 and A-F (FDX-A) or 9 digits (AVID)"

    def read_text(self, text: str, context: Context) -> tuple[Any, Problem | None]:
        return _read_present(self, text, context)

    def text_schema(self, context: SchemaContext) -> dict[str, Any]:
        # White space around the code is read away, as in a body.
        return {"type": "string", "pattern": f"^[{_SPACE}]*{_MICROCHIP_SENT}[{_SPACE}]*$"}

    def schema(self, context: SchemaContext, *, sent: bool) -> dict[str, Any]:
        description = self.description or (
            "A transponder code: 15 digits (ISO 11784), 10 characters 0-9 and A-F (FDX-A, returned in upper case) or "
            "9 digits (AVID). When sent, one space, dot, hyphen or * between two of its characters is removed, and "
            "blank is null. Unique among the pets that exist."
        )
        if sent:
            text: dict[str, Any] = {"type": "string", "pattern": f"^[{_SPACE}]*(?:{_MICROCHIP_SENT})?[{_SPACE}]*$"}
        else:
            text = {"type": "string", "pattern": r"^(?:\d{15}|[0-9A-F]{10}|\d{9})$"}
        return {"oneOf": [text, {"type": "null"}], "description": description, "examples": ["982000123456789"]}


_MICROCHIP_DIGITS = (15, 9)
"""The lengths of the all-digit formats: ISO 11784, AVID."""
_FDX_A_LENGTH = 10
_SEPARATED = "[ .*-]?"
# The three formats as sent, one separator at most between two characters.
_MICROCHIP_SENT = (
    rf"(?:\d(?:{_SEPARATED}\d){{14}}|[0-9A-Fa-f](?:{_SEPARATED}[0-9A-Fa-f]){{9}}|\d(?:{_SEPARATED}\d){{8}})"
)
_MICROCHIP = re.compile(rf"[0-9A-Fa-f](?:{_SEPARATED}[0-9A-Fa-f])*", re.ASCII)
_MICROCHIP_SEPARATORS = re.compile(r"[ .*-]")


@dataclass(frozen=True)
class Code(PlainKind):
    """A code written on a thing (a vial's lot number, a rabies tag): trimmed of white space, then 1 to `max_length`
    characters, each one of `allowed` (ASCII characters and `a-b` ranges), or of `inner` (a space, say) between two
    of them; blank is null. `upper`: matched case-insensitively, stored and returned in upper case; else kept as
    written. `allowed_text` says in words which characters those are."""

    max_length: int
    allowed: str
    allowed_text: str
    inner: str = ""
    upper: bool = False
    description: str = ""
    example: str = ""
    nullable: bool = True
    operations: frozenset[Operation] = frozenset({Operation.DIFFER})

    def _core(self, *, shown: bool = False) -> str:
        """The code as a regular expression: its first and last characters of `allowed`, the others of `allowed`
        or `inner`. `shown`: as the service returns it (in upper case, for an `upper` code)."""
        allowed = character_class(self.allowed.upper() if shown and self.upper else self.allowed)
        if self.max_length == 1:
            return f"[{allowed}]"
        inner = character_class(self.inner) if self.inner else ""
        return f"[{allowed}](?:[{allowed}{inner}]{{0,{self.max_length - 2}}}[{allowed}])?"

    def read(self, value: Any, context: Context) -> tuple[Any, Problem | None]:
        text, problem = _code_text(self, value, context)
        if problem is not None or not text:
            return None, problem
        if not _code_pattern(self._core()).fullmatch(text):
            return None, f"must be {self.expected(context)}."
        return text.upper() if self.upper else text, None

    def expected(self, context: Context) -> str:
        return f"1 to {self.max_length} characters: {self.allowed_text}"

    def read_text(self, text: str, context: Context) -> tuple[Any, Problem | None]:
        return _read_present(self, text, context)

    def text_schema(self, context: SchemaContext) -> dict[str, Any]:
        return {"type": "string", "pattern": f"^[{_SPACE}]*{self._core()}[{_SPACE}]*$"}

    def schema(self, context: SchemaContext, *, sent: bool) -> dict[str, Any]:
        case = (
            "matched case-insensitively and returned in upper case"
            if self.upper
            else "kept as written (filters match it exactly, case included)"
        )
        description = self.description or (
            f"Trimmed of white space at both ends, then 1–{self.max_length} characters: {self.allowed_text}; {case}. "
            "Blank or null is null."
        )
        if sent:
            text: dict[str, Any] = {"type": "string", "pattern": f"^[{_SPACE}]*(?:{self._core()})?[{_SPACE}]*$"}
        else:
            text = {
                "type": "string",
                "minLength": 1,
                "maxLength": self.max_length,
                "pattern": f"^{self._core(shown=True)}$",
            }
        schema: dict[str, Any] = {"oneOf": [text, {"type": "null"}], "description": description}
        if self.example:
            schema["examples"] = [self.example]
        return schema


@functools.lru_cache(maxsize=16)
def _code_pattern(core: str) -> re.Pattern[str]:
    return re.compile(core, re.ASCII)


@dataclass(frozen=True)
class RecordId(PlainKind):
    """The id of a record of another resource (checked against it by the resource's references)."""

    description: str = ""
    operations: frozenset[Operation] = frozenset({Operation.DIFFER})

    def read(self, value: Any, context: Context) -> tuple[Any, Problem | None]:
        record_id = parse_record_id(value) if isinstance(value, str) else None
        if record_id is None:
            return None, "must be a record id (a UUID)."
        return record_id, None

    def show(self, stored: Any) -> Any:
        return str(stored)

    def expected(self, context: Context) -> str:
        return "a record id (a UUID)"

    def schema(self, context: SchemaContext, *, sent: bool) -> dict[str, Any]:
        return {**UUID_SCHEMA, "description": self.description} if self.description else dict(UUID_SCHEMA)


@dataclass(frozen=True)
class Embedded(PlainKind):
    """The record that the reference field `embeds` names, shown whole, as its own GET returns it. Read-only: the
    reference's resource reads, shows and describes it."""

    embeds: str

    def read(self, value: Any, context: Context) -> tuple[Any, Problem | None]:
        raise TypeError("an embedded record is read-only")

    def expected(self, context: Context) -> str:
        raise TypeError("an embedded record is read-only")

    def schema(self, context: SchemaContext, *, sent: bool) -> dict[str, Any]:
        raise TypeError("an embedded record is described by its own resource")


def nullable_schema(schema: dict[str, Any]) -> dict[str, Any]:
    return _nullable(schema)


def record_uuid(value: Any) -> uuid.UUID:
    """A stored id as a UUID, whichever form the driver returned it in."""
    return value if isinstance(value, uuid.UUID) else uuid_of_hex(value)


__all__ = [
    "DAY_MS",
    "MAX_SAFE_INTEGER",
    "PET_TYPES",
    "Choices",
    "Code",
    "Context",
    "Email",
    "Embedded",
    "Instant",
    "Kind",
    "Listed",
    "Microchip",
    "Name",
    "Operation",
    "Prose",
    "RecordId",
    "SchemaContext",
    "WholeNumber",
    "pet_type",
]
