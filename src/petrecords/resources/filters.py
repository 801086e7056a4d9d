"""The kinds of list filter a resource declares: which query parameters each reads, the conditions it gives
the store, and how it describes itself in the OpenAPI document."""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Protocol

from petrecords.auth import user_or_group
from petrecords.openapi import parameter
from petrecords.resources.fields import (
    MAX_SAFE_INTEGER,
    USER_OR_GROUP,
    USER_OR_GROUP_SCHEMA,
    UUID_SCHEMA,
    Context,
    Instant,
    Kind,
    RecordId,
    SchemaContext,
    WholeNumber,
    character_class,
)
from petrecords.store.base import Condition, Operator
from petrecords.text import has_forbidden_pattern_characters, match_key

MAX_IDS = 1000
MAX_PATTERN_LENGTH = 200
SEVERAL = "Comma-separated (as documented here) or repeated."
PATTERNS = "`%` and `_` are wildcards as in SQL LIKE; `\\%`, `\\_` and `\\\\` match themselves."

Values = Mapping[str, list[str]]
"""The query's parameters: name -> every value given (a repeated name has several)."""
Errors = dict[str, list[str]]


class Filter(Protocol):
    """A list filter: the query parameters it reads, and what they mean."""

    @property
    def parameters(self) -> tuple[str, ...]: ...

    @property
    def several(self) -> bool:
        """Whether its parameter takes several values (comma-separated or repeated)."""
        ...

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns of the resource's table that it compares."""
        ...

    def read(self, values: Values, errors: Errors, context: Context) -> list[Condition]:
        """The conditions of the parameters given (absent ones give none); problems go into `errors`."""
        ...

    def document(self, context: SchemaContext) -> list[dict[str, Any]]:
        """The OpenAPI parameters it reads."""
        ...


@dataclass(frozen=True)
class OneParameter:
    """A filter of one query parameter."""

    parameter: str

    @property
    def parameters(self) -> tuple[str, ...]:
        return (self.parameter,)

    def given(self, values: Values) -> str | None:
        """The parameter's value (the parser has already refused it given twice), or None when absent."""
        given = values.get(self.parameter)
        return given[0] if given else None


@dataclass(frozen=True)
class OneColumn(OneParameter):
    """A filter of one query parameter that compares one column."""

    column: str

    @property
    def columns(self) -> tuple[str, ...]:
        return (self.column,)


def split_values(values: Sequence[str]) -> list[str]:
    return [part.strip() for value in values for part in value.split(",")]


@dataclass(frozen=True)
class AnyOf:
    """`parameter` names one or more values of `column` (comma-separated or repeated), read as `kind` reads them."""

    parameter: str
    column: str
    kind: Kind
    description: str
    several = True

    @property
    def parameters(self) -> tuple[str, ...]:
        return (self.parameter,)

    @property
    def columns(self) -> tuple[str, ...]:
        return (self.column,)

    def read(self, values: Values, errors: Errors, context: Context) -> list[Condition]:
        if self.parameter not in values:
            return []
        items = split_values(values[self.parameter])
        read = [self.kind.read_text(item, context) for item in items]
        if len(items) > MAX_IDS or any(problem is not None for _, problem in read):
            errors[self.parameter] = [self._expected(context)]
            return []
        return [Condition((self.column,), Operator.IN, tuple(dict.fromkeys(value for value, _ in read)))]

    def _expected(self, context: Context) -> str:
        return f"must be {MAX_IDS} or fewer values, each {self.kind.expected(context)}, comma-separated or repeated."

    def document(self, context: SchemaContext) -> list[dict[str, Any]]:
        items = self.kind.text_schema(context)
        schema: dict[str, Any] = {"type": "array", "minItems": 1, "maxItems": MAX_IDS, "items": items}
        return [parameter(self.parameter, schema, f"{self.description} {SEVERAL}", several=True)]


