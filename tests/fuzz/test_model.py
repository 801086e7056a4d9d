"""A model of the contract, driven by hypothesis against the service on each database.

A `RuleBasedStateMachine` creates, reads, replaces, deletes and lists the records of every registered resource
as two users and an admin, with and without If-Match, If-None-Match and Idempotency-Key, and with filters,
sorting and paging. It keeps what the contract says the service holds, and compares every answer with it:
status, error code, body, ETag, ownership, references, history and page counts.

What is alike for every resource is written once and read from the registry's declarations: a read and its
embedded records, a delete (who may, If-Match, what refers to the record: OnDelete.RESTRICT's 409, CASCADE's
deletions), a missing id, a list (visibility by ownership, the filters of references, owner and every list,
the declared sort fields, paging), a history, a transfer's followers, and the counts. A resource without rules
of its own below is created from its declared examples (`create_example`), so that a new resource has that
coverage with no new rule. Pets, vaccines and vaccinations add their own: what their writes hold and refuse,
and their own filters.

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
import math
import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    rule,
    run_state_machine_as_test,
)
from litestar.testing import TestClient

from petrecords.config import DEFAULT_PET_TYPES
from petrecords.registry import RESOURCES
from petrecords.resources.declaration import OnDelete, Resource, Writers
from tests.conftest import stateful_settings
from tests.support import ADMIN, ALICE, BOB, as_read, token, wipe

Client = TestClient[Any]
Body = dict[str, Any]
USERS = (ALICE, BOB, ADMIN)
REGISTERED: dict[str, Resource] = {resource.path: resource for resource in RESOURCES.resources}
"""Every registered resource, by its path: the generic rules (read, delete, list, history, a record made from the
declared examples, the counts) take in each, its references and its ownership from its declaration."""
PATHS = sorted(REGISTERED)
PETS, VACCINES, VACCINATIONS = "/v1/pets", "/v1/vaccines", "/v1/pet-vaccination"
assert {PETS, VACCINES, VACCINATIONS} <= set(REGISTERED)
OWN_RULES = (PETS, VACCINES, VACCINATIONS)
"""The resources whose creates, replaces and updates have rules of their own below (what their fields hold);
every other one is created from its declared examples by `create_example`."""
EXAMPLES_ONLY = [path for path in PATHS if path not in OWN_RULES]
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
prose = st.sampled_from([None, "null", "", "  ", "\n\t", " Core. ", "a\nb", "b\ta", "ab", "AB%", "b_a", "Ba\\"])
# A vaccine's group and manufacturer, each left out, null or given; groups equal but for case and white space.
catalogue_fields = st.fixed_dictionaries(
    {},
    optional={
        "group": st.sampled_from([None, "", " Rabies ", "rabies", "DHPP"]),
        "manufacturer": st.sampled_from([None, "Zoetis", "  "]),
    },
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
CLINIC_FIELDS = ("birthDate", "sex", "neutered", "breed", "microchip", "color", "deceasedAt")
clinic_fields = st.fixed_dictionaries(
    {},
    optional={
        "birthDate": st.sampled_from([None, "2019-04-23", "1900-01-01", "2024-02-29"]),
        "sex": st.sampled_from([None, "female", "MALE", "Unknown"]),
        "neutered": st.sampled_from([None, True, False]),
        "breed": st.sampled_from([None, " Beagle ", "", "border collie"]),
        "microchip": st.sampled_from(
            [
                *(None, "", "982000123456789", "982 000 123 456 789", "982.000-123.456.780"),
                *("0a1b2c3d4e", "0A1B-2C3D-4E", "123*456*789"),
            ]
        ),
        "color": st.sampled_from([None, "", " Black ", "brindle"]),
        "deceasedAt": st.sampled_from([None, "2019-04-23", "2025-06-01", "2026-01-01", "1900-01-01"]),
    },
)
# What a clinic records of a dose, each left out, null or given as a client may spell it; a few rabies tags, so that
# two doses come to claim one, and expiries before and after the days of the doses.
CERTIFICATE_FIELDS = ("lotNumber", "lotExpiresOn", "doseType", "veterinarian", "veterinarianLicence", "clinic")
DOSE_FIELDS = (*CERTIFICATE_FIELDS, "rabiesTag", "status", "statusReason")
certificate_fields = st.fixed_dictionaries(
    {},
    optional={
        "lotNumber": st.sampled_from([None, "", " A1 b/2 ", "L-7"]),
        "lotExpiresOn": st.sampled_from([None, "2020-02-29", "2025-06-01", "2030-01-01", "2030-01-01"]),
        "doseType": st.sampled_from([None, "primary", "BOOSTER"]),
        "veterinarian": st.sampled_from([None, " Dr. Ruiz ", ""]),
        "veterinarianLicence": st.sampled_from([None, "VET-1"]),
        "clinic": st.sampled_from([None, "Riverside\nSpringfield ", "  "]),
        "rabiesTag": st.sampled_from([None, "", "r-1", "R-1", "T-2", "r-1", "R-1"]),
    },
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


def clinic_values(sent: Body) -> Body:
    """The clinic's fields a body sets, as the service keeps them."""
    kept: Body = {}
    for name, value in sent.items():
        if name == "sex" and value is not None:
            value = value.lower()
        elif name in ("breed", "color") and value is not None:
            value = value.strip() or None
        elif name == "microchip" and value is not None:
            value = SEPARATORS.sub("", value).upper() or None
        kept[name] = value
    return kept


