"""A model of the contract, driven by hypothesis against the service on each database.

A `RuleBasedStateMachine` creates, reads, replaces, deletes and lists records as two users and an admin,
with and without If-Match, If-None-Match and Idempotency-Key, and with filters, sorting and paging. It
keeps what the contract says the service holds, and compares every answer with it: status, error code,
body, ETag, ownership and page counts.
"""

from __future__ import annotations

import asyncio
import functools
import math
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
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
from tests.support import ADMIN, ALICE, BOB, token, wipe

Client = TestClient[Any]
Pet = dict[str, Any]
USERS = (ALICE, BOB, ADMIN)
SORT_FIELDS = ("id", "name", "petType", "ownerId", "createdAt", "createdBy", "modifiedAt", "modifiedBy")
TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")
MACHINE_SETTINGS = settings(
    max_examples=25,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Names from a small alphabet, so that filters and sorting meet equal, case-different and wildcard names.
NAME_CHARACTERS = "abAB _%\\"
names = st.builds(
    lambda left, name, right: left + name + right,
    st.sampled_from(["", " ", "\t"]),
    st.text(NAME_CHARACTERS, min_size=1, max_size=5).filter(lambda name: name.strip(" ") != ""),
    st.sampled_from(["", " ", "\n"]),
)
invalid_names: st.SearchStrategy[Any] = st.sampled_from(["", "   ", "a\x00b", "x" * 101, "tab\tinside", 7, None])
pet_types = st.sampled_from(DEFAULT_PET_TYPES).flatmap(
    lambda spelling: st.sampled_from([spelling, spelling.lower(), spelling.upper()])
)
# Who a body names as the owner: nobody (left out or null), the caller (in any case), or a given user.
owners = st.sampled_from([None, "null", "self", "SELF", ALICE, BOB, ADMIN])
# The preconditions a request can carry: the record's ETag, its weak form, an older one, or `*`.
conditions = st.sampled_from([None, None, "current", "weak", "stale", "*"])
sometimes = st.integers(0, 4).map(lambda n: n == 0)


@dataclass
class Record:
    body: Pet
    etag: str
    # Every ETag the record ever had: a write must never bring one back.
    etags: set[str] = field(default_factory=set)


@dataclass
class Replay:
    request: Any
    body: bytes
    location: str
    etag: str


def canonical_type(spelling: str) -> str:
    return next(pet_type for pet_type in DEFAULT_PET_TYPES if pet_type.lower() == spelling.lower())


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


def ordering(keys: list[tuple[str, bool]]) -> Callable[[Pet, Pet], int]:
    """The contract's total order: the given fields (text case-insensitively), then the id ascending."""
    if all(name != "id" for name, _ in keys):
        keys = [*keys, ("id", False)]

    def value(pet: Pet, name: str) -> str:
        return str(pet[name]).lower() if name in ("name", "petType") else str(pet[name])

    def compare(left: Pet, right: Pet) -> int:
        for name, descending in keys:
            a, b = value(left, name), value(right, name)
            if a != b:
                return (1 if a > b else -1) * (-1 if descending else 1)
        return 0

    return compare


class PetRecordsModel(RuleBasedStateMachine):
    pets = Bundle("pets")

    def __init__(self, client: Client, database_url: str) -> None:
        super().__init__()
        self.client = client
        # Made here, not at import: a token lives ten minutes, and a whole test session takes longer.
        self.headers = {user: {"Authorization": f"Bearer {token(user, admin=user == ADMIN)}"} for user in USERS}
        asyncio.run(wipe(database_url))
        self.records: dict[str, Record] = {}
        self.deleted: set[str] = set()
        self.replays: dict[tuple[str, str], Replay] = {}

    # --- what the model expects --------------------------------------------------------------------

    def visible(self, user: str, pet_id: str) -> Record | None:
        """Someone else's record is, to a non-admin, exactly like one that does not exist."""
        record = self.records.get(pet_id)
        if record is None or (user != ADMIN and record.body["ownerId"] != user):
            return None
        return record

    @staticmethod
    def conditional(record: Record | None, condition: str | None) -> str | None:
        etag = record.etag if record is not None else '"0000"'
        older = sorted(record.etags - {etag}) if record is not None else []
        values = {
            "current": etag,
            "weak": f"W/{etag}",
            "stale": f'{(older or [chr(34) * 2])[0]}, "other"',
            "*": "*",
        }
        return values.get(condition) if condition else None

    @staticmethod
    def owner_field(user: str, owner: str | None) -> dict[str, Any]:
        if owner is None:
            return {}
        named = {"null": None, "self": user, "SELF": user.upper()}
        return {"ownerId": named.get(owner, owner)}

    @staticmethod
    def assert_error(response: Any, status: int, code: int) -> None:
        assert response.status_code == status, (status, response.status_code, response.text)
        body = response.json()
        assert body["code"] == code, body
        assert set(body) <= {"code", "message", "errors"}, body

    @staticmethod
    def assert_record(response: Any, record: Record) -> None:
        assert response.status_code == 200, response.text
        assert response.json() == record.body
        assert response.headers["etag"] == record.etag

    # --- rules -------------------------------------------------------------------------------------

    @initialize(target=pets, seeds=st.lists(st.tuples(st.sampled_from(USERS), names, pet_types), max_size=6))
    def starts_with(self, seeds: list[tuple[str, str, str]]) -> Any:
        """Some records to begin with, so that reads and lists have something to find from the start."""
        assert self.client.get("/v1/pets", headers=self.headers[ADMIN]).json()["totalCount"] == 0
        return multiple(*(self.create(user, name, pet_type, None, None, echo=False) for user, name, pet_type in seeds))

    @rule(
        target=pets,
        user=st.sampled_from(USERS),
        name=names,
        pet_type=pet_types,
        owner=owners,
        key=st.sampled_from([None, None, "k1", "k2"]),
        echo=st.booleans(),
    )
    def create(self, user: str, name: str, pet_type: str, owner: str | None, key: str | None, echo: bool) -> Any:
        body: dict[str, Any] = {"name": name, "petType": pet_type, **self.owner_field(user, owner)}
        if echo:  # read-only fields a client sends back are ignored, whatever they say
            body.update({"id": str(uuid.uuid4()), "createdAt": "1999-01-01T00:00:00.000Z", "modifiedBy": BOB})
        headers = {**self.headers[user], **({"Idempotency-Key": key} if key else {})}

        response = self.client.post("/v1/pets", json=body, headers=headers)

        replay = self.replays.get((user, key)) if key else None
        if replay is not None:
            # The same key: the first answer again, or 422 for another body (before the owner is checked).
            if replay.request != body:
                self.assert_error(response, 422, 990)
                return multiple()
            assert response.status_code == 201
            assert response.content == replay.body
            assert response.headers["idempotent-replayed"] == "true"
            assert (response.headers["location"], response.headers["etag"]) == (replay.location, replay.etag)
            return multiple()
        named = body.get("ownerId")
        owner_id = named.lower() if named is not None else user
        if owner_id != user and user != ADMIN:
            self.assert_error(response, 403, 997)
            return multiple()
        assert response.status_code == 201, response.text
        assert "idempotent-replayed" not in response.headers
        pet = response.json()
        pet_id = pet["id"]
        assert uuid.UUID(pet_id).version == 7
        assert pet_id == str(uuid.UUID(pet_id))
        assert pet_id not in self.records
        assert pet_id not in self.deleted
        assert TIMESTAMP.fullmatch(pet["createdAt"])
        assert pet == {
            "id": pet_id,
            "createdAt": pet["createdAt"],
            "createdBy": user,
            "modifiedAt": pet["createdAt"],
            "modifiedBy": user,
            "ownerId": owner_id,
            "name": name.strip(" \t\n"),
            "petType": canonical_type(pet_type),
        }
        assert response.headers["location"] == f"/v1/pets/{pet_id}"
        etag = response.headers["etag"]
        self.records[pet_id] = Record(body=pet, etag=etag, etags={etag})
        if key:
            self.replays[(user, key)] = Replay(body, response.content, response.headers["location"], etag)
        return pet_id

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
        headers = {**self.headers[user], **({"Idempotency-Key": key} if key else {})}
        self.assert_error(self.client.post("/v1/pets", json=body, headers=headers), 400, 994)

    @rule(
        user=st.sampled_from(USERS),
        pet_id=pets,
        condition=conditions,
    )
    def get(self, user: str, pet_id: str, condition: str | None) -> None:
        record = self.visible(user, pet_id)
        value = self.conditional(record, condition)
        headers = {**self.headers[user], **({"If-None-Match": value} if value else {})}

        response = self.client.get(f"/v1/pets/{pet_id}", headers=headers)

        if record is None:
            self.assert_error(response, 404, 995)
        elif condition in ("current", "weak", "*"):  # If-None-Match compares weakly
            assert response.status_code == 304, response.text
            assert response.content == b""
            assert response.headers["etag"] == record.etag
        else:
            self.assert_record(response, record)

    @rule(
        user=st.sampled_from(USERS),
        pet_id=pets,
        name=names,
        pet_type=pet_types,
        owner=owners,
        condition=conditions,
        echo_id=st.booleans(),
    )
    def replace(
        self, user: str, pet_id: str, name: str, pet_type: str, owner: str | None, condition: str | None, echo_id: bool
    ) -> None:
        record = self.visible(user, pet_id)
        body: dict[str, Any] = {"name": name, "petType": pet_type, **self.owner_field(user, owner)}
        if echo_id:
            body["id"] = pet_id
        value = self.conditional(record, condition)
        headers = {**self.headers[user], **({"If-Match": value} if value else {})}

        response = self.client.put(f"/v1/pets/{pet_id}", json=body, headers=headers)

        # The contract's order: 404, then 403, then 412.
        if record is None:
            self.assert_error(response, 404, 995)
            return
        named = body.get("ownerId")
        owner_id = named.lower() if named is not None else record.body["ownerId"]
        if owner_id != user and user != ADMIN and named is not None:
            self.assert_error(response, 403, 997)
            return
        if condition in ("weak", "stale"):  # If-Match compares strongly
            self.assert_error(response, 412, 992)
            return
        assert response.status_code == 200, response.text
        pet = response.json()
        before = record.body
        assert pet["modifiedAt"] >= before["modifiedAt"]
        assert pet == {
            **before,
            "name": name.strip(" \t\n"),
            "petType": canonical_type(pet_type),
            "ownerId": owner_id,
            "modifiedBy": user,
            "modifiedAt": pet["modifiedAt"],
        }
        etag = response.headers["etag"]
        assert etag not in record.etags, "every write gives the record a new ETag"
        record.body, record.etag = pet, etag
        record.etags.add(etag)

    @rule(
        user=st.sampled_from(USERS),
        method=st.sampled_from(["GET", "PUT", "DELETE"]),
        pet_id=st.sampled_from([str(uuid.uuid4()), "not-an-id", "01890A5D-AC96-774B-BCCE-B302099A8057", "%20"]),
        condition=st.sampled_from([None, "*"]),
    )
    def missing(self, user: str, method: str, pet_id: str, condition: str | None) -> None:
        """An id that names no record, or is no id at all, is 404 for every operation."""
        headers = {
            **self.headers[user],
            **({"If-Match" if method != "GET" else "If-None-Match": "*"} if condition else {}),
        }
        body = {"json": {"name": "Rex", "petType": "Dog"}} if method == "PUT" else {}
        response = self.client.request(method, f"/v1/pets/{pet_id}", headers=headers, **body)
        self.assert_error(response, 404, 995)

    @rule(user=st.sampled_from(USERS), pet_id=pets, bad=st.sampled_from(["name", "id", "If-Match"]), name=invalid_names)
    def replace_invalid(self, user: str, pet_id: str, bad: str, name: Any) -> None:
        """A body or If-Match that fails validation is 400 whoever asks, before the record is looked up."""
        body: dict[str, Any] = {"name": name if bad == "name" else "Rex", "petType": "Dog"}
        headers = dict(self.headers[user])
        if bad == "id":
            body["id"] = str(uuid.uuid4())
        elif bad == "If-Match":
            headers["If-Match"] = "not-quoted"
        self.assert_error(self.client.put(f"/v1/pets/{pet_id}", json=body, headers=headers), 400, 994)

    @rule(user=st.sampled_from(USERS), pet_id=pets, condition=conditions)
    def delete(self, user: str, pet_id: str, condition: str | None) -> None:
        record = self.visible(user, pet_id)
        value = self.conditional(record, condition)
        headers = {**self.headers[user], **({"If-Match": value} if value else {})}

        response = self.client.delete(f"/v1/pets/{pet_id}", headers=headers)

        if record is None:
            self.assert_error(response, 404, 995)
            return
        if condition in ("weak", "stale"):
            self.assert_error(response, 412, 992)
            return
        self.assert_record(response, record)
        del self.records[pet_id]
        self.deleted.add(pet_id)

    @rule(
        user=st.sampled_from(USERS),
        data=st.data(),
        page_size=st.integers(1, 4),
        page_index=st.integers(1, 3),
        sort=st.lists(st.tuples(st.sampled_from(SORT_FIELDS), st.booleans()), max_size=3, unique_by=lambda key: key[0]),
        order=st.sampled_from([None, "asc", "desc"]),
    )
    def list_pets(
        self,
        user: str,
        data: st.DataObject,
        page_size: int,
        page_index: int,
        sort: list[tuple[str, bool]],
        order: str | None,
    ) -> None:
        known = [record.body for record in self.records.values()]
        params: dict[str, str] = {"pageSize": str(page_size), "pageIndex": str(page_index)}
        filters: list[Callable[[Pet], bool]] = []
        if data.draw(sometimes, label="by type"):
            types = data.draw(st.lists(pet_types, min_size=1, max_size=3), label="types")
            params["petType"] = ",".join(types)
            filters.append(lambda pet: pet["petType"] in {canonical_type(pet_type) for pet_type in types})
        if data.draw(sometimes, label="by owner"):
            owner = data.draw(st.sampled_from(USERS), label="owner")
            params["ownerId"] = owner
            filters.append(lambda pet: pet["ownerId"] == owner)
        if known and data.draw(sometimes, label="by ids"):
            ids = [*data.draw(st.lists(st.sampled_from([pet["id"] for pet in known]), max_size=3)), str(uuid.uuid4())]
            params["ids"] = ",".join(ids)
            filters.append(lambda pet: pet["id"] in ids)
        for parameter, substring in (("name", False), ("search", True)):
            if data.draw(sometimes, label=f"by {parameter}"):
                # Mostly a known name, or a part of one, changed a little: otherwise few patterns match.
                seeds = [pet["name"] for pet in known] or ["ab"]
                start = data.draw(st.sampled_from(seeds), label=f"{parameter} seed")
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
                filters.append(lambda pet, matcher=matcher: matcher.fullmatch(pet["name"].lower()) is not None)
        for moment in ("createdAt", "modifiedAt"):
            if known and data.draw(sometimes, label=f"by {moment}"):
                bound = data.draw(st.sampled_from([pet[moment] for pet in known]), label=f"{moment} bound")
                since = data.draw(st.booleans(), label=f"{moment} since")
                params[moment.replace("At", "From" if since else "To")] = bound
                filters.append(lambda pet, key=moment, bound=bound, since=since: (pet[key] >= bound) == since)
        if sort:
            params["sort"] = ",".join(("-" if descending else "") + name for name, descending in sort)
        if order is not None:
            params["order"] = order

        response = self.client.get("/v1/pets", params=params, headers=self.headers[user])

        assert response.status_code == 200, (params, response.text)
        visible = [pet for pet in known if user == ADMIN or pet["ownerId"] == user]
        matching = [pet for pet in visible if all(keep(pet) for keep in filters)]
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

    @invariant()
    def admin_counts_every_record(self) -> None:
        response = self.client.get("/v1/pets", params={"pageSize": "1"}, headers=self.headers[ADMIN])
        assert response.json()["totalCount"] == len(self.records)


def test_the_service_behaves_like_the_model(sync_client: Client, database_url: str) -> None:
    run_state_machine_as_test(lambda: PetRecordsModel(sync_client, database_url), settings=MACHINE_SETTINGS)
