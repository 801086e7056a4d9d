"""The OpenAPI document's schemas accept exactly the values the service accepts.

Schema-driven fuzzing (tests/fuzz) holds the service to its document both ways: a value the schema admits
must be accepted, one it rejects must be refused. These properties check the hand-written patterns against
the service's own rules directly, with the validator schemathesis uses.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import jsonschema_rs
import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from petrecords.config import Settings
from petrecords.errors import ValidationFailed
from petrecords.pets import NAME_MAX_LENGTH, PETS
from petrecords.registry import RESOURCES
from petrecords.resources.document import build_openapi
from petrecords.resources.fields import Context, PetTypes
from petrecords.resources.listing import parse_list_query
from petrecords.resources.requests import EntityTags, check_idempotency_key
from petrecords.text import WHITE_SPACE, clean_name
from petrecords.values import normalize_email

PROPERTY_SETTINGS = settings(max_examples=300, deadline=None)
CONTROLS = "".join(chr(c) for c in [*range(0x20), *range(0x7F, 0xA0)])
INVISIBLE = "\u200b\ufeff\u180e\u2060\u3164\u2800\U000e0020\U0001d173\ufe0f\u00ad"
BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f"
PET_TYPES = PetTypes(["Dog", "Cat"])
SORT_FIELD_NAMES = PETS.sort_fields


@functools.cache
def _document() -> dict[str, Any]:
    raw = build_openapi(Settings(data_dir=Path("unused"), auth_secret="x" * 40), RESOURCES)
    decoded: dict[str, Any] = msgspec.json.decode(raw)
    return decoded


def _validator(schema: dict[str, Any]) -> jsonschema_rs.Validator:
    return jsonschema_rs.validator_for(schema)


def _parameter(path: str, method: str, name: str) -> dict[str, Any]:
    document = _document()
    operation = document["paths"][path][method]
    for parameter in [*document["paths"][path].get("parameters", []), *operation.get("parameters", [])]:
        if parameter["name"] == name:
            schema: dict[str, Any] = parameter["schema"]
            return schema
    raise LookupError(name)


def _text(*interesting: str, max_size: int = 30) -> st.SearchStrategy[str]:
    """Text that often holds the characters a rule is about, around ordinary ones."""
    return st.text(st.sampled_from("".join(interesting)) | st.characters(codec="utf-8"), max_size=max_size)


names = st.one_of(
    _text(WHITE_SPACE, CONTROLS, "Rex é"),
    _text(WHITE_SPACE, INVISIBLE, BIDI, "x"),
    _text(WHITE_SPACE, INVISIBLE),
    st.builds(
        lambda pad, core, end: pad + core + end,
        _text(WHITE_SPACE, max_size=3),
        st.text("ab", min_size=98, max_size=102),
        _text(WHITE_SPACE, max_size=3),
    ),
)


@PROPERTY_SETTINGS
@given(value=names)
def test_name_as_sent(value: str) -> None:
    schema = _document()["components"]["schemas"]["PetWrite"]["properties"]["name"]
    assert _validator(schema).is_valid(value) == (clean_name(value, max_length=NAME_MAX_LENGTH)[0] is not None)


@PROPERTY_SETTINGS
@given(value=names)
def test_name_as_stored(value: str) -> None:
    schema = _document()["components"]["schemas"]["Pet"]["properties"]["name"]
    assert _validator(schema).is_valid(value) == (clean_name(value, max_length=NAME_MAX_LENGTH)[0] == value)


@PROPERTY_SETTINGS
@given(
    value=st.emails().map(str)
    | _text("@.-_+aZ9", max_size=20)
    | st.text("a", min_size=250, max_size=260).map(lambda s: s[:-7] + "@ex.com")
)
def test_email(value: str) -> None:
    schema = _document()["components"]["schemas"]["Pet"]["properties"]["ownerId"]
    assert _validator(schema).is_valid(value) == (normalize_email(value) is not None)


entity_tags = st.one_of(
    _text(' \t,"W/*\x21', max_size=20).filter(lambda s: all(ord(c) < 0x100 for c in s)),
    st.lists(
        st.builds(
            lambda weak, tag: ("W/" if weak else "") + f'"{tag}"',
            st.booleans(),
            st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF), max_size=5),
        ),
        min_size=1,
        max_size=3,
    ).map(", ".join),
)


@PROPERTY_SETTINGS
@given(value=entity_tags)
def test_entity_tags(value: str) -> None:
    for path, method, header in (
        ("/v1/pets/{petId}", "put", "If-Match"),
        ("/v1/pets/{petId}", "delete", "If-Match"),
        ("/v1/pets/{petId}", "get", "If-None-Match"),
    ):
        try:
            EntityTags.parse(header, value)
            accepted = True
        except ValidationFailed:
            accepted = False
        assert _validator(_parameter(path, method, header)).is_valid(value) == accepted, (header, value)


@PROPERTY_SETTINGS
@given(value=_text(" ~\x7f\x1f", max_size=10) | st.text("k", min_size=254, max_size=256))
def test_idempotency_key(value: str) -> None:
    """HTTP drops white space at both ends of a header value, so the document admits none there."""
    try:
        check_idempotency_key(value)
        accepted = value == value.strip(" ")
    except ValidationFailed:
        accepted = False
    assert _validator(_parameter("/v1/pets", "post", "Idempotency-Key")).is_valid(value) == accepted


@PROPERTY_SETTINGS
@given(
    value=_text(CONTROLS, "%_\\a", max_size=10) | st.text("a", min_size=199, max_size=201),
    name=st.sampled_from(["name", "search"]),
)
def test_list_patterns(value: str, name: str) -> None:
    assert _validator(_parameter("/v1/pets", "get", name)).is_valid(value) == _query_accepted(name, value)


def _query_accepted(name: str, value: str) -> bool:
    try:
        parse_list_query(
            PETS,
            [(name, value)],
            context=Context(pet_types=PET_TYPES, now_ms=0),
            default_page_size=20,
            max_page_size=100,
        )
    except ValidationFailed:
        return False
    return True


@PROPERTY_SETTINGS
@given(
    fields=st.lists(
        st.sampled_from([prefix + field for field in SORT_FIELD_NAMES for prefix in ("", "-")]), min_size=1, max_size=4
    )
)
def test_sort(fields: list[str]) -> None:
    """Sent as the document serializes it: comma-separated. (An empty list would be no parameter at all.)"""
    schema = _parameter("/v1/pets", "get", "sort")
    assert _validator(schema).is_valid(fields) == _query_accepted("sort", ",".join(fields))


def _two_digits(low: int, high: int) -> st.SearchStrategy[str]:
    return st.integers(low, high).map(lambda n: f"{n:02d}")


date_times = st.builds(
    lambda year, month, day, hour, minute, second, fraction, zone: (
        f"{year}-{month}-{day}T{hour}:{minute}:{second}{fraction}{zone}"
    ),
    st.sampled_from(["0000", "0001", "1970", "2024", "2026", "9999"]),
    _two_digits(0, 13),
    _two_digits(0, 32),
    _two_digits(0, 24),
    _two_digits(0, 60),
    _two_digits(0, 61),
    st.sampled_from(["", "."]).flatmap(
        lambda dot: st.text("0123456789", min_size=len(dot), max_size=11).map(lambda d: dot + d if dot else "")
    ),
    st.sampled_from(["Z", "z"])
    | st.builds(
        lambda sign, hours, minutes: f"{sign}{hours}:{minutes}",
        st.sampled_from("+-"),
        _two_digits(0, 25),
        _two_digits(0, 60),
    ),
)


@PROPERTY_SETTINGS
@given(value=date_times, name=st.sampled_from(["createdFrom", "createdTo", "modifiedFrom", "modifiedTo"]))
def test_date_times(value: str, name: str) -> None:
    validator = jsonschema_rs.validator_for(_parameter("/v1/pets", "get", name), validate_formats=True)
    assert validator.is_valid(value) == _query_accepted(name, value)