def dose_values(sent: Body) -> Body:
    """The fields of a clinic's record of a dose that a body sets, as the service keeps them (a null status is not
    given)."""
    kept: Body = {}
    for name, value in sent.items():
        if name not in DOSE_FIELDS or (name == "status" and value is None):
            continue
        if isinstance(value, str):
            value = value.strip(" \t\n") or None
            if value is not None and name in ("doseType", "status"):
                value = value.lower()
            elif value is not None and name == "rabiesTag":
                value = value.upper()
        kept[name] = value
    return kept


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


def clean_prose(text: str | None) -> str | None:
    return None if text is None else text.strip(" \t\n") or None


def parse_time(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%f%z")


def format_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def with_offset(canonical: str) -> str:
    """The same instant written with a +01:00 offset."""
    moment = parse_time(canonical).astimezone(UTC) + timedelta(hours=1)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "+01:00"


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


PET_NOT_SEEN = "must be the id of a pet you may see."
NO_VACCINE = "must be the id of an existing vaccine."


class PetRecordsModel(RuleBasedStateMachine):
    pets = Bundle("pets")

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

    def of_vaccine(self, vaccine_id: str) -> list[Record]:
        return [record for record in self.vaccination_records.values() if record.body["vaccineId"] == vaccine_id]

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

    def chip_taken(self, response: Any, user: str, microchip: str | None, pet_id: str | None) -> bool:
        """Whether another pet has the microchip code (checked here): 409, with the other pet's Location when
        the caller may see it."""
        other = next(
            (
                other_id
                for other_id, other in self.pet_records.items()
                if microchip is not None and other_id != pet_id and other.body["microchip"] == microchip
            ),
            None,
        )
        if other is None:
            return False
        self.assert_error(response, 409, 982)
        if self.visible(user, PETS, other) is not None:
            assert response.headers["location"] == f"{PETS}/{other}"
        else:
            assert "location" not in response.headers
        return True

    def tag_taken(self, response: Any, user: str, dose: Body, dose_id: str | None) -> bool:
        """Whether another completed dose applied in the same calendar year has the dose's rabies tag (checked
        here): 409, with the other dose's Location when the caller may see it."""
        if dose["rabiesTag"] is None or dose["status"] != "completed":
            return False
        other = next(
            (
                other_id
                for other_id, other in sorted(self.vaccination_records.items())
                if other_id != dose_id
                and other.body["rabiesTag"] == dose["rabiesTag"]
                and other.body["status"] == "completed"
                and other.body["appliedAt"][:4] == dose["appliedAt"][:4]
            ),
            None,
        )
        if other is None:
            return False
        self.assert_error(response, 409, 982)
        if self.visible(user, VACCINATIONS, other) is not None:
            assert response.headers["location"] == f"{VACCINATIONS}/{other}"
        else:
            assert "location" not in response.headers
        return True

    def death_refused(self, response: Any, pet_id: str | None, stored: Body | None, written: Body) -> bool:
        """Whether a write of a pet would have it die before it was born, or before the day of a completed dose of
        it (checked here): 400 naming deceasedAt (birthDate, when only the birth date moved)."""
        born, died = written["birthDate"], written["deceasedAt"]
        named = None
        if born is not None and died is not None and died < born:
            named = "birthDate" if stored is not None and stored["deceasedAt"] == died else "deceasedAt"
        elif died is not None and pet_id is not None:
            doses = [dose.body for dose in self.of_pet(pet_id) if dose.body["status"] == "completed"]
            if any(day_of(dose["appliedAt"]) > died for dose in doses):
                named = "deceasedAt"
        if named is None:
            return False
        self.assert_invalid(response, named)
        return True

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
            target = reference.target.path
            ids = sorted(self.records[target])
            ownership = reference.target.ownership
            fitting = [
                record_id
                for record_id in ids
                if self.sees(user, target, self.records[target][record_id])
                and (
                    not reference.owned
                    or user == ADMIN
                    or self.records[target][record_id].body[ownership.field] == user
                )
            ]
            named = data.draw(st.sampled_from(fitting * 4 + ids + [str(uuid.uuid4())]), label=reference.field)
            body[reference.field] = named
            if named not in fitting:
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

    # --- pets ----------------------------------------------------------------------------------------

    @initialize(
        target=pets,
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
    ) -> Any:
        """Some records to begin with, so that reads and lists have something to find from the start: pets, a
        catalogue (a vaccine for dogs and one for cats, as most pets are either, and others), vaccinations."""
        assert self.client.get(PETS, headers=self.headers[ADMIN]).json()["totalCount"] == 0
        pet_ids = [
            self.create(user, name, pet_type, None, None, echo=False, clinic={}) for user, name, pet_type in seeds
        ]
        dog, cat = durations
        for name, pet_type, duration in [("Rabies", "Dog", dog), ("Feline", "Cat", cat), *catalogue]:
            self.create_vaccine(ADMIN, name, pet_type, None, duration, None, echo=False)
        for _ in range(data.draw(st.integers(1, 6), label="vaccinations")):
            user = data.draw(st.sampled_from(USERS), label="user")
            self.create_vaccination(user, data, notes=None, key=None)
        return multiple(*pet_ids)

    @rule(
        target=pets,
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
    ) -> Any:
        body: Body = {"name": name, "petType": pet_type, **self.owner_field(user, owner), **clinic}
        if echo:  # read-only fields a client sends back are ignored, whatever they say
            body.update({"id": str(uuid.uuid4()), "createdAt": "1999-01-01T00:00:00.000Z", "modifiedBy": BOB})

        self.touched |= {PETS}
        response = self.client.post(PETS, json=body, headers=self.with_key(user, key))

        if self.replayed(response, PETS, user, key, body):
            return multiple()
        kept = {**dict.fromkeys(CLINIC_FIELDS), **clinic_values(clinic)}
        # The contract's order: 400, then 403, then 409.
        if self.death_refused(response, None, None, kept):
            return multiple()
        named = body.get("ownerId")
        owner_id = named.lower() if named is not None else user
        if owner_id != user and user != ADMIN:
            self.assert_error(response, 403, 997)
            return multiple()
        if self.chip_taken(response, user, kept["microchip"], None):
            return multiple()
        pet = self.assert_new(response, PETS, user)
        assert pet == {
            "id": pet["id"],
            "createdAt": pet["createdAt"],
            "createdBy": user,
            "modifiedAt": pet["createdAt"],
            "modifiedBy": user,
            "ownerId": owner_id,
            "name": name.strip(" \t\n"),
            "petType": canonical_type(pet_type),
            **kept,
        }
        return self.keep(response, PETS, user, key, body)

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
        pet_id=pets,
        name=names,
        pet_type=pet_types,
        owner=st.sampled_from([None, "null", "self", "SELF", ALICE, BOB, ADMIN]),
        condition=conditions,
        echo_id=st.booleans(),
        clinic=clinic_fields,
    )
    def replace(
        self,
        user: str,
        pet_id: str,
        name: str,
        pet_type: str,
        owner: str | None,
        condition: str | None,
        echo_id: bool,
        clinic: Body,
    ) -> None:
        """A replace: an optional field left out keeps its value, null clears it."""
        record = self.visible(user, PETS, pet_id)
        body: Body = {"name": name, "petType": pet_type, **self.owner_field(user, owner), **clinic}
        if echo_id:
            body["id"] = pet_id

        self.touched |= {PETS, VACCINATIONS}
        response = self.client.put(
            f"{PETS}/{pet_id}", json=body, headers=self.with_condition(user, "If-Match", record, condition)
        )

        # The contract's order: 404, then 400 (rules on the stored record), 403, 412 and 409.
        if record is None:
            self.assert_error(response, 404, 995)
            return
        kept = clinic_values(clinic)
        if self.death_refused(response, pet_id, record.body, {**record.body, **kept}):
            return
        named = body.get("ownerId")
        owner_id = named.lower() if named is not None else record.body["ownerId"]
        if owner_id != user and user != ADMIN and named is not None:
            self.assert_error(response, 403, 997)
            return
        if not self.if_match_holds(record, condition):
            self.assert_error(response, 412, 992)
            return
        if self.chip_taken(response, user, kept.get("microchip"), pet_id):
            return
        moved = owner_id != record.body["ownerId"]
        expected = {"name": name.strip(" \t\n"), "petType": canonical_type(pet_type), "ownerId": owner_id, **kept}
        self.check_replaced(response, PETS, user, record, expected)
        if moved:
            self.transferred(PETS, pet_id, owner_id)

    @rule(
        user=st.sampled_from(USERS),
        pet_id=pets,
        name=st.none() | names,
        pet_type=st.none() | pet_types,
        owner=st.sampled_from([None, "null", "self", ALICE, BOB]),
        condition=conditions,
        clinic=clinic_fields,
    )
    def update(
        self,
        user: str,
        pet_id: str,
        name: str | None,
        pet_type: str | None,
        owner: str | None,
        condition: str | None,
        clinic: Body,
    ) -> None:
        """A JSON Merge Patch of a pet: the members it names change, the rest stay; the rules of a replace."""
        record = self.visible(user, PETS, pet_id)
        patch: Body = {**self.owner_field(user, owner), **clinic}
        if name is not None:
            patch["name"] = name
        if pet_type is not None:
            patch["petType"] = pet_type

        self.touched |= {PETS, VACCINATIONS}
        response = self.client.patch(
            f"{PETS}/{pet_id}", json=patch, headers=self.with_condition(user, "If-Match", record, condition)
        )

        if record is None:
            self.assert_error(response, 404, 995)
            return
        kept = clinic_values(clinic)
        if self.death_refused(response, pet_id, record.body, {**record.body, **kept}):
            return
        named = patch.get("ownerId")
        owner_id = named.lower() if named is not None else record.body["ownerId"]
        if owner_id != user and user != ADMIN and named is not None:
            self.assert_error(response, 403, 997)
            return
        if not self.if_match_holds(record, condition):
            self.assert_error(response, 412, 992)
            return
        if self.chip_taken(response, user, kept.get("microchip"), pet_id):
            return
        moved = owner_id != record.body["ownerId"]
        expected = {
            "name": name.strip(" \t\n") if name is not None else record.body["name"],
            "petType": canonical_type(pet_type) if pet_type is not None else record.body["petType"],
            "ownerId": owner_id,
            **kept,
        }
        self.check_replaced(response, PETS, user, record, expected)
        if moved:
            self.transferred(PETS, pet_id, owner_id)

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

    @rule(user=st.sampled_from(USERS), pet_id=pets, bad=st.sampled_from(["name", "id", "If-Match"]), name=invalid_names)
    def replace_invalid(self, user: str, pet_id: str, bad: str, name: Any) -> None:
        """A body or If-Match that fails validation is 400 whoever asks, before the record is looked up."""
        body: Body = {"name": name if bad == "name" else "Rex", "petType": "Dog"}
        headers = dict(self.headers[user])
        if bad == "id":
            body["id"] = str(uuid.uuid4())
        elif bad == "If-Match":
            headers["If-Match"] = "not-quoted"
        self.touched |= {PETS}
        self.assert_error(self.client.put(f"{PETS}/{pet_id}", json=body, headers=headers), 400, 994)

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

    @staticmethod
    def catalogue_values(body: Body, before: Body | None) -> Body:
        """A vaccine's group and manufacturer as a body leaves them: trimmed, blank is null, an omitted one kept."""
        return {
            name: (body[name].strip() or None if isinstance(body[name], str) else None)
            if name in body
            else (before[name] if before is not None else None)
            for name in ("group", "manufacturer")
        }

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
        assert vaccine == {
            "id": vaccine["id"],
            "createdAt": vaccine["createdAt"],
            "createdBy": user,
            "modifiedAt": vaccine["createdAt"],
            "modifiedBy": user,
            "name": name.strip(" \t\n"),
            "description": clean_prose(body.get("description")),
            "petType": canonical_type(pet_type),
            "duration": duration,
            **self.catalogue_values(body, None),
        }
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

    @rule(
        user=st.sampled_from([ADMIN, ADMIN, ALICE]),
        data=st.data(),
        name=names,
        pet_type=pet_types,
        description=prose,
        duration=durations,
        condition=conditions,
        echo_id=st.booleans(),
        catalogue=catalogue_fields,
    )
    def replace_vaccine(
        self,
        user: str,
        data: st.DataObject,
        name: str,
        pet_type: str,
        description: str | None,
        duration: int,
        condition: str | None,
        echo_id: bool,
        catalogue: Body,
    ) -> None:
        vaccine_id = self.pick(data, VACCINES)
        record = self.visible(user, VACCINES, vaccine_id)
        body = self.vaccine_body(name, pet_type, description, duration, catalogue)
        if echo_id:
            body["id"] = vaccine_id

        self.touched |= {VACCINES}
        response = self.client.put(
            f"{VACCINES}/{vaccine_id}", json=body, headers=self.with_condition(user, "If-Match", record, condition)
        )

        if record is None:
            self.assert_error(response, 404, 995)
            return
        if user != ADMIN:
            self.assert_error(response, 403, 997)
            return
        if not self.if_match_holds(record, condition):
            self.assert_error(response, 412, 992)
            return
        expected = {
            "name": name.strip(" \t\n"),
            # An omitted description keeps its stored value; null clears it (contract v3 section 3).
            "description": clean_prose(body["description"]) if "description" in body else record.body["description"],
            "petType": canonical_type(pet_type),
            "duration": duration,
            **self.catalogue_values(body, record.body),
        }
        self.check_replaced(response, VACCINES, user, record, expected)
        # The vaccinations that embed it show it as it is now, under a new ETag; their dueAt stays.
        for vaccination in self.of_vaccine(vaccine_id):
            vaccination.changed()

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
    def draw_times(data: st.DataObject) -> tuple[Body, str, str | None]:
        """appliedAt and dueAt as sent (dueAt may be left out), appliedAt as returned, dueAt as given."""
        sent, applied = data.draw(st.sampled_from([*APPLIED, ("now", "now"), ("ahead", "ahead")]), label="appliedAt")
        if sent in ("now", "ahead"):
            # Up to five minutes after the service's clock (which is this process's) is allowed.
            ahead = timedelta(minutes=4) if sent == "ahead" else timedelta()
            sent = applied = format_time(datetime.now(UTC) + ahead)
        body: Body = {"appliedAt": sent}
        due = data.draw(st.sampled_from(DUE), label="dueAt")
        given: str | None = None
        if due == "null":
            body["dueAt"] = None
        elif isinstance(due, timedelta):
            given = format_time(parse_time(applied) + due)
            body["dueAt"] = with_offset(given) if data.draw(st.booleans(), label="offset") else given
        elif due is not None:
            body["dueAt"] = given = due
        return body, applied, given

    def vaccination_errors(
        self, user: str, pet_id: str, vaccine_id: str, applied: str | None = None
    ) -> dict[str, list[str]]:
        """The references' answer: a pet the user may not see is alike whether it exists or not; then the rules
        between the dose and its records: a vaccine for the pet's type, not given after the day the pet died."""
        pet = self.visible(user, PETS, pet_id)
        vaccine = self.vaccine_records.get(vaccine_id)
        errors = {
            **({"petId": [PET_NOT_SEEN]} if pet is None else {}),
            **({"vaccineId": [NO_VACCINE]} if vaccine is None else {}),
        }
        if not errors and pet is not None and vaccine is not None:
            pet_type = pet.body["petType"]
            if vaccine.body["petType"] != pet_type:
                errors["vaccineId"] = [f"must be a vaccine for the pet's type, {pet_type}."]
            died = pet.body["deceasedAt"]
            if applied is not None and died is not None and day_of(applied) > died:
                errors["appliedAt"] = [f"must not be after the day the pet died (deceasedAt, UTC), {died}."]
        return errors

    @staticmethod
    def dose_refusal(stored: Body | None, written: Body) -> list[str]:
        """The fields that the rules between a dose as written and as stored refuse (None: a create), in the order
        the service names them: a dose entered in error is written no more, a new one is completed, a reason goes
        with entered-in-error alone, and the product had not expired on the day of the dose."""
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

    def vaccination_fields(
        self, pet_id: str, vaccine_id: str, applied: str, due: str | None, notes: Any, dose: Body
    ) -> Body:
        """What a valid write stores: dueAt, when not given, is appliedAt plus the vaccine's duration now; the
        clinic's fields of the dose as `dose` has them."""
        if due is None:
            days = self.vaccine_records[vaccine_id].body["duration"]
            due = format_time(parse_time(applied) + timedelta(days=days))
        return {
            "ownerId": self.pet_records[pet_id].body["ownerId"],
            "petId": pet_id,
            "vaccineId": vaccine_id,
            "appliedAt": applied,
            "dueAt": due,
            "notes": clean_prose(notes),
            **{name: dose[name] for name in DOSE_FIELDS},
        }

    @staticmethod
    def echoed(body: Body, data: st.DataObject) -> None:
        """Read-only fields, the embedded vaccine and the pet, sent back as clients do: ignored."""
        if data.draw(st.booleans(), label="echo"):
            body.update({"ownerId": BOB, "createdBy": BOB, "vaccine": None, "pet": {"name": "Rex"}})

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
        pet_id, vaccine_id = self.draw_references(data, user)
        times, applied, due = self.draw_times(data)
        body: Body = {"petId": pet_id, "vaccineId": vaccine_id, **times, **(certificate or {}), **(status or {})}
        if notes is not None:
            body["notes"] = None if notes == "null" else notes
        self.echoed(body, data)

        self.touched |= {VACCINATIONS}
        response = self.client.post(VACCINATIONS, json=body, headers=self.with_key(user, key))

        # The key is looked at after validation, before the references.
        if self.replayed(response, VACCINATIONS, user, key, body):
            return
        errors = self.vaccination_errors(user, pet_id, vaccine_id, applied)
        if errors:
            assert response.status_code == 400, response.text
            assert response.json() == validation_failure(errors)
            return
        dose = {**dict.fromkeys(DOSE_FIELDS), "status": "completed", **dose_values(body), "appliedAt": applied}
        refused = self.dose_refusal(None, dose)
        if refused:
            self.assert_invalid(response, *refused)
            return
        if self.tag_taken(response, user, dose, None):
            return
        created = self.assert_new(response, VACCINATIONS, user)
        audit = {name: created[name] for name in ("id", "createdAt", "createdBy", "modifiedAt", "modifiedBy")}
        fields = self.vaccination_fields(pet_id, vaccine_id, applied, due, body.get("notes"), dose)
        expected = {**audit, **fields}
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

    @rule(
        user=st.sampled_from(USERS),
        data=st.data(),
        notes=prose,
        condition=conditions,
        echo_id=st.booleans(),
        certificate=certificate_fields,
        status=statuses,
    )
    def replace_vaccination(
        self,
        user: str,
        data: st.DataObject,
        notes: str | None,
        condition: str | None,
        echo_id: bool,
        certificate: Body,
        status: Body,
    ) -> None:
        vaccination_id = self.pick(data, VACCINATIONS)
        record = self.visible(user, VACCINATIONS, vaccination_id)
        pet_id, vaccine_id = self.draw_references(data, user)
        times, applied, due = self.draw_times(data)
        body: Body = {"petId": pet_id, "vaccineId": vaccine_id, **times, **certificate, **status}
        if notes is not None:
            body["notes"] = None if notes == "null" else notes
        if echo_id:
            body["id"] = vaccination_id
        self.echoed(body, data)

        self.touched |= {VACCINATIONS}
        response = self.client.put(
            f"{VACCINATIONS}/{vaccination_id}",
            json=body,
            headers=self.with_condition(user, "If-Match", record, condition),
        )

        # The contract's order: the references (400) come before 404, then the rules on the stored record (400),
        # 412 and 409.
        errors = self.vaccination_errors(user, pet_id, vaccine_id, applied)
        if errors:
            assert response.status_code == 400, response.text
            assert response.json() == validation_failure(errors)
            return
        if record is None:
            self.assert_error(response, 404, 995)
            return
        dose = {**{name: record.body[name] for name in DOSE_FIELDS}, **dose_values(body), "appliedAt": applied}
        refused = self.dose_refusal(record.body, dose)
        if refused:
            self.assert_invalid(response, *refused)
            return
        if not self.if_match_holds(record, condition):
            self.assert_error(response, 412, 992)
            return
        if self.tag_taken(response, user, dose, vaccination_id):
            return
        # Omitted notes keep their stored value; null clears them (contract v3 section 3).
        notes_after = body["notes"] if "notes" in body else record.body["notes"]
        expected = self.vaccination_fields(pet_id, vaccine_id, applied, due, notes_after, dose)
        self.check_replaced(response, VACCINATIONS, user, record, expected)

    @rule(
        user=st.sampled_from(USERS),
        data=st.data(),
        notes=st.sampled_from([None, "null", " Left leg. "]),
        due=st.sampled_from([None, "null", "2099-01-01T00:00:00.000Z"]),
        condition=conditions,
        dose=st.fixed_dictionaries(
            {},
            optional={
                "rabiesTag": st.sampled_from([None, "r-1", "T-2"]),
                "lotExpiresOn": st.sampled_from([None, "2020-02-29", "2030-01-01"]),
            },
        ),
        status=statuses,
    )
    def update_vaccination(
        self,
        user: str,
        data: st.DataObject,
        notes: str | None,
        due: str | None,
        condition: str | None,
        dose: Body,
        status: Body,
    ) -> None:
        """A JSON Merge Patch: only the members it names change; `dueAt: null` computes it again from the vaccine
        as it is now."""
        vaccination_id = self.pick(data, VACCINATIONS)
        record = self.visible(user, VACCINATIONS, vaccination_id)
        patch: Body = {}
        if notes is not None:
            patch["notes"] = None if notes == "null" else notes
        if due is not None:
            patch["dueAt"] = None if due == "null" else due
        patch.update(dose, **status)

        self.touched |= {VACCINATIONS}
        response = self.client.patch(
            f"{VACCINATIONS}/{vaccination_id}",
            json=patch,
            headers=self.with_condition(user, "If-Match", record, condition),
        )

        if record is None:
            self.assert_error(response, 404, 995)
            return
        # The stored record with the patch applied is checked as a replace: its vaccine may fit its pet no more
        # (either's type changed since), and then the patch is refused as that replace would be.
        before = record.body
        errors = self.vaccination_errors(user, before["petId"], before["vaccineId"], before["appliedAt"])
        if errors:
            assert self.assert_error(response, 400, 994)["errors"] == errors
            return
        written = {
            **{name: before[name] for name in DOSE_FIELDS},
            **dose_values(patch),
            "appliedAt": before["appliedAt"],
        }
        refused = self.dose_refusal(before, written)
        if refused:
            self.assert_invalid(response, *refused)
            return
        if not self.if_match_holds(record, condition):
            self.assert_error(response, 412, 992)
            return
        if self.tag_taken(response, user, written, vaccination_id):
            return
        kept_due = None if "dueAt" in patch and patch["dueAt"] is None else patch.get("dueAt", before["dueAt"])
        expected = self.vaccination_fields(
            before["petId"],
            before["vaccineId"],
            before["appliedAt"],
            kept_due,
            patch.get("notes", before["notes"]),
            written,
        )
        self.check_replaced(response, VACCINATIONS, user, record, expected)

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


@pytest.mark.hypothesis
def test_the_service_behaves_like_the_model(sync_client: Client, database_url: str, stateful_part: int) -> None:
    """As many runs, of as many steps, as the Hypothesis profile says (tests/conftest.py)."""
    run_state_machine_as_test(lambda: PetRecordsModel(sync_client, database_url), settings=stateful_settings())
