"""The OpenAPI document's schemas accept exactly the values the service accepts.

Schema-driven fuzzing (tests/fuzz) holds the service to its document both ways: a value the schema admits
must be accepted, one it rejects must be refused. These properties check the hand-written patterns against
the service's own rules directly, with the validator schemathesis uses.
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path
from typing import Any

import jsonschema_rs
import msgspec
from hypothesis import given
from hypothesis import strategies as st

from petrecords.app import openapi_document
from petrecords.auth import user_or_group
from petrecords.config import Settings
from petrecords.errors import ValidationFailed
from petrecords.pets import PETS
from petrecords.registry import RESOURCES
from petrecords.resources.declaration import Resource
from petrecords.resources.fields import LATEST_MS, Choices, Context, Name, Prose
from petrecords.resources.fields import PET_TYPES as PET_TYPES_SETTING
from petrecords.resources.filters import MAX_IDS, MAX_SAFE_INTEGER
from petrecords.resources.listing import parse_list_query
from petrecords.resources.requests import EntityTags, check_idempotency_key
from petrecords.text import WHITE_SPACE, clean_name, clean_prose
from petrecords.vaccinations import EARLIEST_MS, PET_VACCINATIONS
from petrecords.vaccines import VACCINES
from petrecords.values import format_timestamp, normalize_email

MISSING = "01890a5d-ac96-774b-bcce-b302099a8057"
CONTROLS = "".join(chr(c) for c in [*range(0x20), *range(0x7F, 0xA0)])
INVISIBLE = "\u200b\ufeff\u180e\u2060\u3164\u2800\U000e0020\U0001d173\ufe0f\u00ad"
BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f"
PET_TYPES = Choices(["Dog", "Cat"])
NOW_MS = 1_795_305_600_000  # 2026-11-22T00:00:00Z, the service's clock for the rules that depend on it
RESOURCES_BY_PATH = {resource.path: resource for resource in RESOURCES.resources}


@functools.cache
def _document() -> dict[str, Any]:
    # The application made for the document writes its keys in the data directory: a directory of its own.
    raw = openapi_document(
        Settings(data_dir=Path(tempfile.mkdtemp(prefix="petrecords-document-")), auth_secret="x" * 40)
    )
    decoded: dict[str, Any] = msgspec.json.decode(raw)
    return decoded


def _validator(schema: dict[str, Any], *, formats: bool = False) -> jsonschema_rs.Validator:
    return jsonschema_rs.validator_for(schema, validate_formats=formats)


def _property(schema: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = _document()["components"]["schemas"][schema]["properties"][name]
    return found


def _kind_of(resource: Resource, name: str) -> Any:
    return resource.field_named(name).kind


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


def _padded(core: st.SearchStrategy[str], *, max_size: int = 3) -> st.SearchStrategy[str]:
    """`core` with white space at both ends, which a body's value may carry."""
    return st.builds(
        lambda pad, middle, end: pad + middle + end,
        _text(WHITE_SPACE, max_size=max_size),
        core,
        _text(WHITE_SPACE, max_size=max_size),
    )


names = st.one_of(
    _text(WHITE_SPACE, CONTROLS, "Rex é"),
    _text(WHITE_SPACE, INVISIBLE, BIDI, "x"),
    _text(WHITE_SPACE, INVISIBLE),
    _padded(st.text("ab", min_size=98, max_size=102)),
)


NAMED = st.sampled_from([PETS, VACCINES])


@given(value=names, resource=NAMED)
def test_name_as_sent(value: str, resource: Resource) -> None:
    schema = _property(f"{resource.schema_name}Write", "name")
    kind: Name = _kind_of(resource, "name")
    assert _validator(schema).is_valid(value) == (clean_name(value, max_length=kind.max_length)[0] is not None)


@given(value=names, resource=NAMED)
def test_name_as_stored(value: str, resource: Resource) -> None:
    schema = _property(resource.schema_name, "name")
    kind: Name = _kind_of(resource, "name")
    assert _validator(schema).is_valid(value) == (clean_name(value, max_length=kind.max_length)[0] == value)


PROSE_FIELDS = st.sampled_from(
    [
        (VACCINES, "description"),
        (PET_VACCINATIONS, "notes"),
        (PET_VACCINATIONS, "clinic"),
        (PET_VACCINATIONS, "statusReason"),
    ]
)
NEAR_THE_LIMIT = st.sampled_from([300, 500, 1000, 2000]).flatmap(
    lambda limit: _padded(st.text("ab\n\t", min_size=limit - 2, max_size=limit + 2))
)
prose = st.one_of(
    _text(WHITE_SPACE, CONTROLS, "ab é\n\t"),
    _text(WHITE_SPACE, "\n\t"),
    _text(WHITE_SPACE, INVISIBLE, BIDI, "x"),
    NEAR_THE_LIMIT,
)


