"""A model of the contract, driven by hypothesis against the service on each database.

A `RuleBasedStateMachine` creates, reads, replaces, deletes and lists the records of every registered resource
as two users and an admin, with and without If-Match, If-None-Match and Idempotency-Key, and with filters,
sorting and paging. It keeps what the contract says the service holds, and compares every answer with it:
status, error code, body, ETag, ownership, references, history and page counts.

What is alike for every resource is written once and read from the registry's declarations: a read and its
embedded records, a replace and an update (what a body gives, keeps, clears and derives; references; fields fixed
at creation; who may write and name the owner; If-Match; unique values; a transfer's followers; the records that
embed it), a delete (who may, If-Match, what refers to the record: OnDelete.RESTRICT's 409, CASCADE's deletions), a
missing id, a list (visibility by ownership, the filters of references, owner and every list, the declared sort
fields, paging), a history, and the counts. What a declaration cannot say, each resource adds as small hooks (`Own`,
at the end): the values its fields are sent with, its rules between fields, with the records it refers to, and on
the record as written. A resource without create rules of its own below is created from its declared examples
(`create_example`), so that a new resource has that coverage with no new rule. Pets, vaccines and vaccinations
add their own creates and filters.

What the model keeps of a vaccination is what was written; its `ownerId` follows its pet, and its
`vaccine` is the vaccine as it is now. Its ETag changes when the vaccination, its vaccine or its pet's
owner changes; the model then knows only that the next one it sees is new.

The clinic's fields follow the contract's rules (v4 sections 2, 10.1 and 10.2): a pet dies on or after the day it
was born and of each completed dose of it, and no dose of it is given later; a dose is created completed, is marked
entered-in-error with a reason, and is then only deleted; a product had not expired on the day it was given; a
rabies tag belongs to one completed dose a calendar year.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import math
import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import hypothesis.strategies as st
import pytest
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from litestar.testing import TestClient

from petrecords.config import DEFAULT_PET_TYPES
from petrecords.registry import RESOURCES
from petrecords.resources.declaration import OnDelete, Reference, Resource, Writers
from tests.conftest import stateful_settings
from tests.support import ADMIN, ALICE, BOB, as_read, token, wipe

Client = TestClient[Any]
Body = dict[str, Any]
USERS = (ALICE, BOB, ADMIN)
REGISTERED: dict[str, Resource] = {resource.path: resource for resource in RESOURCES.resources}
"""Every registered resource, by its path: the generic rules (read, replace, update, delete, list, history, a record
made from the declared examples, the counts) take in each, its fields, references and ownership from its
declaration."""
PATHS = sorted(REGISTERED)
PETS, VACCINES, VACCINATIONS = "/v1/pets", "/v1/vaccines", "/v1/pet-vaccination"
assert {PETS, VACCINES, VACCINATIONS} <= set(REGISTERED)
OWN_CREATES = (PETS, VACCINES, VACCINATIONS)
"""The resources whose creates have rules of their own below (what their fields hold); every other one is created
from its declared examples by `create_example`."""
EXAMPLES_ONLY = [path for path in PATHS if path not in OWN_CREATES]
FILTERS = {path: {one.parameter for one in resource.filters} for path, resource in REGISTERED.items()}
CASE_IGNORED = ("name", "petType", "group", "breed")
"""The sort fields compared case-insensitively (the others are stored in one case)."""
TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")

# Names from a small alphabet, so that filters and sorting meet equal, case-different and wildcard names.
NAME_CHARACTERS = "abAB _%\\"
names = st.builds(
    lambda left, name, right: left + name + right,
    st.sampled_from(["", " ", "\t"]),
    st.text(NAME_CHARACTERS, min_size=1, max_size=5).filter(lambda name: name.strip(" ") != ""),
    st.sampled_from(["", " ", "\n"]),
)
invalid_names: st.SearchStrategy[Any] = st.sampled_from(["", "   ", "a\x00b", "x" * 101, "tab\tinside", 7, None])
# Mostly two types, so that vaccines often fit pets; every type sometimes.
pet_types = st.one_of(st.sampled_from(["Dog", "Cat"]), st.sampled_from(DEFAULT_PET_TYPES)).flatmap(
    lambda spelling: st.sampled_from([spelling, spelling.lower(), spelling.upper()])
)
# Free text as sent (None: left out, "null": null): blank is null; line feeds and tabs stay inside, and
# `search` may name them; wildcards for `search`.
PROSE = ["", "  ", "\n\t", " Core. ", "a\nb", "b\ta", "ab", "AB%", "b_a", "Ba\\"]
prose = st.sampled_from([None, "null", *PROSE])
# A vaccine's group and manufacturer, each left out, null or given; groups equal but for case and white space.
CATALOGUE = {"group": [None, "", " Rabies ", "rabies", "DHPP"], "manufacturer": [None, "Zoetis", "  "]}
catalogue_fields = st.fixed_dictionaries(
    {}, optional={name: st.sampled_from(values) for name, values in CATALOGUE.items()}
)
# Refused as a description (at most 1000 characters) and as notes (2000).
invalid_prose: st.SearchStrategy[Any] = st.sampled_from(["x" * 2001, "x" * 1001, "a\rb", "nul\x00", 5, ["x"]])
durations = st.sampled_from([1, 30, 365, 365, 1095, 36_500])
invalid_durations: st.SearchStrategy[Any] = st.sampled_from([0, 36_501, -1, 1.5, 365.5, "365", True, None])
# Moments a vaccine was given, as sent and as returned: offsets, extra digits and rounding, and equal instants.
APPLIED = [
    ("2025-06-01T09:30:00.000Z", "2025-06-01T09:30:00.000Z"),
    ("2025-06-01T10:30:00+01:00", "2025-06-01T09:30:00.000Z"),
    ("2025-06-01T09:30:00.0004Z", "2025-06-01T09:30:00.000Z"),
    ("2020-02-29t12:00:00z", "2020-02-29T12:00:00.000Z"),
    ("1899-12-31T23:59:59.9995Z", "1900-01-01T00:00:00.000Z"),
    ("2026-01-01T00:00:00.001Z", "2026-01-01T00:00:00.001Z"),
]
# When the next dose is due, relative to appliedAt: left out or null (the vaccine's duration), or given.
DUE = [None, "null", timedelta(milliseconds=1), timedelta(days=30), "9999-12-31T23:59:59.999Z"]
VACCINATION_FILTERS = (
    "petId",
    "vaccineId",
    "ownerId",
    "appliedAt",
    "appliedAtMin",
    "appliedAtMax",
    "dueFrom",
    "dueTo",
    "status",
    "doseType",
    "rabiesTag",
    "lotNumber",
    "common",
)
# A clinic's fields of a pet, each left out, null or given as a client may spell it; a few microchip codes in each
# format, so that two pets come to claim one; days of death before and after the days of birth and of the doses.
CLINIC = {
    "birthDate": [None, "2019-04-23", "1900-01-01", "2024-02-29"],
    "sex": [None, "female", "MALE", "Unknown"],
    "neutered": [None, True, False],
    "breed": [None, " Beagle ", "", "border collie"],
    "microchip": [
        *(None, "", "982000123456789", "982 000 123 456 789", "982.000-123.456.780"),
        *("0a1b2c3d4e", "0A1B-2C3D-4E", "123*456*789"),
    ],
    "color": [None, "", " Black ", "brindle"],
    "deceasedAt": [None, "2019-04-23", "2025-06-01", "2026-01-01", "1900-01-01"],
}
clinic_fields = st.fixed_dictionaries({}, optional={name: st.sampled_from(values) for name, values in CLINIC.items()})
# What a clinic records of a dose, each left out, null or given as a client may spell it; a few rabies tags, so that
# two doses come to claim one, and expiries before and after the days of the doses.
CERTIFICATE = {
    "lotNumber": [None, "", " A1 b/2 ", "L-7"],
    "lotExpiresOn": [None, "2020-02-29", "2025-06-01", "2030-01-01", "2030-01-01"],
    "doseType": [None, "primary", "BOOSTER"],
    "veterinarian": [None, " Dr. Ruiz ", ""],
    "veterinarianLicence": [None, "VET-1"],
    "clinic": [None, "Riverside\nSpringfield ", "  "],
    "rabiesTag": [None, "", "r-1", "R-1", "T-2", "r-1", "R-1"],
}
certificate_fields = st.fixed_dictionaries(
    {}, optional={name: st.sampled_from(values) for name, values in CERTIFICATE.items()}
)
# A dose's status as a replace or update sends it: mostly left out, often marked in error with a reason, sometimes
# without one, or a reason without the status.
IN_ERROR = {"status": "entered-in-error", "statusReason": " Wrong pet. "}
statuses = st.sampled_from(
    [
        {},
        {},
        {},
        {},
        IN_ERROR,
        {**IN_ERROR, "status": "Entered-In-Error"},
        {"status": "entered-in-error"},
        {"status": None},
        {"status": "completed", "statusReason": None},
        {"statusReason": "Why."},
    ]
)
SEPARATORS = re.compile(r"[ .*-]")


def day_of(instant: str) -> str:
    """The calendar day (UTC) of an instant as the service returns it."""
    return instant[:10]


# The preconditions a request can carry: the record's ETag, its weak form, an older one, or `*`.
conditions = st.sampled_from([None, None, "current", "weak", "stale", "*"])
sometimes = st.integers(0, 4).map(lambda n: n == 0)
keys = st.sampled_from([None, None, "k1", "k2"])


@dataclass
class Record:
    body: Body
    last: str
    """The ETag last seen."""
    etag: str | None = None
    """The current ETag, None when it changed since it was last seen."""
    # Every ETag the record ever had: a write must never bring one back.
    etags: set[str] = field(default_factory=set)
    writes: int = 1
    """The changes its history holds: its create, each replace and update, each move with the record it follows."""

    def __post_init__(self) -> None:
        self.etag = self.last
        self.etags.add(self.last)

    def changed(self, *, written: bool = False) -> None:
        self.etag = None
        self.writes += written

    def seen(self, etag: str, *, written: bool = False) -> None:
        if written or self.etag is None:
            assert etag not in self.etags, "an ETag never comes back"
            self.etags.add(etag)
        else:
            assert etag == self.etag, "the ETag changed without a write"
        self.etag = self.last = etag


@dataclass
class Replay:
    resource: str
    request: Any
    body: bytes
    location: str
    etag: str


def canonical_type(spelling: str) -> str:
    return next(pet_type for pet_type in DEFAULT_PET_TYPES if pet_type.lower() == spelling.lower())


def parse_time(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%f%z")


def format_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def with_offset(canonical: str) -> str:
    """The same instant written with a +01:00 offset."""
    moment = parse_time(canonical).astimezone(UTC) + timedelta(hours=1)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "+01:00"


APPLIED_KEPT = dict(APPLIED)


def trimmed(text: str) -> str | None:
    return text.strip(" \t\n") or None


def lowered(text: str) -> str | None:
    return None if trimmed(text) is None else text.strip(" \t\n").lower()


KEPT: dict[str, Callable[[Any], Any]] = {
    **dict.fromkeys(("name", "breed", "color", "group", "manufacturer", "description", "notes"), trimmed),
    **dict.fromkeys(("veterinarian", "veterinarianLicence", "clinic", "lotNumber", "statusReason"), trimmed),
    **dict.fromkeys(("ownerId", "sex", "doseType", "status", "access"), lowered),
    "petType": canonical_type,
    "microchip": lambda code: SEPARATORS.sub("", code).upper() or None,
    "rabiesTag": lambda tag: None if trimmed(tag) is None else tag.strip(" \t\n").upper(),
    # An instant as returned: in UTC with milliseconds, rounded.
    **dict.fromkeys(("appliedAt", "dueAt"), lambda sent: APPLIED_KEPT.get(sent) or format_time(parse_time(sent))),
    "events": lambda events: list(dict.fromkeys(events)),
}
"""How the service keeps each field's value as sent (when not null), by the field's name: a field not named here is
kept as sent."""


def like(pattern: str, *, substring: bool) -> re.Pattern[str]:
    """The contract's patterns: `%` any run, `_` one character, `\\%` `\\_` `\\\\` themselves, any other
    backslash itself; matched case-insensitively against the whole name (or any part of it)."""
    out: list[str] = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\" and index + 1 < len(pattern) and pattern[index + 1] in "%_\\":
            out.append(re.escape(pattern[index + 1]))
            index += 2
            continue
        out.append(".*" if char == "%" else "." if char == "_" else re.escape(char.lower()))
        index += 1
    body = "".join(out)
    return re.compile(f".*{body}.*" if substring else body, re.DOTALL)


def ordering(keys: list[tuple[str, bool]]) -> Callable[[Body, Body], int]:
    """The contract's total order: the given fields (text case-insensitively), then the id ascending."""
    if all(name != "id" for name, _ in keys):
        keys = [*keys, ("id", False)]

    def value(record: Body, name: str) -> Any:
        # Null after every value (before them descending).
        if record[name] is None:
            return (True, "")
        if name == "duration":
            return (False, record[name])
        return (False, str(record[name]).lower() if name in CASE_IGNORED else str(record[name]))

    def compare(left: Body, right: Body) -> int:
        for name, descending in keys:
            a, b = value(left, name), value(right, name)
            if a != b:
                return (1 if a > b else -1) * (-1 if descending else 1)
        return 0

    return compare


