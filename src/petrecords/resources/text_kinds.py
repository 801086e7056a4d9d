"""The kinds of field that hold text a person writes or picks: names, prose, listed values, e-mail addresses,
users or groups."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace
from typing import Any

from petrecords.auth import user_or_group
from petrecords.resources.field_kind import (
    EMAIL_SCHEMA,
    PET_TYPES,
    SPACE_CLASS,
    USER_OR_GROUP,
    USER_OR_GROUP_SCHEMA,
    Choices,
    Comparison,
    Context,
    PlainKind,
    Problem,
    SchemaContext,
    character_class,
    nullable_schema,
)
from petrecords.store.base import SortKey
from petrecords.text import (
    BIDI_CONTROLS,
    CONTROL_CHARACTERS,
    INVISIBLE_CHARACTERS,
    PROSE_CONTROLS,
    WHITE_SPACE,
    clean_name,
    clean_prose,
)
from petrecords.values import normalize_email

_INVISIBLE_ONLY = {"pattern": f"^[{SPACE_CLASS}{character_class(INVISIBLE_CHARACTERS)}]*$"}
_VISIBLE_TEXT = re.compile(f"[^{WHITE_SPACE}{INVISIBLE_CHARACTERS}]")
_INVISIBLE_ONLY_TEXT = {"type": "string", **_INVISIBLE_ONLY}


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
    comparisons: frozenset[Comparison] = frozenset({Comparison.MATCH})

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
        core = f"[^{SPACE_CLASS}{forbidden}](?:[^{forbidden}]{{0,{self.max_length - 2}}}[^{SPACE_CLASS}{forbidden}])?"
        # A name as sent may carry white space at both ends, so its length is only known after trimming; not
        # being made only of invisible characters is a second pattern, which a regular expression without
        # lookahead cannot combine with the first.
        schema: dict[str, Any] = {"type": "string"}
        if sent:
            schema["pattern"] = f"^[{SPACE_CLASS}]*{core}[{SPACE_CLASS}]*$"
        else:
            schema.update(minLength=1, maxLength=self.max_length, pattern=f"^{core}$")
        schema.update({"not": _INVISIBLE_ONLY, "description": self.description(), "examples": [self.example]})
        if not self.nullable:
            return schema
        if sent:
            # As sent, blank text stands for null as well.
            return {"oneOf": [schema, _INVISIBLE_ONLY_TEXT, {"type": "null"}], "description": self.description()}
        return nullable_schema(schema)


@dataclass(frozen=True)
class Prose(PlainKind):
    """Free text or null: trimmed; empty or blank is null; at most `max_length` code points; no control
    characters but line feed and tab. Searched by its key (`key_column`) when it has one. `meaning`: what the text
    is, before its rules in the document."""

    max_length: int
    key_column: str | None = None
    nullable: bool = True
    meaning: str = ""
    comparisons: frozenset[Comparison] = frozenset({Comparison.MATCH})
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
        core = f"[^{SPACE_CLASS}{forbidden}](?:[^{forbidden}]{{0,{self.max_length - 2}}}[^{SPACE_CLASS}{forbidden}])?"
        # As sent, white space at both ends does not count, and blank text stands for null.
        pattern = f"^[{SPACE_CLASS}]*(?:{core})?[{SPACE_CLASS}]*$" if sent else f"^{core}$"
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
    comparisons: frozenset[Comparison] = frozenset({Comparison.DIFFER})

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
        return nullable_schema(schema) if self.nullable else schema

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
    comparisons: frozenset[Comparison] = frozenset({Comparison.DIFFER})

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
    comparisons: frozenset[Comparison] = frozenset({Comparison.DIFFER})

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