@given(value=prose | st.none(), field=PROSE_FIELDS)
def test_prose_as_sent(value: str | None, field: tuple[Resource, str]) -> None:
    """Text or null; blank text stands for null."""
    resource, name = field
    kind: Prose = _kind_of(resource, name)
    schema = _property(f"{resource.schema_name}Write", name)
    assert _validator(schema).is_valid(value) == (clean_prose(value, max_length=kind.max_length)[1] is None)


@given(value=prose | st.none(), field=PROSE_FIELDS)
def test_prose_as_stored(value: str | None, field: tuple[Resource, str]) -> None:
    resource, name = field
    kind: Prose = _kind_of(resource, name)
    schema = _property(resource.schema_name, name)
    cleaned, problem = clean_prose(value, max_length=kind.max_length)
    assert _validator(schema).is_valid(value) == (problem is None and cleaned == value)


@given(
    value=st.integers(-3, 5)
    | st.integers(36_495, 36_505)
    | st.integers()
    | st.sampled_from([1, 365, 36_500, 36_501]).map(float)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.booleans()
    | st.none()
    | st.text(max_size=3)
)
def test_duration(value: object) -> None:
    """A whole number from 1 to 36500, however it is written: JSON Schema reads 365.0 as the integer 365, and so
    does the service (contract v3 section 10.1)."""
    schema = _property("VaccineWrite", "duration")
    accepted = value is not None and _kind_of(VACCINES, "duration").read(value, _context())[1] is None
    assert _validator(schema).is_valid(value) == accepted


def _context() -> Context:
    return Context({PET_TYPES_SETTING: PET_TYPES}, now_ms=NOW_MS)


@given(
    value=st.emails().map(str)
    | _text("@.-_+aZ9", max_size=20)
    | st.text("a", min_size=250, max_size=260).map(lambda s: s[:-7] + "@ex.com")
)
def test_email(value: str) -> None:
    """A user's e-mail, where no group may stand instead (an owner may be `group:NAME`: test_owner)."""
    schema = _property("Pet", "createdBy")
    assert "oneOf" not in schema
    assert _validator(schema).is_valid(value) == (normalize_email(value) is not None)


@given(
    value=st.emails().map(str)
    | _text("group:/aZ9.@-", max_size=14).map(lambda s: "group:" + s)
    | st.text("a", min_size=98, max_size=102).map(lambda s: "group:/" + s)
    | _text("group:@.aZ", max_size=20)
)
def test_owner(value: str) -> None:
    """An owner is a user or `group:NAME`, in a body and in the `ownerId` filter alike."""
    accepted = user_or_group(value) is not None
    assert _validator(_property("Pet", "ownerId")).is_valid(value) == accepted, value
    if value == value.strip():  # a query's value is read trimmed
        assert _validator(_parameter("/v1/pets", "get", "ownerId")).is_valid(value) == accepted, value


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


@given(value=_text(" ~\x7f\x1f", max_size=10) | st.text("k", min_size=254, max_size=256))
def test_idempotency_key(value: str) -> None:
    """HTTP drops white space at both ends of a header value, so the document admits none there."""
    try:
        check_idempotency_key(value)
        accepted = value == value.strip(" ")
    except ValidationFailed:
        accepted = False
    assert _validator(_parameter("/v1/pets", "post", "Idempotency-Key")).is_valid(value) == accepted


@given(
    value=_text(CONTROLS, "%_\\a", max_size=10) | st.text("a", min_size=199, max_size=201),
    name=st.sampled_from(["name", "search"]),
    path=st.sampled_from(["/v1/pets", "/v1/vaccines"]),
)
def test_list_patterns(value: str, name: str, path: str) -> None:
    assert _validator(_parameter(path, "get", name)).is_valid(value) == _query_accepted(name, value, path)


def _query_accepted(name: str, value: str, path: str = "/v1/pets") -> bool:
    try:
        parse_list_query(
            RESOURCES_BY_PATH[path],
            [(name, value)],
            context=Context({PET_TYPES_SETTING: PET_TYPES}, now_ms=0),
            default_page_size=20,
            max_page_size=100,
        )
    except ValidationFailed:
        return False
    return True