def validation_failure(errors: dict[str, list[str]]) -> Body:
    """The contract's 400 body: code 994, a message naming every field with what was expected, `errors`."""
    details = "; ".join(f"{name} {' '.join(m.rstrip('.') for m in messages)}" for name, messages in errors.items())
    return {"code": 994, "message": f"Invalid request body: {details}.", "errors": errors}


class PetRecordsModel(RuleBasedStateMachine):
    def __init__(self, client: Client, database_url: str) -> None:
        super().__init__()
        self.client = client
        # Made here, not at import: a token lives ten minutes, and a whole test session takes longer.
        self.headers = {user: {"Authorization": f"Bearer {token(user, admin=user == ADMIN)}"} for user in USERS}
        asyncio.run(wipe(database_url))
        self.records: dict[str, dict[str, Record]] = {path: {} for path in PATHS}
        self.deleted: dict[str, set[str]] = {path: set() for path in self.records}
        # A deleted record's history: who could read it just before, and how many changes it holds.
        self.gone: dict[tuple[str, str], tuple[Record, int]] = {}
        self.replays: dict[tuple[str, str], Replay] = {}
        # The collections whose totals a request since the last check could have changed (a write, whatever
        # its answer): the invariant asks for those.
        self.touched: set[str] = set(self.records)

    # --- what the model expects --------------------------------------------------------------------

    @property
    def pet_records(self) -> dict[str, Record]:
        return self.records[PETS]

    @property
    def vaccine_records(self) -> dict[str, Record]:
        return self.records[VACCINES]

    @property
    def vaccination_records(self) -> dict[str, Record]:
        return self.records[VACCINATIONS]

    def body_of(self, path: str, record: Record) -> Body:
        """A record as the service returns it, with the records it embeds as they are now (a vaccination's
        vaccine)."""
        resource = REGISTERED[path]
        if not resource.embeds:
            return record.body
        embedded = {
            embed.field: self.records[resource.reference_of(embed.reference).target.path][
                record.body[embed.reference]
            ].body
            for embed in resource.embeds
        }
        return {**record.body, **embedded}

    @staticmethod
    def sees(user: str, path: str, record: Record) -> bool:
        """Whether the user may read the record, by its resource's ownership: every record of a resource that has
        no owners; else an administrator, the owner, and the issuer of an issued one."""
        ownership = REGISTERED[path].ownership
        if ownership.column is None or user == ADMIN:
            return True
        issued = ownership.issuer is not None and record.body["createdBy"] == user
        return bool(record.body[ownership.field] == user or issued)

    def visible(self, user: str, path: str, record_id: str) -> Record | None:
        """Someone else's record is, to a non-admin, exactly like one that does not exist."""
        record = self.records[path].get(record_id)
        if record is None or not self.sees(user, path, record):
            return None
        return record

    def referring(self, path: str, record_id: str) -> Iterable[tuple[str, Record, OnDelete, bool]]:
        """The records that refer to one (its resource's dependents): their path, the record, what its deletion
        does to them, and whether they follow its owner."""
        for dependent in RESOURCES.dependents(REGISTERED[path]):
            reference = dependent.reference
            follows = dependent.resource.ownership.through == reference.field
            for record in list(self.records[dependent.resource.path].values()):
                if record.body[reference.field] == record_id:
                    yield dependent.resource.path, record, reference.on_delete, follows

    def transferred(self, path: str, record_id: str, owner: str) -> None:
        """A record's new owner: the records that follow it go with it (a write of each: a new ETag, though not by
        anyone, the same modifiedAt and modifiedBy); its shares, and what was issued for it, are deleted."""
        for follower_path, follower, _, follows in self.referring(path, record_id):
            if not follows:
                continue
            resource = REGISTERED[follower_path]
            if resource.grants is not None or resource.ownership.issuer is not None:
                self.forget(follower_path, follower.body["id"])
            else:
                follower.body[resource.ownership.field] = owner
                follower.changed(written=True)

    def of_pet(self, pet_id: str) -> list[Record]:
        return [record for record in self.vaccination_records.values() if record.body["petId"] == pet_id]

    @staticmethod
    def conditional(record: Record | None, condition: str | None) -> str | None:
        """The header value for a precondition. For a record whose ETag changed unseen, "current" is the
        last one seen, which no longer matches."""
        last = record.last if record is not None else '"0000"'
        older = sorted(record.etags - {record.etag}) if record is not None else []
        values = {
            "current": last,
            "weak": f"W/{last}",
            "stale": f'{(older or [chr(34) * 2])[0]}, "other"',
            "*": "*",
        }
        return values.get(condition) if condition else None

    @staticmethod
    def if_match_holds(record: Record, condition: str | None) -> bool:
        """If-Match compares strongly: a weak tag never matches."""
        return condition in (None, "*") or (condition == "current" and record.etag is not None)

    @staticmethod
    def if_none_match_holds(record: Record, condition: str | None) -> bool:
        """If-None-Match compares weakly."""
        return condition == "*" or (condition in ("current", "weak") and record.etag is not None)

    @staticmethod
    def owner_field(user: str, owner: str | None) -> dict[str, Any]:
        if owner is None:
            return {}
        named = {"null": None, "self": user, "SELF": user.upper()}
        return {"ownerId": named.get(owner, owner)}

    @staticmethod
    def assert_error(response: Any, status: int, code: int) -> Body:
        assert response.status_code == status, (status, response.status_code, response.text)
        body: Body = response.json()
        assert body["code"] == code, body
        assert set(body) <= {"code", "message", "errors"}, body
        return body

    @staticmethod
    def assert_failure(response: Any, errors: dict[str, list[str]]) -> None:
        assert response.status_code == 400, response.text
        assert response.json() == validation_failure(errors)

    def assert_invalid(self, response: Any, *fields: str) -> None:
        body = self.assert_error(response, 400, 994)
        assert list(body["errors"]) == list(fields), body
        assert all(name in body["message"] for name in fields), body

    def assert_record(self, response: Any, path: str, record: Record) -> None:
        assert response.status_code == 200, response.text
        assert response.json() == self.body_of(path, record)
        record.seen(response.headers["etag"])

    def assert_new(self, response: Any, path: str, user: str) -> Body:
        """A record just created by `user`: a new version 7 id, its timestamps, its Location."""
        assert response.status_code == 201, response.text
        assert "idempotent-replayed" not in response.headers
        body: Body = response.json()
        record_id = body["id"]
        assert uuid.UUID(record_id).version == 7
        assert record_id == str(uuid.UUID(record_id))
        assert all(
            record_id not in self.records[other] and record_id not in self.deleted[other] for other in self.records
        )
        assert TIMESTAMP.fullmatch(body["createdAt"])
        assert (body["createdBy"], body["modifiedBy"], body["modifiedAt"]) == (user, user, body["createdAt"])
        assert response.headers["location"] == f"{path}/{record_id}"
        return body

    def taken(self, response: Any, user: str, path: str, written: Body, record_id: str | None) -> bool:
        """Whether another record has the values of one of the resource's unique sets of fields (none null) of the
        record as written, among those its own rule picks (Own.within), checked here: 409, with the other's Location
        when the caller may see it."""
        within = OWN[path].within
        for unique in REGISTERED[path].unique:
            values = [written[name] for name in unique.fields]
            among = within(written) if within is not None else lambda other: True
            if None in values or among is None:
                continue
            other = next(
                (
                    other_id
                    for other_id, other in sorted(self.records[path].items())
                    if other_id != record_id
                    and [other.body[name] for name in unique.fields] == values
                    and among(other.body)
                ),
                None,
            )
            if other is None:
                continue
            self.assert_error(response, 409, 982)
            if self.visible(user, path, other) is not None:
                assert response.headers["location"] == f"{path}/{other}"
            else:
                assert "location" not in response.headers
            return True
        return False

    def reference_errors(
        self, user: str, path: str, values: Body, *, named: bool = False, complete: bool = True
    ) -> dict[str, list[str]]:
        """400's errors for the records a body refers to: each the user may not see, alike whether it exists or
        not (`named`: only those the body names); then, when each is found, the rules between the body and them
        (Own.complete)."""
        errors = {
            reference.field: [reference.message]
            for reference in REGISTERED[path].references
            if (not named or reference.field in values)
            and self.visible(user, reference.target.path, values[reference.field]) is None
        }
        rule = OWN[path].complete
        if not errors and complete and rule is not None:
            errors.update(rule(self, values))
        return errors

    def given(self, path: str, sent: Body) -> Body:
        """The fields a body gives, as the service keeps them: null clears a field that may be null, and is no value
        for one that cannot be (the field is not given)."""
        resource = REGISTERED[path]
        return {
            name: KEPT.get(name, lambda same: same)(value) if value is not None else None
            for name, value in sent.items()
            if name in {declared.name for declared in resource.fields if not declared.read_only}
            and (value is not None or resource.field_named(name).nullable)
        }

    def replayed(self, response: Any, path: str, user: str, key: str | None, request: Any) -> bool:
        """Whether the create was answered from an earlier one with the same key (checked here): the first
        answer again, or 422 for another body or another resource."""
        replay = self.replays.get((user, key)) if key else None
        if replay is None:
            return False
        if replay.request != request or replay.resource != path:
            self.assert_error(response, 422, 990)
            return True
        assert response.status_code == 201
        assert response.content == replay.body
        assert response.headers["idempotent-replayed"] == "true"
        assert (response.headers["location"], response.headers["etag"]) == (replay.location, replay.etag)
        return True

    def keep(self, response: Any, path: str, user: str, key: str | None, request: Any) -> str:
        body = response.json()
        etag = response.headers["etag"]
        self.records[path][body["id"]] = Record(body=body, last=etag)
        if key:
            self.replays[(user, key)] = Replay(path, request, response.content, response.headers["location"], etag)
        return str(body["id"])

    def forget(self, path: str, record_id: str) -> None:
        """A record deleted, and with it those that refer to it with OnDelete.CASCADE (each a change of its own)."""
        record = self.records[path].pop(record_id)
        self.deleted[path].add(record_id)
        self.gone[(path, record_id)] = (record, record.writes + 1)
        self.touched.add(path)
        for dependent_path, dependent, on_delete, _ in list(self.referring(path, record_id)):
            assert on_delete is OnDelete.CASCADE, "a record still referred to is not deleted"
            self.forget(dependent_path, dependent.body["id"])

    def pick(self, data: st.DataObject, path: str) -> str:
        """The id of a record of `path`: mostly one that exists, sometimes one deleted or one that never was."""
        ids = sorted(self.records[path])
        return data.draw(st.sampled_from(ids * 3 + sorted(self.deleted[path])[-2:] + [str(uuid.uuid4())]), label=path)

    def with_key(self, user: str, key: str | None) -> dict[str, str]:
        return {**self.headers[user], **({"Idempotency-Key": key} if key else {})}

    def with_condition(self, user: str, header: str, record: Record | None, condition: str | None) -> dict[str, str]:
        value = self.conditional(record, condition)
        return {**self.headers[user], **({header: value} if value else {})}

    def check_get(self, user: str, path: str, record_id: str, condition: str | None) -> None:
        record = self.visible(user, path, record_id)
        headers = self.with_condition(user, "If-None-Match", record, condition)

        response = self.client.get(f"{path}/{record_id}", headers=headers)

        if record is None:
            self.assert_error(response, 404, 995)
        elif self.if_none_match_holds(record, condition):
            assert response.status_code == 304, response.text
            assert response.content == b""
            record.seen(response.headers["etag"])
        else:
            self.assert_record(response, path, record)

    def check_replaced(self, response: Any, path: str, user: str, record: Record, expected: Body) -> None:
        """A successful replace: every field as expected, a new modifiedAt, modifiedBy and ETag."""
        assert response.status_code == 200, response.text
        replaced = response.json()
        before = record.body
        assert replaced["modifiedAt"] >= before["modifiedAt"]
        record.body = {
            **before,
            **expected,
            "modifiedBy": user,
            "modifiedAt": replaced["modifiedAt"],
        }
        assert replaced == self.body_of(path, record)
        record.seen(response.headers["etag"], written=True)
        record.writes += 1

    def check_page(
        self,
        path: str,
        user: str,
        params: dict[str, str],
        matching: Iterable[Body],
        sort: list[tuple[str, bool]],
        order: str | None,
        page_size: int,
        page_index: int,
    ) -> None:
        if sort:
            params["sort"] = ",".join(("-" if descending else "") + name for name, descending in sort)
        if order is not None:
            params["order"] = order
        params.update(pageSize=str(page_size), pageIndex=str(page_index))

        response = self.client.get(path, params=params, headers=self.headers[user])

        assert response.status_code == 200, (params, response.text)
        keys = [(name, descending or order == "desc") for name, descending in sort] or [("createdAt", order == "desc")]
        expected = sorted(matching, key=functools.cmp_to_key(ordering(keys)))
        total_pages = math.ceil(len(expected) / page_size)
        assert response.json() == {
            "items": expected[(page_index - 1) * page_size : page_index * page_size],
            "pageIndex": page_index,
            "pageSize": page_size,
            "totalPages": total_pages,
            "totalCount": len(expected),
            "hasPreviousPage": page_index > 1,
            "hasNextPage": page_index < total_pages,
        }, params

    @staticmethod
    def common_filters(
        data: st.DataObject, known: list[Body], params: dict[str, str], filters: list[Callable[[Body], bool]]
    ) -> None:
        """`ids`, `createdFrom`/`createdTo`, `modifiedFrom`/`modifiedTo`: alike on every list."""
        if known and data.draw(sometimes, label="by ids"):
            ids = [*data.draw(st.lists(st.sampled_from([r["id"] for r in known]), max_size=3)), str(uuid.uuid4())]
            params["ids"] = ",".join(ids)
            filters.append(lambda record: record["id"] in ids)
        for moment in ("createdAt", "modifiedAt"):
            if known and data.draw(sometimes, label=f"by {moment}"):
                bound = data.draw(st.sampled_from([record[moment] for record in known]), label=f"{moment} bound")
                since = data.draw(st.booleans(), label=f"{moment} since")
                params[moment.replace("At", "From" if since else "To")] = bound
                filters.append(lambda record, key=moment, bound=bound, since=since: (record[key] >= bound) == since)

    @staticmethod
    def text_filters(
        data: st.DataObject,
        texts: Callable[[Body], list[str]],
        known: list[Body],
        params: dict[str, str],
        filters: list[Callable[[Body], bool]],
    ) -> None:
        """`name` (the whole name) and `search` (a part of any of `texts`): patterns with wildcards."""
        for parameter, substring in (("name", False), ("search", True)):
            if data.draw(sometimes, label=f"by {parameter}"):
                # Mostly a known text, or a part of one, changed a little: otherwise few patterns match.
                seeds = [text for record in known for text in (texts(record) if substring else [record["name"]])]
                start = data.draw(st.sampled_from(seeds or ["ab"]), label=f"{parameter} seed")
                if substring:
                    cut = data.draw(st.integers(0, len(start)), label="cut")
                    start = start[cut : cut + data.draw(st.integers(0, 3), label="length")]
                pattern = data.draw(
                    st.sampled_from([start, start.upper(), start.swapcase()]) | st.text(NAME_CHARACTERS, max_size=3),
                    label=parameter,
                )
                if pattern and data.draw(sometimes, label="wildcard"):
                    at = data.draw(st.integers(0, len(pattern) - 1), label="at")
                    pattern = (
                        pattern[:at] + data.draw(st.sampled_from(["_", "%", "\\_", "\\%", "\\\\"])) + pattern[at + 1 :]
                    )
                params[parameter] = pattern
                matcher = like(pattern, substring=substring)
                searched = texts if substring else lambda record: [record["name"]]
                filters.append(
                    lambda record, matcher=matcher, searched=searched: any(
                        matcher.fullmatch(text.lower()) is not None for text in searched(record)
                    )
                )

    # --- every resource: what the declarations say --------------------------------------------------

    def declared_filters(
        self,
        resource: Resource,
        data: st.DataObject,
        known: list[Body],
        params: dict[str, str],
        filters: list[Callable[[Body], bool]],
        chosen: set[str] | None = None,
    ) -> None:
        """The filters every resource has by its declaration: the ids of the records it refers to, its owner, and
        those of every list; each drawn sometimes, or, when `chosen`, those it names ("common": every list's)."""

        def wanted(parameter: str) -> bool:
            return parameter in chosen if chosen is not None else data.draw(sometimes, label=f"by {parameter}")

        for reference in resource.references:
            parameter = reference.field
            if parameter in FILTERS[resource.path] and wanted(parameter):
                # Mostly records that the listed ones name, and always an id of none.
                named = sorted({record[parameter] for record in known})
                ids = data.draw(st.lists(st.sampled_from(named or [str(uuid.uuid4())]), max_size=2), label=parameter)
                ids = [*ids, str(uuid.uuid4())]
                params[parameter] = ",".join(ids)
                filters.append(lambda record, parameter=parameter, ids=ids: record[parameter] in ids)
        # For a non-admin, another owner matches nothing (their own records are all they see).
        if "ownerId" in FILTERS[resource.path] and wanted("ownerId"):
            owner = data.draw(st.sampled_from(USERS), label="owner")
            params["ownerId"] = owner
            filters.append(lambda record: record["ownerId"] == owner)
        if chosen is None or "common" in chosen:
            self.common_filters(data, known, params, filters)

    @rule(user=st.sampled_from(USERS), data=st.data(), condition=conditions)
    def read(self, user: str, data: st.DataObject, condition: str | None) -> None:
        """A GET of any resource's record, with or without If-None-Match."""
        path = data.draw(st.sampled_from(PATHS), label="resource")
        record_id = self.pick(data, path)
        self.check_get(user, path, record_id, condition)
        record = self.visible(user, path, record_id)
        if record is None:
            return
        resource = REGISTERED[path]
        for embed in resource.embeds:
            # A record it embeds is that record as its own GET returns it, to the same caller.
            target = resource.reference_of(embed.reference).target.path
            embedded = record.body[embed.reference]
            response = self.client.get(f"{target}/{embedded}", headers=self.headers[user])
            self.assert_record(response, target, self.records[target][embedded])

    @rule(user=st.sampled_from(USERS), data=st.data(), condition=conditions)
    def delete(self, user: str, data: st.DataObject, condition: str | None) -> None:
        """A DELETE of any resource's record: in the contract's order 404, 403 (a resource that administrators
        alone write), 412, then 409 for a record others still refer to (OnDelete.RESTRICT), which changes nothing;
        else the record as it was, and the records that refer to it with OnDelete.CASCADE go with it."""
        path = data.draw(st.sampled_from(PATHS), label="resource")
        resource = REGISTERED[path]
        record_id = self.pick(data, path)
        record = self.visible(user, path, record_id)

        self.touched |= {path, *(dependent.resource.path for dependent in RESOURCES.dependents(resource))}
        response = self.client.delete(
            f"{path}/{record_id}", headers=self.with_condition(user, "If-Match", record, condition)
        )

        if record is None:
            self.assert_error(response, 404, 995)
        elif resource.ownership.writers is Writers.ADMIN and user != ADMIN:
            self.assert_error(response, 403, 997)
        elif not self.if_match_holds(record, condition):
            self.assert_error(response, 412, 992)
        elif any(on_delete is OnDelete.RESTRICT for _, _, on_delete, _ in self.referring(path, record_id)):
            self.assert_error(response, 409, 985)
        else:
            self.assert_record(response, path, record)
            self.forget(path, record_id)

    @rule(
        user=st.sampled_from(USERS),
        data=st.data(),
        page_size=st.integers(1, 4),
        page_index=st.integers(1, 3),
        order=st.sampled_from([None, "asc", "desc"]),
    )
    def list_records(self, user: str, data: st.DataObject, page_size: int, page_index: int, order: str | None) -> None:
        """A page of any resource's list: the records the user may see, filtered by the resource's own filters
        (below) or else by those its declaration gives, sorted by its declared sort fields."""
        # A list of a resource that refers to others says little while it has no records: the steps go elsewhere.
        path = data.draw(
            st.sampled_from([path for path in PATHS if self.records[path] or not REGISTERED[path].references]),
            label="resource",
        )
        resource = REGISTERED[path]
        sort = data.draw(
            st.lists(
                st.tuples(st.sampled_from(resource.sort_fields), st.booleans()),
                max_size=3,
                unique_by=lambda key: key[0],
            ),
            label="sort",
        )
        records = list(self.records[path].values())
        known = [self.body_of(path, record) for record in records]
        params: dict[str, str] = {}
        filters: list[Callable[[Body], bool]] = []
        own = {PETS: self.filter_pets, VACCINES: self.filter_vaccines, VACCINATIONS: self.filter_vaccinations}
        if path in own:
            own[path](data, known, params, filters)
        else:
            self.declared_filters(resource, data, known, params, filters)
        matching = [
            body
            for record, body in zip(records, known, strict=True)
            if self.sees(user, path, record) and all(keep(body) for keep in filters)
        ]
        self.check_page(path, user, params, matching, sort, order, page_size, page_index)

    @rule(
        user=st.sampled_from(USERS),
        data=st.data(),
        method=st.sampled_from(["PATCH", "DELETE"]),
        value=st.sampled_from(["not-quoted", 'W/"x', '"a" "b"']),
    )
    def bad_condition(self, user: str, data: st.DataObject, method: str, value: str) -> None:
        """An If-Match that is no list of ETags is 400 on any resource, whoever asks, before the record is looked
        up, and writes nothing."""
        path = data.draw(st.sampled_from(PATHS), label="resource")
        record_id = self.pick(data, path)
        self.touched.add(path)
        body = {"json": {}} if method == "PATCH" else {}
        headers = {**self.headers[user], "If-Match": value}
        response = self.client.request(method, f"{path}/{record_id}", headers=headers, **body)
        self.assert_error(response, 400, 994)

    @rule(user=st.sampled_from(USERS), data=st.data())
    def history(self, user: str, data: st.DataObject) -> None:
        """A record's history: every change of it, oldest first, readable by whoever may read it now, or, once it
        is deleted, by whoever could just before; 404 for anyone else."""
        path = data.draw(st.sampled_from(PATHS), label="resource")
        record_id = self.pick(data, path)
        record = self.records[path].get(record_id)
        gone = self.gone.get((path, record_id))
        last, writes = (record, record.writes) if record is not None else gone if gone is not None else (None, 0)

        response = self.client.get(
            f"{path}/{record_id}/history", params={"pageSize": "100"}, headers=self.headers[user]
        )

        if last is None or not self.sees(user, path, last):
            self.assert_error(response, 404, 995)
            return
        assert response.status_code == 200, response.text
        page = response.json()
        assert page["totalCount"] == writes, (page, writes)
        items = page["items"]
        assert [item["version"] for item in items] == list(range(1, writes + 1)), items
        actions = ["created", *["replaced"] * (writes - 1)]
        if record is None:
            actions[-1] = "deleted"
        assert [item["action"] for item in items] == actions, items
        assert all(item["id"] == record_id and item["resource"] == REGISTERED[path].name for item in items)
        if not REGISTERED[path].embeds:
            # The record as its last write left it (an embedded record may have changed since).
            assert items[-1]["record"] == last.body, (items[-1], last.body)

    @rule(user=st.sampled_from(USERS), data=st.data())
    def create_example(self, user: str, data: st.DataObject) -> None:
        """A record of a resource without rules of its own here, made from its declared examples: each reference
        names mostly a record the user may name (see, or own when the reference says so), else any or none, which
        is 400 naming it. A valid body is created (or refused by the resource's own rules, a 400 or 409 that
        makes nothing: the counts say so)."""
        if not EXAMPLES_ONLY:
            return
        path = data.draw(st.sampled_from(EXAMPLES_ONLY), label="resource")
        resource = REGISTERED[path]
        body: Body = dict(resource.examples)
        refused: list[str] = []
        for reference in resource.references:
            body[reference.field] = self.draw_reference(data, user, reference, creating=True)
            if body[reference.field] not in self.nameable(user, reference, creating=True):
                refused.append(reference.field)

        self.touched.add(path)
        response = self.client.post(path, json=body, headers=self.headers[user])

        if refused:
            self.assert_invalid(response, *refused)
            return
        if response.status_code != 201:
            assert response.status_code in (400, 409), response.text
            self.assert_error(response, response.status_code, 994 if response.status_code == 400 else 982)
            return
        created = self.assert_new(response, path, user)
        for name in resource.examples:
            assert created[name] == body[name], (name, created)
        ownership = resource.ownership
        if ownership.through is not None:
            target = resource.reference_of(ownership.through).target
            owner = self.records[target.path][body[ownership.through]].body[target.ownership.field]
            assert created[ownership.field] == owner, created
        elif ownership.column is not None:
            assert created[ownership.field] == user, created
        self.records[path][created["id"]] = Record(body=as_read(resource, created), last=response.headers["etag"])

    # --- every resource: a replace or an update ------------------------------------------------------

    def nameable(self, user: str, reference: Reference, *, creating: bool) -> list[str]:
        """The records a body may refer to: those the user may see, and, on a create whose reference says so, owns."""
        target, ownership = reference.target.path, reference.target.ownership
        return [
            record_id
            for record_id, record in sorted(self.records[target].items())
            if self.sees(user, target, record)
            and (not (creating and reference.owned) or user == ADMIN or record.body[ownership.field] == user)
        ]

    def draw_reference(
        self, data: st.DataObject, user: str, reference: Reference, *, creating: bool, stored: Body | None = None
    ) -> str:
        """Mostly a record the user may name (or, for a field fixed at creation, the one stored), else any, one deleted
        or one that never was."""
        target = reference.target.path
        fixed = [stored[reference.field]] * 8 if stored is not None else []
        return data.draw(
            st.sampled_from(
                fixed
                + self.nameable(user, reference, creating=creating) * 4
                + sorted(self.records[target])
                + sorted(self.deleted[target])[-2:]
                + [str(uuid.uuid4())]
            ),
            label=reference.field,
        )

    def draw_write(self, data: st.DataObject, user: str, path: str, stored: Body | None, *, patching: bool) -> Body:
        """A body as a client sends it: a replace names every required field and some others, an update some fields.
        Members the resource draws together (Own.together) are drawn so; a reference names mostly a record the user
        may see; the owner, where a client may set it, is the user or anyone; any other field takes a value its
        resource lists (Own.values), else its declared example, or null."""
        resource, own = REGISTERED[path], OWN[path]
        body: Body = {}
        for draw in own.together.values():
            if not patching or data.draw(st.booleans(), label="together"):
                body.update(draw(self, data, user))
        references = {reference.field: reference for reference in resource.references}
        drawn = {name for names in own.together for name in names}
        for declared in resource.fields:
            name = declared.name
            if declared.read_only or name in drawn:
                continue
            if (patching or not declared.required) and not data.draw(st.booleans(), label=f"sends {name}"):
                continue
            if name in references:
                fixed = stored if declared.fixed else None
                body[name] = self.draw_reference(data, user, references[name], creating=False, stored=fixed)
                continue
            if name == resource.ownership.field:
                values = [None, user, user.upper(), ALICE, BOB, ADMIN]
            else:
                values = [resource.examples[name]] if name in resource.examples else []
                values += [None] if declared.nullable else []
            strategy = own.values.get(name, st.sampled_from(values) if values else None)
            if strategy is not None:
                body[name] = data.draw(strategy, label=name)
        return body

    def written(self, path: str, stored: Body, given: Body, sent: Body, *, patching: bool) -> Body:
        """The record's fields as a write leaves them: those the body gives, else as stored; but a derived field
        that a replace leaves out, or an update sends as null, is computed again (Own.derive), and an owner that
        follows a record is that record's."""
        resource = REGISTERED[path]
        written: Body = {}
        for declared in resource.fields:
            name = declared.name
            if declared.read_only:
                continue
            if name in given:
                written[name] = given[name]
            elif not (declared.derived and (not patching or name in sent)):
                written[name] = stored[name]
        ownership = resource.ownership
        if ownership.through is not None:
            target = resource.reference_of(ownership.through).target
            written[ownership.field] = self.records[target.path][written[ownership.through]].body[
                target.ownership.field
            ]
        derive = OWN[path].derive
        return {**written, **(derive(self, written) if derive is not None else {})}

    @staticmethod
    def echoes(path: str) -> Body:
        """What a client sends back of a record it read, ignored: the audit fields, the read-only fields (the owner,
        embedded records) and the members the resource tolerates."""
        resource = REGISTERED[path]
        ignored = [*(one.name for one in resource.fields if one.read_only), *resource.tolerated]
        return {
            "createdAt": "1999-01-01T00:00:00.000Z",
            "createdBy": BOB,
            "modifiedBy": BOB,
            **dict.fromkeys(ignored, BOB),
        }

    @rule(
        user=st.sampled_from(USERS),
        data=st.data(),
        bad=st.sampled_from(["required", "field", "id", "body", "If-Match"]),
        patching=st.booleans(),
    )
    def write_invalid(self, user: str, data: st.DataObject, bad: str, patching: bool) -> None:
        """A body or If-Match that fails validation is 400 on any resource, whoever asks, before the record is looked
        up, naming each offence: a required field left out of a replace, or null in an update; a member that is no
        field; an id other than the path's; a body that is no object; an If-Match that is no list of ETags (after
        the body)."""
        path = data.draw(st.sampled_from(PATHS), label="resource")
        record_id = self.pick(data, path)
        required = [one.name for one in REGISTERED[path].fields if one.required]
        bodies = {"required": dict.fromkeys(required) if patching else {}, "field": {"colour": "brown"}}
        body = [] if bad == "body" else bodies.get(bad, {"id": str(uuid.uuid4())} if bad == "id" else {})
        headers = {**self.headers[user], **({"If-Match": "not-quoted"} if bad == "If-Match" else {})}

        self.touched.add(path)
        response = self.client.request(
            "PATCH" if patching else "PUT", f"{path}/{record_id}", json=body, headers=headers
        )

        if bad == "body":
            self.assert_invalid(response, "body")
        elif patching:
            self.assert_invalid(response, *({"required": required}.get(bad) or ["colour" if bad == "field" else bad]))
        else:
            self.assert_invalid(
                response, *(["colour"] if bad == "field" else []), *required, *(["id"] if bad == "id" else [])
            )

    def write(
        self, path: str, user: str, data: st.DataObject, condition: str | None, echo: bool, patching: bool
    ) -> None:
        """A replace (an optional field left out keeps its value, null clears it) or a JSON Merge Patch (the members
        it names change, the rest stay) of a record of `path`, answered in the contract's order: the body's own
        rules and those that look outside the database (400); the references (400: a replace's with the rules
        between them, an update's those it names); 404; an update's body as applied to the record, and its
        references; the fields fixed at creation, the rules on the record as written (400); who may write it, and
        name its owner (403); If-Match (412); unique values (409). Then the record as written, its followers moved
        with its owner, and the records that embed it under a new ETag."""
        method = "PATCH" if patching else "PUT"
        resource, own = REGISTERED[path], OWN[path]
        record_id = self.pick(data, path)
        record = self.visible(user, path, record_id)
        sent = self.draw_write(data, user, path, None if record is None else record.body, patching=patching)
        body = {**sent, **(self.echoes(path) if echo else {})}
        if not patching and data.draw(st.booleans(), label="echo id"):
            body["id"] = record_id

        self.touched.add(path)
        headers = self.with_condition(user, "If-Match", record, condition)
        response = self.client.request(method, f"{path}/{record_id}", json=body, headers=headers)

        given = self.given(path, sent)
        errors = own.check(given) if own.check is not None and not patching else {}
        if errors:
            self.assert_failure(response, errors)
            return
        refused = own.screen(given) if own.screen is not None else []
        if refused:
            self.assert_invalid(response, *refused)
            return
        errors = self.reference_errors(user, path, given, named=patching, complete=not patching)
        if errors:
            self.assert_failure(response, errors)
            return
        if record is None:
            self.assert_error(response, 404, 995)
            return
        stored = record.body
        if patching:
            # The record with the patch applied; a member sent null that cannot be null is not given.
            applied = {**stored, **given}
            applied = {name: value for name, value in applied.items() if name in given or sent.get(name, 0) is not None}
            errors = (own.check(applied) if own.check is not None else {}) or self.reference_errors(user, path, applied)
            if errors:
                self.assert_failure(response, errors)
                return
        written = self.written(path, stored, given, sent, patching=patching)
        refused = [one.name for one in resource.fields if one.fixed and written[one.name] != stored[one.name]]
        refused = refused or (own.review(self, record_id, stored, written) if own.review is not None else [])
        if refused:
            self.assert_invalid(response, *refused)
            return
        ownership = resource.ownership
        named_other = ownership.settable and ownership.field in given and written[ownership.field] != user
        if user != ADMIN and (ownership.writers is Writers.ADMIN or named_other):
            self.assert_error(response, 403, 997)
            return
        if not self.if_match_holds(record, condition):
            self.assert_error(response, 412, 992)
            return
        if self.taken(response, user, path, written, record_id):
            return
        self.check_replaced(response, path, user, record, written)
        if (
            ownership.column is not None
            and written.get(ownership.field, stored[ownership.field]) != stored[ownership.field]
        ):
            self.transferred(path, record_id, written[ownership.field])
        for dependent in RESOURCES.dependents(resource):
            if any(embed.reference == dependent.reference.field for embed in dependent.resource.embeds):
                for embedding in self.records[dependent.resource.path].values():
                    if embedding.body[dependent.reference.field] == record_id:
                        embedding.changed()

    # --- pets ----------------------------------------------------------------------------------------

    @initialize(
        seeds=st.lists(st.tuples(st.sampled_from(USERS), names, pet_types), max_size=6),
        catalogue=st.lists(st.tuples(names, pet_types, durations), max_size=3),
        durations=st.tuples(durations, durations),
        data=st.data(),
    )
    def starts_with(
        self,
        seeds: list[tuple[str, str, str]],
        catalogue: list[tuple[str, str, int]],
        durations: tuple[int, int],
        data: st.DataObject,
    ) -> None:
        """Some records to begin with, so that reads and lists have something to find from the start: pets, a
        catalogue (a vaccine for dogs and one for cats, as most pets are either, and others), vaccinations."""
        assert self.client.get(PETS, headers=self.headers[ADMIN]).json()["totalCount"] == 0
        for user, name, pet_type in seeds:
            self.create(user, name, pet_type, None, None, echo=False, clinic={})
        dog, cat = durations
        for name, pet_type, duration in [("Rabies", "Dog", dog), ("Feline", "Cat", cat), *catalogue]:
            self.create_vaccine(ADMIN, name, pet_type, None, duration, None, echo=False)
        for _ in range(data.draw(st.integers(1, 6), label="vaccinations")):
            user = data.draw(st.sampled_from(USERS), label="user")
            self.create_vaccination(user, data, notes=None, key=None)

    @rule(
        user=st.sampled_from(USERS),
        name=names,
        pet_type=pet_types,
        owner=st.sampled_from([None, "null", "self", "SELF", ALICE, BOB, ADMIN]),
        key=keys,
        echo=st.booleans(),
        clinic=clinic_fields,
    )
    def create(
        self, user: str, name: str, pet_type: str, owner: str | None, key: str | None, echo: bool, clinic: Body
    ) -> None:
        body: Body = {"name": name, "petType": pet_type, **self.owner_field(user, owner), **clinic}
        if echo:  # read-only fields a client sends back are ignored, whatever they say
            body.update({"id": str(uuid.uuid4()), "createdAt": "1999-01-01T00:00:00.000Z", "modifiedBy": BOB})

        self.touched |= {PETS}
        response = self.client.post(PETS, json=body, headers=self.with_key(user, key))

        if self.replayed(response, PETS, user, key, body):
            return
        kept = {**dict.fromkeys(CLINIC), **self.given(PETS, body)}
        # The contract's order: 400, then 403, then 409.
        refused = death_refusal(self, None, None, kept)
        if refused:
            self.assert_invalid(response, *refused)
            return
        if kept.setdefault("ownerId", user) != user and user != ADMIN:
            self.assert_error(response, 403, 997)
            return
        if self.taken(response, user, PETS, kept, None):
            return
        pet = self.assert_new(response, PETS, user)
        audit = {"id": pet["id"], "createdAt": pet["createdAt"], "modifiedAt": pet["createdAt"]}
        assert pet == {**audit, "createdBy": user, "modifiedBy": user, **kept}
        self.keep(response, PETS, user, key, body)

    @rule(
        user=st.sampled_from(USERS),
        bad=st.sampled_from(["name", "petType", "field", "body"]),
        name=invalid_names,
        key=st.sampled_from([None, "k1", "k2"]),
    )
    def create_invalid(self, user: str, bad: str, name: Any, key: str | None) -> None:
        """A body that fails validation is 400, before the Idempotency-Key is looked at, and creates nothing."""
        body: Any = {"name": "Rex", "petType": "Dog"}
        if bad == "name":
            body["name"] = name
        elif bad == "petType":
            body["petType"] = "Dragon"
        elif bad == "field":
            body["colour"] = "brown"
        else:
            body = [body]
        self.touched |= {PETS}
        self.assert_error(self.client.post(PETS, json=body, headers=self.with_key(user, key)), 400, 994)

    @rule(
        user=st.sampled_from(USERS),
        path=st.sampled_from(PATHS),
        method=st.sampled_from(["GET", "PUT", "PATCH", "DELETE"]),
        record_id=st.sampled_from([str(uuid.uuid4()), "not-an-id", "01890A5D-AC96-774B-BCCE-B302099A8057", "%20"]),
        condition=st.sampled_from([None, "*"]),
    )
    def missing(self, user: str, path: str, method: str, record_id: str, condition: str | None) -> None:
        """An id that names no record, or is no id at all, is 404 for every operation (after a body that
        passes validation, references included, on a replace)."""
        headers = {
            **self.headers[user],
            **({"If-Match" if method != "GET" else "If-None-Match": "*"} if condition else {}),
        }
        valid = self.valid_body(user, path)
        if method in ("PUT", "PATCH") and valid is None:
            return
        body = {"json": valid} if method == "PUT" else {"json": {}} if method == "PATCH" else {}
        if method != "GET":
            self.touched.add(path)
        response = self.client.request(method, f"{path}/{record_id}", headers=headers, **body)
        self.assert_error(response, 404, 995)

    def valid_body(self, user: str, path: str) -> Body | None:
        """A body that passes validation, references included, when the user may make one: a resource's own, or
        its declared examples naming the first records the user may name."""
        if path == PETS:
            return {"name": "Rex", "petType": "Dog"}
        if path == VACCINES:
            return {"name": "R", "petType": "Dog", "duration": 1}
        if path == VACCINATIONS:
            fitting = self.fitting(user)
            if fitting is None:
                return None
            pet_id, vaccine_id = fitting
            return {"petId": pet_id, "vaccineId": vaccine_id, "appliedAt": APPLIED[0][0]}
        resource = REGISTERED[path]
        body: Body = dict(resource.examples)
        for reference in resource.references:
            target = reference.target
            named = [
                record_id
                for record_id, record in sorted(self.records[target.path].items())
                if self.sees(user, target.path, record)
                and (not reference.owned or user == ADMIN or record.body[target.ownership.field] == user)
            ]
            if not named:
                return None
            body[reference.field] = named[0]
        return body

    def fitting(self, user: str) -> tuple[str, str] | None:
        """A pet the user may see, alive on the day of APPLIED[0], and a vaccine for its type, when there are such."""
        for pet_id, pet in sorted(self.pet_records.items()):
            alive = pet.body["deceasedAt"] is None or pet.body["deceasedAt"] >= day_of(APPLIED[0][1])
            if (user == ADMIN or pet.body["ownerId"] == user) and alive:
                for vaccine_id, vaccine in sorted(self.vaccine_records.items()):
                    if vaccine.body["petType"] == pet.body["petType"]:
                        return pet_id, vaccine_id
        return None

    def filter_pets(
        self, data: st.DataObject, known: list[Body], params: dict[str, str], filters: list[Callable[[Body], bool]]
    ) -> None:
        """A pet's own filters: its type, whether it died, its name."""
        if data.draw(sometimes, label="by type"):
            types = data.draw(st.lists(pet_types, min_size=1, max_size=3), label="types")
            params["petType"] = ",".join(types)
            filters.append(lambda pet: pet["petType"] in {canonical_type(pet_type) for pet_type in types})
        if data.draw(sometimes, label="by death"):
            deceased = data.draw(st.booleans(), label="deceased")
            params["deceased"] = str(deceased).lower()
            filters.append(lambda pet: (pet["deceasedAt"] is not None) == deceased)
        self.text_filters(data, lambda pet: [pet["name"]], known, params, filters)
        self.declared_filters(REGISTERED[PETS], data, known, params, filters)

    # --- vaccines ------------------------------------------------------------------------------------

    @staticmethod
    def vaccine_body(
        name: str, pet_type: str, description: str | None, duration: Any, catalogue: Body | None = None
    ) -> Body:
        body: Body = {"name": name, "petType": pet_type, "duration": duration, **(catalogue or {})}
        if description is not None:
            body["description"] = None if description == "null" else description
        return body

    @rule(
        user=st.sampled_from([ADMIN, ADMIN, ALICE]),
        name=names,
        pet_type=pet_types,
        description=prose,
        duration=durations,
        key=keys,
        echo=st.booleans(),
        catalogue=catalogue_fields,
    )
    def create_vaccine(
        self,
        user: str,
        name: str,
        pet_type: str,
        description: str | None,
        duration: int,
        key: str | None,
        echo: bool,
        catalogue: Body | None = None,
    ) -> None:
        body = self.vaccine_body(name, pet_type, description, duration, catalogue)
        if echo:
            body.update({"id": str(uuid.uuid4()), "createdBy": BOB, "modifiedAt": "1999-01-01T00:00:00.000Z"})

        self.touched |= {VACCINES}
        response = self.client.post(VACCINES, json=body, headers=self.with_key(user, key))

        # The key is looked at before the caller's permission.
        if self.replayed(response, VACCINES, user, key, body):
            return
        if user != ADMIN:
            self.assert_error(response, 403, 997)
            return
        vaccine = self.assert_new(response, VACCINES, user)
        audit = {"id": vaccine["id"], "createdAt": vaccine["createdAt"], "modifiedAt": vaccine["createdAt"]}
        fields = dict.fromkeys(one.name for one in REGISTERED[VACCINES].fields)
        assert vaccine == {**audit, "createdBy": user, "modifiedBy": user, **fields, **self.given(VACCINES, body)}
        self.keep(response, VACCINES, user, key, body)

    @rule(
        user=st.sampled_from(USERS),
        bad=st.sampled_from(["name", "description", "duration", "field", "missing"]),
        name=invalid_names,
        description=invalid_prose,
        duration=invalid_durations,
        key=st.sampled_from([None, "k1", "k2"]),
    )
    def create_vaccine_invalid(
        self, user: str, bad: str, name: Any, description: Any, duration: Any, key: str | None
    ) -> None:
        """Validation comes first: 400 naming the field, before the key, and before a non-admin's 403."""
        body: Body = {"name": "Rabies", "petType": "Dog", "duration": 365}
        if bad == "name":
            body["name"] = name
        elif bad == "description":
            body["description"] = description
        elif bad == "duration":
            body["duration"] = duration
        elif bad == "field":
            body["ownerId"] = user
        else:
            del body["duration"]
        field_name = {"field": "ownerId", "missing": "duration"}.get(bad, bad)
        self.touched |= {VACCINES}
        self.assert_invalid(self.client.post(VACCINES, json=body, headers=self.with_key(user, key)), field_name)

    def filter_vaccines(
        self, data: st.DataObject, known: list[Body], params: dict[str, str], filters: list[Callable[[Body], bool]]
    ) -> None:
        """A vaccine's own filters: its type, name and description, group and duration."""
        if data.draw(sometimes, label="by type"):
            types = data.draw(st.lists(pet_types, min_size=1, max_size=3), label="types")
            params["petType"] = ",".join(types)
            filters.append(lambda vaccine: vaccine["petType"] in {canonical_type(pet_type) for pet_type in types})
        self.text_filters(
            data,
            lambda vaccine: [vaccine["name"], *([vaccine["description"]] if vaccine["description"] else [])],
            known,
            params,
            filters,
        )
        if data.draw(sometimes, label="by group"):
            group = data.draw(st.sampled_from(["rabies", " RABIES ", "dhpp"]), label="group")
            params["group"] = group
            filters.append(lambda vaccine: (vaccine["group"] or "").lower() == group.strip().lower())
        for parameter, at_least in (("durationMin", True), ("durationMax", False)):
            if data.draw(sometimes, label=f"by {parameter}"):
                bound = data.draw(st.sampled_from([0, 1, 30, 364, 365, 366, 36_500]), label=parameter)
                params[parameter] = str(bound)
                filters.append(
                    lambda vaccine, bound=bound, at_least=at_least: (
                        vaccine["duration"] >= bound if at_least else vaccine["duration"] <= bound
                    )
                )
        self.declared_filters(REGISTERED[VACCINES], data, known, params, filters)

    # --- pet vaccinations ----------------------------------------------------------------------------

    def draw_references(self, data: st.DataObject, user: str) -> tuple[str, str]:
        """A pet and a vaccine: mostly ones that the user may name together, else any of each (someone else's
        pet, one of another type, a deleted record, an id that never was)."""
        pets = sorted(self.pet_records)
        fitting = [
            (pet_id, vaccine_id)
            for pet_id in pets
            if user == ADMIN or self.pet_records[pet_id].body["ownerId"] == user
            for vaccine_id, vaccine in sorted(self.vaccine_records.items())
            if vaccine.body["petType"] == self.pet_records[pet_id].body["petType"]
        ]
        if fitting and data.draw(st.integers(0, 3), label="fitting") > 0:
            return data.draw(st.sampled_from(fitting), label="pet and vaccine")
        gone = [*sorted(self.deleted[PETS] | self.deleted[VACCINES])[-2:], str(uuid.uuid4())]
        pet_id = data.draw(st.sampled_from(pets + gone), label="petId")
        return pet_id, data.draw(st.sampled_from(sorted(self.vaccine_records) + gone), label="vaccineId")

    @staticmethod
    def draw_times(data: st.DataObject) -> Body:
        """appliedAt and dueAt as sent: dueAt left out, null, or later than appliedAt."""
        sent, applied = data.draw(st.sampled_from([*APPLIED, ("now", "now"), ("ahead", "ahead")]), label="appliedAt")
        if sent in ("now", "ahead"):
            # Up to five minutes after the service's clock (which is this process's) is allowed.
            ahead = timedelta(minutes=4) if sent == "ahead" else timedelta()
            sent = applied = format_time(datetime.now(UTC) + ahead)
        body: Body = {"appliedAt": sent}
        due = data.draw(st.sampled_from(DUE), label="dueAt")
        if due == "null":
            body["dueAt"] = None
        elif isinstance(due, timedelta):
            given = format_time(parse_time(applied) + due)
            body["dueAt"] = with_offset(given) if data.draw(st.booleans(), label="offset") else given
        elif due is not None:
            body["dueAt"] = due
        return body

    @rule(
        user=st.sampled_from(USERS),
        data=st.data(),
        notes=prose,
        key=keys,
        certificate=certificate_fields,
        status=st.sampled_from([{}, {}, {"status": None}, {"status": "entered-in-error"}, {"statusReason": "Why."}]),
    )
    def create_vaccination(
        self,
        user: str,
        data: st.DataObject,
        notes: str | None,
        key: str | None,
        certificate: Body | None = None,
        status: Body | None = None,
    ) -> None:
        certificate, status = certificate or {}, status or {}
        pet_id, vaccine_id = self.draw_references(data, user)
        body: Body = {"petId": pet_id, "vaccineId": vaccine_id, **self.draw_times(data), **certificate, **status}
        if notes is not None:
            body["notes"] = None if notes == "null" else notes
        if data.draw(st.booleans(), label="echo"):
            body.update(self.echoes(VACCINATIONS))

        self.touched |= {VACCINATIONS}
        response = self.client.post(VACCINATIONS, json=body, headers=self.with_key(user, key))

        # The key is looked at after validation, before the references.
        if self.replayed(response, VACCINATIONS, user, key, body):
            return
        given = self.given(VACCINATIONS, body)
        errors = self.reference_errors(user, VACCINATIONS, given)
        if errors:
            self.assert_failure(response, errors)
            return
        blank = {one.name: one.default for one in REGISTERED[VACCINATIONS].fields}
        written = self.written(VACCINATIONS, blank, given, body, patching=False)
        refused = dose_refusal(self, None, None, written)
        if refused:
            self.assert_invalid(response, *refused)
            return
        if self.taken(response, user, VACCINATIONS, written, None):
            return
        created = self.assert_new(response, VACCINATIONS, user)
        audit = {name: created[name] for name in ("id", "createdAt", "createdBy", "modifiedAt", "modifiedBy")}
        expected = {**audit, **written}
        assert created == {**expected, "vaccine": self.vaccine_records[vaccine_id].body}
        record_id = self.keep(response, VACCINATIONS, user, key, body)
        self.vaccination_records[record_id].body = expected

    @rule(
        user=st.sampled_from(USERS),
        bad=st.sampled_from(
            [
                "future",
                "before 1900",
                "not a time",
                "due not later",
                "due earlier",
                "notes",
                "field",
                "petId",
                "missing",
                "lotNumber",
                "rabiesTag",
                "doseType",
                "status",
            ]
        ),
        data=st.data(),
        key=st.sampled_from([None, "k1", "k2"]),
    )
    def create_vaccination_invalid(self, user: str, bad: str, data: st.DataObject, key: str | None) -> None:
        """A body that fails validation is 400 naming the field, before the key and the references."""
        pet_id, vaccine_id = self.draw_references(data, user)
        body: Body = {"petId": pet_id, "vaccineId": vaccine_id, "appliedAt": APPLIED[0][0]}
        invalid: dict[str, tuple[str, Any]] = {
            "future": ("appliedAt", format_time(datetime.now(UTC) + timedelta(days=1))),
            "before 1900": ("appliedAt", "1899-12-31T23:59:59.999Z"),
            "not a time": ("appliedAt", "2025-06-01T09:30:00"),
            "due not later": ("dueAt", APPLIED[1][0]),
            "due earlier": ("dueAt", "2025-06-01T09:29:59.999Z"),
            "notes": ("notes", data.draw(invalid_prose.filter(lambda notes: notes != "x" * 1001), label="notes")),
            "field": ("dose", 2),
            "petId": ("petId", "nope"),
            "missing": ("vaccineId", None),
            "lotNumber": ("lotNumber", "A_1"),
            "rabiesTag": ("rabiesTag", "R 1"),
            "doseType": ("doseType", "second"),
            "status": ("status", "void"),
        }
        name, value = invalid[bad]
        if value is None:
            del body[name]
        else:
            body[name] = value
        self.touched |= {VACCINATIONS}
        self.assert_invalid(self.client.post(VACCINATIONS, json=body, headers=self.with_key(user, key)), name)

    def filter_vaccinations(
        self, data: st.DataObject, known: list[Body], params: dict[str, str], filters: list[Callable[[Body], bool]]
    ) -> None:
        """A dose's own filters, two at most: with its many parameters, a list would otherwise mostly match
        nothing."""
        chosen = data.draw(st.sets(st.sampled_from(VACCINATION_FILTERS), max_size=2), label="filters")
        self.declared_filters(REGISTERED[VACCINATIONS], data, known, params, filters, chosen)
        if "appliedAt" in chosen:
            applied = sorted({record["appliedAt"] for record in known}) or [APPLIED[0][1]]
            exact = data.draw(st.sampled_from(applied), label="appliedAt")
            params["appliedAt"] = with_offset(exact) if data.draw(st.booleans(), label="offset") else exact
            filters.append(lambda record: record["appliedAt"] == exact)
        bounds = {
            "appliedAtMin": ("appliedAt", lambda value, bound: value >= bound),
            "appliedAtMax": ("appliedAt", lambda value, bound: value <= bound),
            "dueFrom": ("dueAt", lambda value, bound: value >= bound),
            "dueTo": ("dueAt", lambda value, bound: value < bound),
        }
        for parameter in sorted(bounds.keys() & chosen):
            name, holds = bounds[parameter]
            instants = sorted({record[name] for record in known}) or [APPLIED[0][1]]
            bound = data.draw(st.sampled_from(instants), label=parameter)
            params[parameter] = bound
            filters.append(lambda record, name=name, holds=holds, bound=bound: holds(record[name], bound))
        self.dose_filters(data, chosen, params, filters)

    @staticmethod
    def dose_filters(
        data: st.DataObject, chosen: set[str], params: dict[str, str], filters: list[Callable[[Body], bool]]
    ) -> None:
        """`status`, `doseType` (one or more, case ignored), `rabiesTag` (case ignored) and `lotNumber` (exactly)."""
        for parameter, values in (("status", ["completed", "entered-in-error"]), ("doseType", ["primary", "BOOSTER"])):
            if parameter in chosen:
                named = data.draw(st.lists(st.sampled_from(values), min_size=1, max_size=2), label=parameter)
                params[parameter] = ",".join(named)
                lowered = {value.lower() for value in named}
                filters.append(lambda record, parameter=parameter, lowered=lowered: record[parameter] in lowered)
        if "rabiesTag" in chosen:
            tag = data.draw(st.sampled_from(["r-1", "T-2", "X-9"]), label="rabiesTag")
            params["rabiesTag"] = tag
            filters.append(lambda record: record["rabiesTag"] == tag.upper())
        if "lotNumber" in chosen:
            lot = data.draw(st.sampled_from(["A1 b/2", "a1 b/2", "L-7"]), label="lotNumber")
            params["lotNumber"] = lot
            filters.append(lambda record: record["lotNumber"] == lot)

    # --- invariants ----------------------------------------------------------------------------------

    @invariant()
    def admin_counts_every_record(self) -> None:
        for path in sorted(self.touched):
            response = self.client.get(path, params={"pageSize": "1"}, headers=self.headers[ADMIN])
            assert response.json()["totalCount"] == len(self.records[path]), path
        self.touched.clear()


