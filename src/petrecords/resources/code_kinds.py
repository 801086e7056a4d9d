"""The kinds of field that hold a code or an id: microchips, codes of a pattern, record ids, and embedded
records."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from petrecords.resources.field_kind import (
    SPACE_CLASS,
    UUID_SCHEMA,
    Comparison,
    Context,
    Kind,
    PlainKind,
    Problem,
    SchemaContext,
    character_class,
)
from petrecords.text import WHITE_SPACE
from petrecords.values import parse_record_id


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
    comparisons: frozenset[Comparison] = frozenset({Comparison.DIFFER})

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
        return {"type": "string", "pattern": f"^[{SPACE_CLASS}]*{_MICROCHIP_SENT}[{SPACE_CLASS}]*$"}

    def schema(self, context: SchemaContext, *, sent: bool) -> dict[str, Any]:
        description = self.description or (
            "A transponder code: 15 digits (ISO 11784), 10 characters 0-9 and A-F (FDX-A, returned in upper case) or "
            "9 digits (AVID). When sent, one space, dot, hyphen or * between two of its characters is removed, and "
            "blank is null. Unique among the pets that exist."
        )
        if sent:
            text: dict[str, Any] = {
                "type": "string",
                "pattern": f"^[{SPACE_CLASS}]*(?:{_MICROCHIP_SENT})?[{SPACE_CLASS}]*$",
            }
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
    comparisons: frozenset[Comparison] = frozenset({Comparison.DIFFER})

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
        if not _code_pattern(self).fullmatch(text):
            return None, f"must be {self.expected(context)}."
        return text.upper() if self.upper else text, None

    def expected(self, context: Context) -> str:
        return f"1 to {self.max_length} characters: {self.allowed_text}"

    def read_text(self, text: str, context: Context) -> tuple[Any, Problem | None]:
        return _read_present(self, text, context)

    def text_schema(self, context: SchemaContext) -> dict[str, Any]:
        return {"type": "string", "pattern": f"^[{SPACE_CLASS}]*{self._core()}[{SPACE_CLASS}]*$"}

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
            pattern = f"^[{SPACE_CLASS}]*(?:{self._core()})?[{SPACE_CLASS}]*$"
            text: dict[str, Any] = {"type": "string", "pattern": pattern}
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
def _code_pattern(code: Code) -> re.Pattern[str]:
    """The pattern a code's values must match, written once for each code: its character classes take longer to
    write than a value takes to check (a dose with a lot number and a rabies tag wrote four at every create)."""
    return re.compile(code._core(), re.ASCII)


@dataclass(frozen=True)
class RecordId(PlainKind):
    """The id of a record of another resource (checked against it by the resource's references)."""

    description: str = ""
    comparisons: frozenset[Comparison] = frozenset({Comparison.DIFFER})

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