@given(data=st.data(), path=st.sampled_from(sorted(RESOURCES_BY_PATH)))
def test_sort(data: st.DataObject, path: str) -> None:
    """Sent as the document serializes it: comma-separated. (An empty list would be no parameter at all.)"""
    names = RESOURCES_BY_PATH[path].sort_fields
    fields = data.draw(
        st.lists(st.sampled_from([prefix + field for field in names for prefix in ("", "-")]), min_size=1, max_size=4)
    )
    schema = _parameter(path, "get", "sort")
    assert _validator(schema).is_valid(fields) == _query_accepted("sort", ",".join(fields), path)


@given(
    value=st.integers(-(2**63), 2**63)
    | st.integers(MAX_SAFE_INTEGER - 2, MAX_SAFE_INTEGER + 2).flatmap(lambda n: st.sampled_from([n, -n])),
    name=st.sampled_from(["durationMin", "durationMax"]),
)
def test_number_bounds(value: int, name: str) -> None:
    schema = _parameter("/v1/vaccines", "get", name)
    assert _validator(schema).is_valid(value) == _query_accepted(name, str(value), "/v1/vaccines")


record_ids = st.one_of(
    st.uuids().map(str),
    st.uuids().map(lambda value: str(value).upper()),
    st.uuids().map(lambda value: value.hex),
    st.uuids().map(lambda value: f"{{{value}}}"),
    st.uuids().map(lambda value: value.urn),
    _text("0123456789abcdef-", max_size=40),
)


@given(
    ids=st.lists(record_ids, min_size=1, max_size=4) | st.lists(st.just(str(MISSING)), min_size=MAX_IDS, max_size=1001),
    name=st.sampled_from(["petId", "vaccineId", "ids"]),
)
def test_record_ids(ids: list[str], name: str) -> None:
    """Sent as the document serializes it: comma-separated."""
    schema = _parameter("/v1/pet-vaccination", "get", name)
    accepted = _query_accepted(name, ",".join(ids), "/v1/pet-vaccination")
    assert _validator(schema, formats=True).is_valid(ids) == accepted


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


@given(
    value=date_times,
    parameter=st.sampled_from(
        [
            ("/v1/pets", "createdFrom"),
            ("/v1/pets", "createdTo"),
            ("/v1/vaccines", "modifiedFrom"),
            ("/v1/pet-vaccination", "modifiedTo"),
            ("/v1/pet-vaccination", "appliedAt"),
            ("/v1/pet-vaccination", "appliedAtMin"),
            ("/v1/pet-vaccination", "appliedAtMax"),
            ("/v1/pet-vaccination", "dueFrom"),
            ("/v1/pet-vaccination", "dueTo"),
        ]
    ),
)
def test_date_times(value: str, parameter: tuple[str, str]) -> None:
    path, name = parameter
    validator = _validator(_parameter(path, "get", name), formats=True)
    assert validator.is_valid(value) == _query_accepted(name, value, path)


instants = st.builds(
    lambda date, time, fraction, zone: f"{date}T{time}{fraction}{zone}",
    st.sampled_from(
        ["1899-12-31", "1900-01-01", "1900-01-02", "1970-01-01", "2026-11-21", "2026-11-22", "9999-12-31", "2026-02-29"]
    ),
    st.sampled_from(["00:00:00", "00:30:00", "23:59:59", "12:00:00", "24:00:00"]),
    st.sampled_from(["", ".0", ".0004", ".0005", ".9994", ".9995", ".999999999999"]),
    st.sampled_from(["Z", "z", "+00:00", "-00:00", "+01:00", "-01:00", "+23:59", "-23:59", "+24:00"]),
)


@given(value=instants | date_times, name=st.sampled_from(["appliedAt", "dueAt"]))
def test_instants_as_sent(value: str, name: str) -> None:
    """The schema admits exactly the RFC 3339 date-times that the service reads. Where they must lie (not
    before 1900, not after the year 9999 in UTC, appliedAt not after the service's clock) depends on the
    offset, the rounding and the clock, which a pattern cannot weigh: the description says it, and the
    service's answer names it."""
    schema = _property("PetVaccinationWrite", name)
    moment, problem = _kind_of(PET_VACCINATIONS, name).read(value, _context())
    admitted = _validator(schema, formats=True).is_valid(value)
    if not admitted:
        assert problem is not None
        assert problem.startswith("must be an RFC 3339 date-time")
    elif problem is not None:
        assert problem.startswith("must not be")
        assert "1900" in schema["description"]
        assert "9999-12-31T23:59:59.999Z" in schema["description"] or "clock" in schema["description"]
    else:
        assert EARLIEST_MS <= moment <= LATEST_MS