def writes(path: str, *, patching: bool) -> Any:
    """The rule that replaces, or updates, a record of `path` (PetRecordsModel.write), once there is one: ids that
    name none are 404 in every rule that picks a record."""

    @precondition(lambda self: bool(self.records[path]))
    @rule(user=st.sampled_from(USERS), data=st.data(), condition=conditions, echo=st.booleans())
    def write(self: PetRecordsModel, user: str, data: st.DataObject, condition: str | None, echo: bool) -> None:
        self.write(path, user, data, condition, echo, patching)

    write.__name__ = f"{'update' if patching else 'replace'}_{REGISTERED[path].name.replace('-', '_')}"
    return write


# Rules of their own for each resource, so that each has as many writes as when the rules were one set per resource.
for _write in (writes(path, patching=patching) for path in PATHS for patching in (False, True)):
    setattr(PetRecordsModel, _write.__name__, _write)


# --- each resource's own rules of a write ----------------------------------------------------------------


def death_refusal(model: PetRecordsModel, pet_id: str | None, stored: Body | None, written: Body) -> list[str]:
    """A pet dies on or after the day it was born (deceasedAt named, or birthDate when only it moved), and not before
    the day of a completed dose of it."""
    born, died = written["birthDate"], written["deceasedAt"]
    if born is not None and died is not None and died < born:
        return ["birthDate" if stored is not None and stored["deceasedAt"] == died else "deceasedAt"]
    if died is not None and pet_id is not None:
        doses = [dose.body for dose in model.of_pet(pet_id) if dose.body["status"] == "completed"]
        if any(day_of(dose["appliedAt"]) > died for dose in doses):
            return ["deceasedAt"]
    return []