@dataclass(frozen=True)
class Owner:
    """`ownerId`: only this owner's records (a user, or `group:NAME`). For a non-admin, an owner that is neither
    them nor one of their groups matches only what it shared with them."""

    column: str
    parameter: str = "ownerId"
    several = False

    @property
    def parameters(self) -> tuple[str, ...]:
        return (self.parameter,)

    @property
    def columns(self) -> tuple[str, ...]:
        return (self.column,)

    def owner(self, values: Values, errors: Errors) -> str | None:
        given = values.get(self.parameter)
        if not given:
            return None
        owner = user_or_group(given[0].strip())
        if owner is None:
            errors[self.parameter] = [f"must be {USER_OR_GROUP}."]
        return owner

    def read(self, values: Values, errors: Errors, context: Context) -> list[Condition]:
        # The owner is applied with the caller's permissions (see listing.py), not as a plain condition.
        return []

    def document(self, context: SchemaContext) -> list[dict[str, Any]]:
        return [
            parameter(
                self.parameter,
                USER_OR_GROUP_SCHEMA,
                "Only this owner: a user, or group:NAME. For a non-admin, an owner that is neither them nor one of "
                "their groups matches only what it shared with them.",
            )
        ]


SCOPES = ("owned", "shared")


@dataclass(frozen=True)
class Scope:
    """`access`: only the caller's own records (`owned`), or only those shared with them (`shared`). Applied with
    the caller's permissions (see resources.access), not as a plain condition."""

    parameter: str = "access"
    several = False

    @property
    def parameters(self) -> tuple[str, ...]:
        return (self.parameter,)

    @property
    def columns(self) -> tuple[str, ...]:
        return ()

    def scope(self, values: Values, errors: Errors) -> str | None:
        given = values.get(self.parameter)
        if not given:
            return None
        if given[0].strip().lower() not in SCOPES:
            errors[self.parameter] = ["must be owned (only your own records) or shared (only those shared with you)."]
            return None
        return given[0].strip().lower()

    def read(self, values: Values, errors: Errors, context: Context) -> list[Condition]:
        return []

    def document(self, context: SchemaContext) -> list[dict[str, Any]]:
        return [
            parameter(
                self.parameter,
                {"type": "string", "enum": list(SCOPES)},
                "`owned`: only the caller's own records; `shared`: only those shared with the caller (pet shares). "
                "Both when not given.",
            )
        ]


def like_pattern(user_pattern: str, *, substring: bool) -> str:
    """A LIKE pattern (escape `\\`) over match keys (petrecords.text.match_key) from the API's pattern syntax.

    `%` and `_` are wildcards; `\\%`, `\\_` and `\\\\` stand for themselves; any other backslash is literal.
    """
    user_pattern = unicodedata.normalize("NFC", user_pattern)
    out: list[str] = []
    index = 0
    while index < len(user_pattern):
        char = user_pattern[index]
        if char == "\\" and index + 1 < len(user_pattern) and user_pattern[index + 1] in "%_\\":
            out.append("\\" + user_pattern[index + 1])
            index += 2
            continue
        out.append("\\\\" if char == "\\" else char if char in "%_" else match_key(char))
        index += 1
    pattern = "".join(out)
    return f"%{pattern}%" if substring else pattern


@dataclass(frozen=True)
class Matches(OneParameter):
    """`parameter` is a pattern that the text of `columns` (match keys) must match: the whole text, or (for
    `substring`) a part of it; with several columns, any one of them. `kept` are the control characters that
    the text may hold (free text keeps line feeds and tabs); a pattern with any other is refused."""

    columns: tuple[str, ...]
    substring: bool
    description: str
    kept: str = ""
    several = False

    def read(self, values: Values, errors: Errors, context: Context) -> list[Condition]:
        if (raw := self.given(values)) is None:
            return []
        if len(raw) > MAX_PATTERN_LENGTH:
            errors[self.parameter] = [f"must be at most {MAX_PATTERN_LENGTH} characters long."]
            return []
        if has_forbidden_pattern_characters(raw, kept=self.kept):
            errors[self.parameter] = [f"must not contain control characters{self._but()} (no stored text does)."]
            return []
        return [Condition(self.columns, Operator.LIKE, (like_pattern(raw, substring=self.substring),))]

    def _but(self) -> str:
        named = {"\t": "tab", "\n": "line feed"}
        return " other than " + " and ".join(named.get(char, repr(char)) for char in self.kept) if self.kept else ""

    def document(self, context: SchemaContext) -> list[dict[str, Any]]:
        refused = "".join(chr(point) for point in CONTROL_POINTS if chr(point) not in self.kept)
        schema = {"type": "string", "maxLength": MAX_PATTERN_LENGTH, "pattern": f"^[^{character_class(refused)}]*$"}
        return [parameter(self.parameter, schema, f"{self.description} {PATTERNS}")]