@given(moment=st.integers(EARLIEST_MS - 2, LATEST_MS + 2), name=st.sampled_from(["appliedAt", "dueAt"]))
def test_instants_as_stored(moment: int, name: str) -> None:
    """Every moment the service keeps is written as the document says, and no moment after the year 9999 is
    kept."""
    schema = _property("PetVaccination", name)
    assert _validator(schema, formats=True).is_valid(format_timestamp(moment)) == (moment <= LATEST_MS)


OPTIONAL_NAMES = st.sampled_from(
    [
        (PETS, "color"),
        (PETS, "breed"),
        (VACCINES, "group"),
        (VACCINES, "manufacturer"),
        (PET_VACCINATIONS, "veterinarian"),
        (PET_VACCINATIONS, "veterinarianLicence"),
    ]
)
short_names = st.one_of(names, _padded(st.text("ab", min_size=48, max_size=52)))


@given(value=short_names | st.none(), field=OPTIONAL_NAMES)
def test_optional_name_as_sent(value: str | None, field: tuple[Resource, str]) -> None:
    """A name, or blank text or null, which clear it."""
    resource, name = field
    schema = _property(f"{resource.schema_name}Write", name)
    accepted = value is None or _kind_of(resource, name).read(value, _context())[1] is None
    assert _validator(schema).is_valid(value) == accepted


@given(value=short_names | st.none(), field=OPTIONAL_NAMES)
def test_optional_name_as_stored(value: str | None, field: tuple[Resource, str]) -> None:
    resource, name = field
    schema = _property(resource.schema_name, name)
    stored, problem = (None, None) if value is None else _kind_of(resource, name).read(value, _context())
    assert _validator(schema).is_valid(value) == (problem is None and stored == value)


SEPARATORS = " .*-"
microchips = st.one_of(
    _padded(
        st.sampled_from([9, 10, 15, 8, 11, 14, 16]).flatmap(
            lambda length: st.lists(
                st.tuples(
                    st.sampled_from("0123456789aAfF" if length == 10 else "0123456789"), _text(SEPARATORS, max_size=2)
                ),
                min_size=length,
                max_size=length,
            ).map(
                lambda parts: "".join(
                    char + (sep if index < len(parts) - 1 else "") for index, (char, sep) in enumerate(parts)
                )
            )
        ),
        max_size=2,
    ),
    _text("0123456789ABCDEFGabcdefg" + SEPARATORS + "_/", max_size=18),
)


@given(value=microchips | st.none())
def test_microchip_as_sent(value: str | None) -> None:
    """Any of the three formats, with one separator at most between two characters and white space around, or
    blank, or null."""
    schema = _property("PetWrite", "microchip")
    accepted = value is None or _kind_of(PETS, "microchip").read(value, _context())[1] is None
    assert _validator(schema).is_valid(value) == accepted


@given(value=microchips)
def test_microchip_as_stored_and_as_a_filter(value: str) -> None:
    code, problem = _kind_of(PETS, "microchip").read(value, _context())
    assert _validator(_property("Pet", "microchip")).is_valid(value) == (problem is None and code == value)
    filtered = _parameter("/v1/pets", "get", "microchip")
    accepted = _query_accepted("microchip", value)
    assert _validator(filtered).is_valid([value]) == accepted


codes = st.one_of(_text("aZ09-./ _é\t", max_size=8), _padded(st.text("A1-", min_size=28, max_size=52), max_size=2))


@given(value=codes | st.none(), name=st.sampled_from(["lotNumber", "rabiesTag"]))
def test_codes_as_sent_stored_and_filtered(value: str | None, name: str) -> None:
    kind = _kind_of(PET_VACCINATIONS, name)
    stored, problem = (None, None) if value is None else kind.read(value, _context())
    assert _validator(_property("PetVaccinationWrite", name)).is_valid(value) == (problem is None)
    assert _validator(_property("PetVaccination", name)).is_valid(value) == (problem is None and stored == value)
    if value is not None:
        filtered = _validator(_parameter("/v1/pet-vaccination", "get", name)).is_valid(value)
        assert filtered == _query_accepted(name, value, "/v1/pet-vaccination")


@given(value=short_names)
def test_group_filter(value: str) -> None:
    """The whole group: a name, never blank text (which a body may send to clear the group, and names nothing)."""
    schema = _parameter("/v1/vaccines", "get", "group")
    assert _validator(schema).is_valid(value) == _query_accepted("group", value, "/v1/vaccines")