def fits_the_pet(model: PetRecordsModel, dose: Body) -> dict[str, list[str]]:
    """A vaccine for the pet's type, not given after the day the pet died."""
    pet, vaccine = model.pet_records[dose["petId"]].body, model.vaccine_records[dose["vaccineId"]].body
    errors = {}
    if vaccine["petType"] != pet["petType"]:
        errors["vaccineId"] = [f"must be a vaccine for the pet's type, {pet['petType']}."]
    if pet["deceasedAt"] is not None and day_of(dose["appliedAt"]) > pet["deceasedAt"]:
        errors["appliedAt"] = [f"must not be after the day the pet died (deceasedAt, UTC), {pet['deceasedAt']}."]
    return errors


def due_after_applied(dose: Body) -> dict[str, list[str]]:
    """The next dose is due after this one was given."""
    if dose.get("dueAt") is not None and dose.get("appliedAt") is not None and dose["dueAt"] <= dose["appliedAt"]:
        return {"dueAt": ["must be later than appliedAt."]}
    return {}


def due_by_vaccine(model: PetRecordsModel, dose: Body) -> Body:
    """dueAt, when not given: appliedAt plus the vaccine's duration as it is now."""
    if "dueAt" in dose:
        return {}
    days = model.vaccine_records[dose["vaccineId"]].body["duration"]
    return {"dueAt": format_time(parse_time(dose["appliedAt"]) + timedelta(days=days))}