CONTROL_POINTS = (*range(0x20), *range(0x7F, 0xA0))


BOOLEAN_TEXT = ("true", "false")


@dataclass(frozen=True)
class HasValue(OneColumn):
    """`parameter` is true (only the records whose `column` holds a value) or false (only those where it is null)."""

    description: str
    several = False

    def read(self, values: Values, errors: Errors, context: Context) -> list[Condition]:
        if (given := self.given(values)) is None:
            return []
        if given.strip().lower() not in BOOLEAN_TEXT:
            errors[self.parameter] = ["must be true or false."]
            return []
        # Written with the comparisons the store has: every stored value is at least the least safe integer, and none
        # is after the greatest (the column holds a number: days, milliseconds).
        if given.strip().lower() == "true":
            return [Condition((self.column,), Operator.AT_LEAST, (-MAX_SAFE_INTEGER,))]
        return [Condition((self.column,), Operator.AFTER_OR_NULL, (MAX_SAFE_INTEGER,))]

    def document(self, context: SchemaContext) -> list[dict[str, Any]]:
        return [parameter(self.parameter, {"type": "boolean"}, self.description)]


@dataclass(frozen=True)
class Compared(OneColumn):
    """`parameter` is a value of `kind` (read as a query parameter: kinds.Kind.read_text) that `column` must be
    `operator`: a bound, an exact value, or one that the stored value differs from (null included). `keyed`: the
    column holds a text field's match keys (Kind.key_column), and the text is compared by its key: case ignored."""

    kind: Kind
    operator: Operator
    description: str
    keyed: bool = False
    several = False

    def read(self, values: Values, errors: Errors, context: Context) -> list[Condition]:
        if (given := self.given(values)) is None:
            return []
        value, problem = self.kind.read_text(given, context)
        if problem is None and value is None:
            # Blank text, which a body may send for null: no value to compare with.
            problem = f"must be {self.kind.expected(context)}."
        if problem is not None:
            errors[self.parameter] = [problem]
            return []
        if self.keyed:
            value = match_key(value)
        if self.operator is Operator.DIFFERS:
            return [Condition((self.column,), self.operator, (value,))]
        return [_bound_condition(self.column, self.operator, value)]

    def document(self, context: SchemaContext) -> list[dict[str, Any]]:
        return [parameter(self.parameter, self.kind.text_schema(context), self.description)]


def _bound_condition(column: str, operator: Operator, value: Any) -> Condition:
    """A comparison with a value that may fall between two stored ones: a moment with a fraction of a
    millisecond, whose stored counterparts are whole."""
    if not isinstance(value, Fraction):
        return Condition((column,), operator, (value,))
    whole = value.denominator == 1
    if operator in (Operator.AT_LEAST, Operator.BELOW):
        # >= x.4 is >= x+1, and so is < x.4 (< x+1): both take the next whole millisecond.
        return Condition((column,), operator, (math.ceil(value),))
    if operator is Operator.AT_MOST:
        return Condition((column,), operator, (math.floor(value),))
    if not whole:
        return Condition((column,), Operator.NEVER, ())
    return Condition((column,), operator, (int(value),))


ANY_MOMENT = Instant(-(2**62))
"""The kind of a date-time a list compares stored ones with: any RFC 3339 date-time."""
ANY_NUMBER = WholeNumber(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER)


def time_bound(parameter: str, column: str, operator: Operator, description: str) -> Compared:
    """`parameter` is an RFC 3339 date-time (`Z` or an offset); `column` (epoch milliseconds) must be `operator`
    it. Stored times are whole milliseconds, so a bound between two of them is read exactly."""
    return Compared(parameter, column, ANY_MOMENT, operator, description)


def number_bound(parameter: str, column: str, operator: Operator, description: str) -> Compared:
    """`parameter` is a whole number; `column` must be `operator` it."""
    return Compared(parameter, column, ANY_NUMBER, operator, description)


def ids_filter(column: str = "id") -> AnyOf:
    return AnyOf("ids", column, RecordId(), "Only these record ids.")


ID_ITEMS_SCHEMA = UUID_SCHEMA
