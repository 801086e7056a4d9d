"""The kinds of field that hold a number: whole numbers, instants, calendar dates, and true or false."""

from __future__ import annotations

import datetime
import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from petrecords.resources.field_kind import (
    DATE_TIME_INPUT_PATTERN,
    DATE_TIME_INPUT_SCHEMA,
    DAY_MS,
    LATEST_MS,
    MAX_SAFE_INTEGER,
    TIMESTAMP_SCHEMA,
    Comparison,
    Context,
    PlainKind,
    Problem,
    SchemaContext,
    nullable_schema,
)
from petrecords.values import (
    format_timestamp,
    parse_datetime_ms,
)

_INTEGER_TEXT = re.compile(r"-?[0-9]{1,16}", re.ASCII)
# A `+` in a query string decodes to a space; `... 01:00` is read as the offset `+01:00` it was.
_SPACE_FOR_PLUS = re.compile(r" (\d{2}:\d{2})$", re.ASCII)


@dataclass(frozen=True)
class WholeNumber(PlainKind):
    """An integer from `minimum` to `maximum`. A JSON number that is a whole number is one, however it is
    written (`365.0`, `3.65e2`), as JSON Schema counts it; one with a non-zero fraction is refused."""

    minimum: int
    maximum: int
    description: str = ""
    comparisons: frozenset[Comparison] = frozenset({Comparison.BOUND})

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
    comparisons: frozenset[Comparison] = frozenset({Comparison.BOUND})

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
        return nullable_schema(schema) if self.nullable else schema


@dataclass(frozen=True)
class CalendarDate(PlainKind):
    """A calendar date, `YYYY-MM-DD` (RFC 3339 full-date), from `earliest` to today in UTC (when `until_today`):
    stored as days since 1970-01-01, so that it sorts and compares as a number."""

    earliest: str = "1900-01-01"
    until_today: bool = True
    description: str = ""
    nullable: bool = False
    comparisons: frozenset[Comparison] = frozenset({Comparison.BOUND})

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
        return nullable_schema(schema) if self.nullable else schema


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
    comparisons: frozenset[Comparison] = frozenset({Comparison.DIFFER})

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
        return nullable_schema(schema) if self.nullable else schema