def dose_refusal(model: PetRecordsModel, dose_id: str | None, stored: Body | None, written: Body) -> list[str]:
    """Corrections never overwrite, in the order the service names them: a dose entered in error is written no more,
    a new one is completed, a reason goes with entered-in-error alone; and the product had not expired on the day of
    the dose."""
    if stored is not None and stored["status"] == "entered-in-error":
        return ["status"]
    refused = []
    if stored is None and written["status"] != "completed":
        refused.append("status")
    elif (written["status"] == "entered-in-error") == (written["statusReason"] is None):
        refused.append("statusReason")
    if written["lotExpiresOn"] is not None and written["lotExpiresOn"] < day_of(written["appliedAt"]):
        refused.append("lotExpiresOn")
    return refused


def completed_that_year(dose: Body) -> Callable[[Body], bool] | None:
    """A rabies tag belongs to one completed dose a calendar year: a dose not completed shares it with any."""
    if dose["status"] != "completed":
        return None
    return lambda other: other["status"] == "completed" and other["appliedAt"][:4] == dose["appliedAt"][:4]


def not_the_owner(model: PetRecordsModel, share: Body) -> dict[str, list[str]]:
    """A share names someone else than the pet's owner."""
    if share["grantee"] == model.pet_records[share["petId"]].body["ownerId"]:
        return {"grantee": ["must not be the pet's owner, who may do everything already."]}
    return {}


def public_https(webhook: Body) -> list[str]:
    """A webhook's URL is https, to a public address (PETRECORDS_WEBHOOKS_ALLOW_PRIVATE is off)."""
    url = urlsplit(webhook.get("url") or "https://93.184.215.14")
    return [] if url.scheme == "https" and ipaddress.ip_address(url.hostname or "").is_global else ["url"]


Draw = Callable[[PetRecordsModel, st.DataObject, str], Body]


@dataclass(frozen=True)
class Own:
    """A resource's own rules of a write, which its declaration does not say: hooks that the generic rules call, each
    at its place in the contract's order (see PetRecordsModel.write)."""

    values: dict[str, st.SearchStrategy[Any]] = field(default_factory=dict)
    """The values a field is sent with (else its declared example, or null)."""
    together: dict[tuple[str, ...], Draw] = field(default_factory=dict)
    """Members drawn together: a replace sends each group, an update some."""
    check: Callable[[Body], dict[str, list[str]]] | None = None
    """The rules between the fields of one body (Resource.check)."""
    screen: Callable[[Body], list[str]] | None = None
    """The fields refused by the rules that look outside the database (Resource.screen)."""
    complete: Callable[[PetRecordsModel, Body], dict[str, list[str]]] | None = None
    """The rules between a body and the records it refers to (Resource.complete)."""
    derive: Callable[[PetRecordsModel, Body], Body] | None = None
    """The derived fields a write computes when not given."""
    review: Callable[[PetRecordsModel, str | None, Body | None, Body], list[str]] | None = None
    """The fields refused by the rules on a record as written beside the record as stored (Resource.review), and by
    what the records that refer to it require (Reference.requires)."""
    within: Callable[[Body], Callable[[Body], bool] | None] | None = None
    """Which other records a record's unique values are compared with (Unique.within)."""


OWN: dict[str, Own] = {
    **{path: Own() for path in PATHS},
    PETS: Own(
        values={"name": names, "petType": pet_types, **{name: st.sampled_from(one) for name, one in CLINIC.items()}},
        review=death_refusal,
    ),
    VACCINES: Own(
        values={
            "name": names,
            "petType": pet_types,
            "description": st.sampled_from([None, *PROSE]),
            "duration": durations,
            **{name: st.sampled_from(values) for name, values in CATALOGUE.items()},
        }
    ),
    VACCINATIONS: Own(
        values={
            "notes": st.sampled_from([None, *PROSE]),
            **{name: st.sampled_from(one) for name, one in CERTIFICATE.items()},
        },
        together={
            ("petId", "vaccineId"): lambda model, data, user: dict(
                zip(("petId", "vaccineId"), model.draw_references(data, user), strict=True)
            ),
            ("appliedAt", "dueAt"): lambda model, data, user: model.draw_times(data),
            ("status", "statusReason"): lambda model, data, user: data.draw(statuses, label="status"),
        },
        check=due_after_applied,
        complete=fits_the_pet,
        derive=due_by_vaccine,
        review=dose_refusal,
        within=completed_that_year,
    ),
    "/v1/pet-shares": Own(
        values={
            "grantee": st.sampled_from(["group:clinic-42", ALICE, BOB]),
            "access": st.sampled_from(["read", "care", "Care"]),
            "expiresAt": st.sampled_from([None, "2099-01-01T00:00:00.000Z"]),
        },
        complete=not_the_owner,
    ),
    "/v1/webhooks": Own(
        values={
            "url": st.sampled_from(
                ["https://93.184.215.14/petrecords-webhooks", "https://10.0.0.7/hooks", "http://93.184.215.14/hooks"]
            ),
            "events": st.sampled_from([["pets.*"], ["*"], ["pets.*", "pet-vaccination.*", "pets.*"]]),
            # Never enabled: no delivery is tried, and so none fails and disables it.
            "enabled": st.just(False),
        },
        screen=public_https,
    ),
}
"""Every registered resource's own rules of a write: none but what its declaration says, unless named here."""


@pytest.mark.hypothesis
def test_the_service_behaves_like_the_model(sync_client: Client, database_url: str, stateful_part: int) -> None:
    """As many runs, of as many steps, as the Hypothesis profile says (tests/conftest.py)."""
    run_state_machine_as_test(lambda: PetRecordsModel(sync_client, database_url), settings=stateful_settings())
