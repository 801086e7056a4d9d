"""Schemathesis extensions, loaded into the `schemathesis run` process through SCHEMATHESIS_HOOKS.

- `records_of_others_are_missing`: the contract's object-level authorization, on every record created.
  Schemathesis' own `object_level_authorization` replays only reads, and only asks that the peer not
  get the owner's object; the contract asks more: someone else's record answers exactly as a record
  that does not exist, for reads and writes alike, and a write by the peer changes nothing. A shared
  record (one without an owner: the vaccine catalogue) is the other way round: every caller reads it as
  its creator does, and a write that the document reserves for the `admin` role is 403 where a missing
  record is 404. A peer whom a share lets see the record (or its pet) is left out: the shares' own tests and
  the sharing state machine check what they may do.
- `before_call`: makes a case that schemathesis generated as valid valid also by the rules the document
  can state only in prose (see there), so that `positive_data_acceptance` tests what it is meant to.
- `map_case`: works around one bug of schemathesis' coverage phase (see there).

What the hooks know of the API they read from the document: who owns a record (its `ownerId`), which
operations need the `admin` role (their security requirement), which body member names a record of which
collection (the links whose `requestBody` puts a created record's id into another operation's body), how
to create a record (the write schema's example).

The identities come from the Web Fuzzing Commons auth file the test writes (FUZZ_AUTH_FILE): each entry's
bearer token names the user (`sub`) and their roles. FUZZ_USER names the identity the run sends as.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import ipaddress
import json
import math
import os
import re
import secrets
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import cache
from typing import Any
from urllib.parse import urlsplit

import httpx
import jsonschema_rs
import schemathesis
from schemathesis.core.parameters import ParameterLocation
from schemathesis.generation.meta import CoveragePhaseData

from petrecords.values import format_timestamp, parse_datetime_ms
from petrecords.webhooks.targets import address_kind, url_problem

# Headers whose values differ between any two responses, even identical ones.
VOLATILE_HEADERS = {"date", "x-request-id", "content-length"}
TIMEOUT = 10.0
ADMIN_ROLE = "admin"
CREATED_ID = "$response.body#/id"
DAY_MS = 86_400_000
# The contract's bounds of a vaccination's `appliedAt` (not before 1900, not after the service's clock) and
# the pet type every record a vaccination names must share; the document states them in prose only.
EARLIEST_MS = -2_208_988_800_000
LATEST_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z: the last moment RFC 3339 writes
SAME_TYPE = "petType"
GRANTEE = "grantee"
"""The member of a share that names whom it lets see a record: its collection is the one that lists by it."""
BIRTH_DATE = "birthDate"
DECEASED_AT = "deceasedAt"
LOT_EXPIRES_ON = "lotExpiresOn"
COMPLETED = "completed"
EXPIRES_AT = "expiresAt"
FEED = "/v1/changes"
AFTER = "after"
POSITION = "position"
"""A webhook's `position`: a cursor the feed handed out, as the feed's `after` is."""
WEBHOOKS = "/v1/webhooks"
WEBHOOK_URL = "https://93.184.215.14/petrecords-webhooks"
MOST_WEBHOOKS = 20
"""A public address that needs no look-up: the webhooks the hooks make are disabled, so nothing is sent there."""
LAST_EVENT_ID = "Last-Event-ID"
UNIQUE_MEMBERS: dict[str, Callable[[], str]] = {
    "microchip": lambda: f"{secrets.randbelow(10**15):015d}",
    "rabiesTag": lambda: f"T-{secrets.token_hex(8).upper()}",
}
"""Members whose values no two records may share (the document says so in prose), with a maker of a value no
record has yet: left out of copies, and made afresh in a body generated as valid. Not from `random`, which
hypothesis seeds alike for every example it runs: the "fresh" microchips repeated."""


@dataclass(frozen=True)
class Identity:
    name: str
    email: str
    admin: bool
    authorization: str


def _claims(authorization: str) -> dict[str, Any]:
    """The claims of a bearer token, unverified: the server that issued it checks them."""
    payload = authorization.removeprefix("Bearer ").split(".")[1]
    claims: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return claims


@cache
def _identities() -> dict[str, Identity]:
    with open(os.environ["FUZZ_AUTH_FILE"], encoding="utf-8") as handle:
        document = json.load(handle)
    identities = {}
    for entry in document["auth"]:
        authorization = next(h["value"] for h in entry["fixedHeaders"] if h["name"].lower() == "authorization")
        claims = _claims(authorization)
        identities[entry["name"]] = Identity(
            name=entry["name"],
            email=claims["sub"].lower(),
            admin=ADMIN_ROLE in claims.get("roles", []),
            authorization=authorization,
        )
    return identities


def _caller() -> Identity:
    return _identities()[os.environ["FUZZ_USER"]]


def _administrator() -> Identity:
    return next(identity for identity in _identities().values() if identity.admin)


def _non_admins() -> list[Identity]:
    return [identity for identity in _identities().values() if not identity.admin]


@cache
def _client() -> httpx.Client:
    return httpx.Client(timeout=TIMEOUT)


def _send(method: str, url: str, identity: Identity, **kwargs: Any) -> httpx.Response:
    headers = {"Authorization": identity.authorization, **kwargs.pop("headers", {})}
    return _client().request(method, url, headers=headers, **kwargs)


def _shape(response: httpx.Response) -> tuple[int, bytes, tuple[tuple[str, str], ...]]:
    """What a client can tell apart: status, body and headers, less the ones that always differ."""
    headers = tuple(
        sorted(
            (name.lower(), value) for name, value in response.headers.items() if name.lower() not in VOLATILE_HEADERS
        )
    )
    return response.status_code, response.content, headers


def _missing_id() -> str:
    """A well-formed version 7 id that names no record."""
    return str(uuid.UUID(int=(uuid.uuid4().int & ~(0xF << 76)) | (0x7 << 76)))


# --- what the document says ------------------------------------------------------------------------


class Api:
    """The document, read for what the hooks need: collections by path, their operations and references."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self.paths: dict[str, dict[str, Any]] = document["paths"]

    def record_path(self, collection: str) -> dict[str, Any]:
        """The path item of one record of a collection (`/v1/pets` -> `/v1/pets/{petId}`)."""
        return next(item for path, item in self.paths.items() if path.rsplit("/", 1)[0] == collection and "{" in path)

    def _write_schema(self, collection: str) -> dict[str, Any]:
        if "post" not in self.paths.get(collection, {}):
            return {"properties": {}}
        body = self.paths[collection]["post"]["requestBody"]["content"]["application/json"]["schema"]
        schema: dict[str, Any] = self.document["components"]["schemas"][body["$ref"].rsplit("/", 1)[1]]
        return schema

    def write_member(self, collection: str, member: str) -> dict[str, Any]:
        """The schema of a member of a collection's write body ({} when it has none)."""
        found: dict[str, Any] = self._write_schema(collection)["properties"].get(member, {})
        return found

    @cache  # noqa: B019 - one Api a run
    def fixed(self, collection: str) -> tuple[str, ...]:
        """The members of a collection's records that are set on create and never change, as the write schema's
        descriptions say ("It cannot change.")."""
        properties = self._write_schema(collection)["properties"]
        return tuple(name for name, member in properties.items() if "cannot change" in member.get("description", ""))

    def read_members(self, collection: str) -> set[str]:
        """The members of a record of the collection as a read shows it."""
        answer = self.record_path(collection)["get"]["responses"]["200"]["content"]["application/json"]["schema"]
        schema = self.document["components"]["schemas"][answer["$ref"].rsplit("/", 1)[1]]
        return set(schema["properties"])

    def shown_once(self, collection: str) -> bool:
        """Whether the answer to a create of the collection's records shows more than a read (`{Name}Created`)."""
        create = self.paths.get(collection, {}).get("post")
        if create is None:
            return False
        created = create["responses"]["201"]["content"]["application/json"]["schema"].get("$ref", "")
        return bool(created.endswith("Created"))

    def needs_admin(self, operation: dict[str, Any]) -> bool:
        requirements = operation.get("security", self.document.get("security", []))
        return any(ADMIN_ROLE in roles for requirement in requirements for roles in requirement.values())

    def list_parameters(self, collection: str) -> set[str]:
        return {parameter["name"] for parameter in self.paths[collection]["get"].get("parameters", [])}

    @cache  # noqa: B019 - one Api a run
    def references(self, collection: str) -> dict[str, str]:
        """Body member -> the collection whose records it names: the links that carry a created record's id
        into the body of this collection's create."""
        create_id = self.paths[collection]["post"]["operationId"]
        found: dict[str, str] = {}
        for path, item in self.paths.items():
            source = path.rsplit("/", 1)[0] if "{" in path else path
            for operation in item.values():
                if not isinstance(operation, dict):
                    continue
                for response in operation.get("responses", {}).values():
                    for link in response.get("links", {}).values():
                        if link.get("operationId") != create_id:
                            continue
                        for member, expression in link.get("requestBody", {}).items():
                            if expression == CREATED_ID:
                                found[member] = source
        return found

    @property
    def shares(self) -> str | None:
        """The collection of shares: the one whose lists take a grantee."""
        return next(
            (path for path, item in self.paths.items() if "get" in item and GRANTEE in self.list_parameters(path)),
            None,
        )

    def example(self, collection: str) -> dict[str, Any]:
        """The documented example of a create body."""
        reference = self.paths[collection]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        schema = self.document["components"]["schemas"][reference.rsplit("/", 1)[1]]
        example: dict[str, Any] = schema["examples"][0]
        return dict(example)


_APIS: dict[int, Api] = {}


def _api_of(case: schemathesis.Case) -> Api:
    """The run's one document, read once."""
    document = case.operation.schema.raw_schema
    if id(document) not in _APIS:
        _APIS[id(document)] = Api(document)
    return _APIS[id(document)]


def _base(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _header(response: schemathesis.Response, name: str) -> str:
    values = response.headers[name]
    return values[0] if isinstance(values, list) else str(values)


# --- someone else's records ------------------------------------------------------------------------


def _body_for(api: Api, base: str, identity: Identity, collection: str, record: dict[str, Any]) -> dict[str, Any]:
    """A body that `identity` could send to write `record`: the record as read (read-only members are
    ignored), less its id, naming in its references records of `identity`'s own (copies of the originals)
    so that nothing but the record itself can be refused."""
    body = {name: value for name, value in record.items() if name != "id"}
    for member, target in api.references(collection).items():
        named = _send("GET", f"{base}{target}/{body[member]}", _administrator())
        if named.status_code != 200:
            continue
        original = named.json()
        if original.get("ownerId", identity.email) != identity.email and not identity.admin:
            # Without its owner: the copy is the caller's.
            copied = _body_for(api, base, identity, target, original).items()
            copy = {k: v for k, v in copied if k != "ownerId" and k not in UNIQUE_MEMBERS}
            created = _send("POST", f"{base}{target}", identity, json=copy)
            if created.status_code != 201:
                raise AssertionError(f"{identity.name} could not copy {target}/{original['id']}: {created.text}")
            body[member] = created.json()["id"]
    return body


def _attempts(etag: str, body: dict[str, Any], other: Identity, owner: str | None) -> list[tuple[str, dict[str, Any]]]:
    writes: list[dict[str, Any]] = [{"json": body}]
    if owner is not None:
        unnamed = {name: value for name, value in body.items() if name != "ownerId"}
        writes = [{"json": unnamed}, {"json": {**body, "ownerId": owner}}, {"json": {**body, "ownerId": other.email}}]
    return [
        ("GET", {}),
        ("GET", {"headers": {"If-None-Match": etag}}),
        ("GET", {"headers": {"If-None-Match": "*"}}),
        *(("PUT", write) for write in writes),
        ("PUT", {"json": body, "headers": {"If-Match": etag}}),
        ("PUT", {"json": body, "headers": {"If-Match": '"stale"'}}),
        ("DELETE", {}),
        ("DELETE", {"headers": {"If-Match": etag}}),
        ("DELETE", {"headers": {"If-Match": '"stale"'}}),
        ("OPTIONS", {}),
    ]


def _as_missing(url: str, missing: str, peer: Identity, attempts: list[tuple[str, dict[str, Any]]]) -> None:
    for method, options in attempts:
        theirs = _send(method, url, peer, **options)
        nobodys = _send(method, missing, peer, **options)
        if _shape(theirs) != _shape(nobodys):
            raise AssertionError(
                f"{method} of someone else's record {url} by {peer.email} ({options}) is told apart from a "
                f"missing record:\n  theirs:  {_shape(theirs)}\n  missing: {_shape(nobodys)}"
            )
        if method != "OPTIONS" and theirs.status_code != 404:
            raise AssertionError(f"{method} of someone else's record answered {theirs.status_code}, not 404")


def _as_shared(
    url: str,
    missing: str,
    peer: Identity,
    attempts: list[tuple[str, dict[str, Any]]],
    record: dict[str, Any],
    etag: str,
    admin_writes: bool,
) -> None:
    for method, options in attempts:
        if method in ("PUT", "DELETE") and not admin_writes:
            continue  # anyone may write it, so a write would change what the others read
        theirs = _send(method, url, peer, **options)
        nobodys = _send(method, missing, peer, **options)
        if method == "GET":
            conditional = "If-None-Match" in options.get("headers", {})
            expected = 304 if conditional else 200
            if theirs.status_code != expected or theirs.headers.get("etag") != etag:
                raise AssertionError(f"{peer.email} reads shared {url} ({options}): {theirs.status_code}")
            if not conditional and theirs.json() != record:
                raise AssertionError(f"{peer.email} reads shared {url} as {theirs.text}, not {record}")
        elif method in ("PUT", "DELETE") and (theirs.status_code, nobodys.status_code) != (403, 404):
            # Only an administrator may write it: 403, where a record that does not exist is 404 first.
            raise AssertionError(
                f"{method} of shared {url} by {peer.email} ({options}) answered {theirs.status_code} "
                f"(a missing one {nobodys.status_code}), not 403 after 404"
            )


def _lists(api: Api, base: str, collection: str, peer: Identity, record: dict[str, Any], owner: str | None) -> None:
    listed = _send("GET", f"{base}{collection}", peer, params={"ids": record["id"]}).json()
    # Shared: the record, as its creator reads it. Owned: nothing, for a non-admin sees only their own.
    expected = (1, [record]) if owner is None else (0, [])
    if (listed.get("totalCount"), listed.get("items")) != expected:
        raise AssertionError(f"{peer.email} lists {collection} with ids={record['id']} as {listed}, not {expected}")
    if owner is None:
        return
    # The owner's other records that are shared with the peer are theirs to list; this one is not among them.
    listed = _send("GET", f"{base}{collection}", peer, params={"ownerId": owner, "pageSize": "100"}).json()
    if record["id"] in [item.get("id") for item in listed.get("items", [])]:
        raise AssertionError(f"{peer.email} lists {owner}'s record with ownerId={owner}: {listed}")
    parameters = api.list_parameters(collection)
    for member in api.references(collection):
        if member in parameters:
            # The peer's own records may name the same record (a vaccine is shared); this one is not among them.
            query = {member: record[member], "pageSize": "100"}
            listed = _send("GET", f"{base}{collection}", peer, params=query).json()
            if record["id"] in [item.get("id") for item in listed.get("items", [])]:
                raise AssertionError(f"{peer.email} lists {owner}'s record with {query}: {listed}")


def _shared_with(api: Api, base: str, collection: str, record: dict[str, Any], peer: Identity) -> bool:
    """Whether a share lets `peer` see the record: one of the record it is shared through (a pet: the shares'
    target itself, or the one a record of another collection names) that names them and has not expired."""
    shares = api.shares
    if shares is None:
        return False
    member, target = next(iter(api.references(shares).items()))
    if collection == target:
        key = record["id"]
    else:
        key = next((record[name] for name, named in api.references(collection).items() if named == target), None)
    if key is None:
        return False
    listed = _send("GET", f"{base}{shares}", _administrator(), params={member: key, "pageSize": "100"}).json()
    now = time.time_ns() // 1_000_000
    return any(
        share[GRANTEE] == peer.email
        and (share.get("expiresAt") is None or (parse_datetime_ms(share["expiresAt"]) or 0) > now)
        for share in listed.get("items", [])
    )


MOVED_WITHOUT_A_WRITE = ("position",)
"""Members the service moves without a write (Resource.moved_without_write): a webhook's position."""


def _without(record: dict[str, Any], names: Sequence[str]) -> dict[str, Any]:
    return {name: value for name, value in record.items() if name not in names}


@schemathesis.check
def records_of_others_are_missing(
    ctx: schemathesis.CheckContext, response: schemathesis.Response, case: schemathesis.Case
) -> bool | None:
    """After every create, each non-admin who is not the owner tries every operation on the new record: each
    answer must be the one a never-existing id gets (or, for a shared record, the creator's answer to a read
    and 403 to a write that needs the admin role), and the record must still read exactly as created."""
    if case.method.upper() != "POST" or response.status_code != 201 or response.headers.get("idempotent-replayed"):
        return None
    if "location" not in response.headers:
        return None  # not a record: a stream's ticket
    api = _api_of(case)
    base = _base(response.request.url)
    location = _header(response, "location")
    collection = location.rsplit("/", 1)[0]
    # The record as a read shows it: a create's answer may show a secret once (a webhook's secret, a certificate's
    # link: the document's `{Name}Created` schemas).
    record = {name: value for name, value in response.json().items() if name in api.read_members(collection)}
    url, missing = f"{base}{location}", f"{base}{collection}/{_missing_id()}"
    etag = _header(response, "etag")
    owner = record.get("ownerId")
    record_item = api.record_path(collection)
    admin_writes = api.needs_admin(record_item["put"]) and api.needs_admin(record_item["delete"])

    # Who issued a record that stays between them and its owner (a certificate) is no other either.
    holders = {owner, record.get("createdBy")} if owner is not None else {None}
    others = [
        identity
        for identity in _non_admins()
        if identity.email not in holders
        and (owner is None or not _shared_with(api, base, collection, record, identity))
    ]
    for other in others:
        body = _body_for(api, base, other, collection, record)
        attempts = _attempts(etag, body, other, owner)
        if owner is None:
            _as_shared(url, missing, other, attempts, record, etag, admin_writes)
        else:
            _as_missing(url, missing, other, attempts)
        _lists(api, base, collection, other, record, owner)

    readers = [identity for identity in _identities().values() if owner is None or identity.email in holders]
    for identity in {*readers, _administrator()}:
        after = _send("GET", url, identity)
        read = after.json() if after.status_code == 200 else None
        # What the service moves without a write (a webhook's position, as its deliveries go) may have moved
        # meanwhile, and the ETag with it (a strong validator); everything else must read as created.
        moved = read is not None and any(read.get(name) != record.get(name) for name in MOVED_WITHOUT_A_WRITE)
        if (
            read is None
            or _without(read, MOVED_WITHOUT_A_WRITE) != _without(record, MOVED_WITHOUT_A_WRITE)
            or (not moved and after.headers.get("etag") != etag)
        ):
            raise AssertionError(
                f"after the others' attempts, {identity.email} reads {after.status_code} {after.text} "
                f"(ETag {after.headers.get('etag')}), not the record as created (ETag {etag})"
            )
    return None


# --- valid cases, by the rules the document states in prose ----------------------------------------


def _record(url: str, identity: Identity) -> dict[str, Any] | None:
    response = _send("GET", url, identity)
    return response.json() if response.status_code == 200 else None


def _one_of_type(api: Api, base: str, collection: str, pet_type: str, caller: Identity) -> str:
    """The id of a record of `collection` for `pet_type` that the caller may see; one is made when none is."""
    listed = _send("GET", f"{base}{collection}", caller, params={SAME_TYPE: pet_type, "pageSize": "1"}).json()
    if listed["items"]:
        return str(listed["items"][0]["id"])
    maker = _administrator() if api.needs_admin(api.paths[collection]["post"]) else caller
    body = {**api.example(collection), SAME_TYPE: pet_type}
    _values_no_record_has(body)  # the example's microchip may be another pet's by now
    created = _send("POST", f"{base}{collection}", maker, json=body)
    if created.status_code != 201:
        raise AssertionError(f"could not make a {pet_type} record of {collection}: {created.text}")
    return str(created.json()["id"])


def _name_real_records(api: Api, base: str, collection: str, body: dict[str, Any], caller: Identity) -> None:
    """Each reference names a record the caller may see, and all of them one pet type (the contract's rule:
    a vaccination's vaccine is one for its pet's type)."""
    references = api.references(collection)
    named = {
        member: _record(f"{base}{target}/{body[member]}", caller) if isinstance(body.get(member), str) else None
        for member, target in references.items()
    }
    types = [record[SAME_TYPE] for record in named.values() if record is not None and SAME_TYPE in record]
    pet_type = types[0] if types else api.example(references[next(iter(references))])[SAME_TYPE]
    for member, record in named.items():
        if record is None or record.get(SAME_TYPE, pet_type) != pet_type:
            body[member] = _one_of_type(api, base, references[member], pet_type, caller)


def _within(moment: Fraction, earliest: int, latest: int) -> int:
    """`moment` (epoch milliseconds) when it lies in [earliest, latest], else a moment there that depends on it."""
    rounded = math.floor(moment + Fraction(1, 2))
    return rounded if earliest <= rounded <= latest else earliest + rounded % (latest - earliest)


def _after_any_stored_application(body: dict[str, Any]) -> None:
    """A patch's `dueAt` without `appliedAt`: later than any stored one can be (a few minutes after now)."""
    due = parse_datetime_ms(body["dueAt"])
    if due is None:
        return
    soon = time.time_ns() // 1_000_000 + 10 * 60_000
    due_ms = _within(due, soon, LATEST_MS)
    if due_ms != math.floor(due + Fraction(1, 2)):
        body["dueAt"] = format_timestamp(due_ms)


def _in_time(body: dict[str, Any]) -> None:
    """`appliedAt` not before 1900 nor after now; `dueAt` later than it, and not after the year 9999 in UTC."""
    applied = parse_datetime_ms(body["appliedAt"]) if isinstance(body.get("appliedAt"), str) else None
    if applied is None:
        return
    now = time.time_ns() // 1_000_000
    applied_ms = _within(applied, EARLIEST_MS, now - 1000)
    if applied_ms != math.floor(applied + Fraction(1, 2)):
        body["appliedAt"] = format_timestamp(applied_ms)
    due = parse_datetime_ms(body["dueAt"]) if isinstance(body.get("dueAt"), str) else None
    if due is not None:
        due_ms = _within(due, applied_ms + 1, LATEST_MS)
        if due_ms != math.floor(due + Fraction(1, 2)):
            body["dueAt"] = format_timestamp(due_ms)


def _one_order_for_each_sort_field(query: dict[str, Any]) -> None:
    """`order`: one direction, or exactly one for each `sort` field when none carries a `-`."""
    order = query.get("order")
    if not isinstance(order, str) or "," not in order:
        return
    sort = query.get("sort")
    fields = sort.split(",") if isinstance(sort, str) else ["createdAt"]
    if len(order.split(",")) != len(fields) or any(name.startswith("-") for name in fields):
        query["order"] = order.split(",")[0]


def _a_cursor_handed_out(base: str, sent: dict[str, Any], name: str) -> None:
    """The feed's `after` or `Last-Event-ID`: a cursor the service handed out (the first change's), or none when
    there is no change."""
    first = _send("GET", f"{base}{FEED}", _caller(), params={"limit": "1"}).json().get("items", [])
    if first:
        sent[name] = first[0]["cursor"]
    else:
        del sent[name]


def _values_no_record_has(body: dict[str, Any]) -> None:
    for member, fresh in UNIQUE_MEMBERS.items():
        if isinstance(body.get(member), str) and body[member].strip():
            body[member] = fresh()


def _a_past_day(body: dict[str, Any]) -> None:
    """`birthDate`: a day from 1900-01-01 to today (UTC)."""
    day = body.get(BIRTH_DATE)
    if not isinstance(day, str):
        return
    try:
        parsed = dt.date.fromisoformat(day)
    except ValueError:
        return
    today = dt.datetime.now(dt.UTC).date()
    if not dt.date(1900, 1, 1) <= parsed <= today:
        body[BIRTH_DATE] = dt.date(1900, 1, 1).isoformat() if parsed < dt.date(1900, 1, 1) else today.isoformat()


def _a_day_of_death(body: dict[str, Any]) -> None:
    """`deceasedAt`: today (UTC), which is not after today, nor before the pet's birth, nor before the day of a dose
    of it (none is applied after now)."""
    if isinstance(body.get(DECEASED_AT), str):
        body[DECEASED_AT] = dt.datetime.now(dt.UTC).date().isoformat()


def _completed(body: dict[str, Any]) -> None:
    """A vaccination's `status`: completed, with no `statusReason`. A create must be completed, and a dose marked
    entered-in-error could then only be deleted: every later case that writes it would be refused."""
    if body.get("status") is not None:
        body["status"] = COMPLETED
    if body.get("statusReason") is not None:
        body["statusReason"] = None


def _not_expired_when_given(body: dict[str, Any], *, creating: bool) -> None:
    """`lotExpiresOn`: not before the day (UTC) of `appliedAt`, or, in a patch without it, of any stored dose (the
    day after today). A replace or patch that moves `appliedAt` and does not name the expiry clears it: the stored
    one may come before the new day."""
    applied = parse_datetime_ms(body["appliedAt"]) if isinstance(body.get("appliedAt"), str) else None
    if not creating and applied is not None and LOT_EXPIRES_ON not in body:
        body[LOT_EXPIRES_ON] = None
        return
    if not isinstance(body.get(LOT_EXPIRES_ON), str):
        return
    try:
        expires = dt.date.fromisoformat(body[LOT_EXPIRES_ON])
    except ValueError:
        return
    first_day = (
        dt.date(1970, 1, 1) + dt.timedelta(days=math.floor(applied / DAY_MS))
        if applied is not None
        else dt.datetime.now(dt.UTC).date() + dt.timedelta(days=1)
    )
    if expires < first_day:
        body[LOT_EXPIRES_ON] = first_day.isoformat()


def _a_future_moment(body: dict[str, Any]) -> None:
    """`expiresAt`: a moment after the service's clock (a day after now, when the one generated is not)."""
    moment = parse_datetime_ms(body[EXPIRES_AT]) if isinstance(body.get(EXPIRES_AT), str) else None
    if moment is not None and moment <= time.time_ns() // 1_000_000 + 60_000:
        body[EXPIRES_AT] = format_timestamp(time.time_ns() // 1_000_000 + DAY_MS)


_AT_MOST_DAYS = re.compile(r"at most (\d+) days after the service's clock")


def _not_too_far(api: Api, collection: str, body: dict[str, Any]) -> None:
    """`expiresAt`, where the write schema bounds it (a certificate's: at most 366 days ahead): within the bound (a
    day after now, when the one generated is not)."""
    moment = parse_datetime_ms(body[EXPIRES_AT]) if isinstance(body.get(EXPIRES_AT), str) else None
    bound = _AT_MOST_DAYS.search(api.write_member(collection, EXPIRES_AT).get("description", ""))
    if moment is not None and bound is not None and moment > time.time_ns() // 1_000_000 + int(bound[1]) * DAY_MS:
        body[EXPIRES_AT] = format_timestamp(time.time_ns() // 1_000_000 + DAY_MS)


def _someone_new(api: Api, base: str, collection: str, body: dict[str, Any], *, creating: bool) -> None:
    """A share names someone other than the owner of the record it shares and, when it is new, someone that
    record is not shared with yet (a second share of a pet with the same grantee is 409)."""
    for member, target in api.references(collection).items():
        if not isinstance(body.get(member), str):
            continue
        named = _record(f"{base}{target}/{body[member]}", _administrator())
        if named is None:
            continue
        taken = named.get("ownerId") == body[GRANTEE].lower()
        if creating and not taken:
            query = {member: body[member], GRANTEE: body[GRANTEE]}
            listed = _send("GET", f"{base}{collection}", _administrator(), params=query)
            taken = listed.status_code != 200 or listed.json()["totalCount"] > 0
        if taken:
            body[GRANTEE] = f"vet-{uuid.uuid4().hex[:12]}@clinic.example"


def _an_existing_share(base: str, case: schemathesis.Case) -> None:
    """A share that a delete meant to succeed names is one of the caller's that exists (made now, of one of their
    pets, when they have none): the ids generated never are, and in a short run the stateful phase's links from a
    create reach the delete only by chance."""
    api = _api_of(case)
    collection = case.operation.path.split("/{", 1)[0]
    if collection != api.shares:
        return
    name = next(iter(case.path_parameters))
    caller = _caller()
    if _record(f"{base}{collection}/{case.path_parameters[name]}", caller) is not None:
        return
    member, target = next(iter(api.references(collection).items()))
    listed = _send("GET", f"{base}{collection}", caller, params={"pageSize": "1"}).json().get("items", [])
    if not listed:
        pets = _send("GET", f"{base}{target}", caller, params={"ownerId": caller.email, "pageSize": "1"}).json()
        if not pets.get("items"):
            return
        grantee = f"vet-{uuid.uuid4().hex[:12]}@clinic.example"
        share = {member: pets["items"][0]["id"], GRANTEE: grantee, "access": "read"}
        made = _send("POST", f"{base}{collection}", caller, json=share)
        listed = [made.json()] if made.status_code == 201 else []
    if listed:
        case.path_parameters[name] = listed[0]["id"]


def _a_url_that_may_be_delivered_to(body: dict[str, Any]) -> None:
    """A webhook's `url`: an https URL whose host is a domain name, or a public address (what a URI of the schema's
    format may be beyond that, the document says in prose)."""
    url = body.get("url")
    if not isinstance(url, str):
        return
    if url_problem(url, allow_private=False) is not None:
        body["url"] = WEBHOOK_URL
        return
    with contextlib.suppress(ValueError):
        if address_kind(ipaddress.ip_address(httpx.URL(url).host)) is not None:
            body["url"] = WEBHOOK_URL


def _room_for_a_webhook(base: str) -> None:
    """A caller has at most 20 webhooks: a create meant to succeed first deletes their oldest when they have them."""
    caller = _caller()
    page = _send("GET", f"{base}{WEBHOOKS}", caller, params={"pageSize": "1"}).json()
    if page.get("totalCount", 0) >= MOST_WEBHOOKS and page.get("items"):
        _send("DELETE", f"{base}{WEBHOOKS}/{page['items'][0]['id']}", caller)


def _an_existing_record_shown_once(base: str, case: schemathesis.Case) -> None:
    """A record whose create's answer shows more than a read (a webhook's secret, a certificate's link) that a case
    meant to succeed names is one of the caller's that exists (made now from the documented example, naming records
    of theirs, when they have none): few links lead from its create to the operations on it (the webhook's rotation,
    a replace, a delete), and a short run reaches them through those only by chance."""
    if "/{" not in case.operation.path or not case.path_parameters:
        return
    api = _api_of(case)
    collection = case.operation.path.split("/{", 1)[0]
    if not api.shown_once(collection):
        return
    name = next(iter(case.path_parameters))
    caller = _caller()
    if _record(f"{base}{collection}/{case.path_parameters[name]}", caller) is not None:
        return
    listed = _send("GET", f"{base}{collection}", caller, params={"pageSize": "1"}).json().get("items", [])
    if not listed:
        body = api.example(collection)
        if api.references(collection):
            _name_real_records(api, base, collection, body, caller)
        made = _send("POST", f"{base}{collection}", caller, json=body)
        listed = [made.json()] if made.status_code == 201 else []
    if listed:
        case.path_parameters[name] = listed[0]["id"]


def _as_it_was(api: Api, base: str, collection: str, case: schemathesis.Case, fixed: tuple[str, ...]) -> None:
    """What cannot change (400: a share's pet and grantee, a certificate's pet) a replace or patch names as it is."""
    record_id = next(iter(case.path_parameters.values()))
    stored = _record(f"{base}{collection}/{record_id}", _administrator())
    if stored is None:
        return
    for member in fixed:
        if case.method.upper() == "PUT" or member in case.body:
            case.body[member] = stored[member]


@schemathesis.hook
def before_call(context: schemathesis.HookContext, case: schemathesis.Case, kwargs: dict[str, Any]) -> None:
    """Bring a body that schemathesis generated as valid within the rules that a JSON Schema cannot state,
    each of which the document states in prose:

    - a reference names a record the caller may see, and a vaccination's vaccine is one for its pet's type
      (no schema knows which records exist);
    - `appliedAt` is not before 1900 nor after the service's clock, and `dueAt` is later than it (a patch that
      moves `appliedAt` has its `dueAt` computed again, since the stored one may come before it);
    - a pet's `birthDate` is not before 1900 nor after today, nor its `deceasedAt` before its birth or its doses, a
      share's `expiresAt` is in the future, and a share names someone other than the pet's owner, and a microchip
      code is one no other pet has, a rabies tag one no other dose has;
    - a vaccination is completed (a dose marked entered-in-error could only be deleted), and its product had not
      expired on the day it was given;
    - in a list's query, `order` gives one direction for each `sort` field, or one for all; the feed's `after`
      or `Last-Event-ID`, and a webhook's `position`, is a cursor the service handed out.

    Cases meant to be invalid are sent as generated.
    """
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive:
        return
    method = case.method.upper()
    base = _base(case.operation.schema.get_base_url())
    if method == "GET" and case.query:
        _one_order_for_each_sort_field(case.query)
        if case.operation.path == FEED and isinstance(case.query.get(AFTER), str):
            # The feed's `after` is a cursor (the due list's is a moment, which the schema states).
            _a_cursor_handed_out(base, case.query, AFTER)
    if method == "GET" and case.headers and isinstance(case.headers.get(LAST_EVENT_ID), str):
        _a_cursor_handed_out(base, case.headers, LAST_EVENT_ID)
    if method == "DELETE" and case.path_parameters:
        _an_existing_share(base, case)
    _an_existing_record_shown_once(base, case)
    if method not in ("POST", "PUT", "PATCH") or not isinstance(case.body, dict):
        return
    api = _api_of(case)
    collection = case.operation.path.split("/{", 1)[0]
    if collection in api.paths and "post" in api.paths[collection] and api.references(collection):
        _name_real_records(api, base, collection, case.body, _caller())
    _a_past_day(case.body)
    _a_day_of_death(case.body)
    _a_future_moment(case.body)
    _not_too_far(api, collection, case.body)
    _values_no_record_has(case.body)
    _completed(case.body)
    if collection == WEBHOOKS:
        if method == "POST" and case.operation.path == WEBHOOKS:
            _room_for_a_webhook(base)
        _a_url_that_may_be_delivered_to(case.body)
        if isinstance(case.body.get(POSITION), str):
            _a_cursor_handed_out(base, case.body, POSITION)
    fixed = (*api.fixed(collection), *((GRANTEE,) if collection == api.shares else ()))
    if method != "POST" and case.path_parameters and fixed:
        _as_it_was(api, base, collection, case, fixed)
    if collection == api.shares and isinstance(case.body.get(GRANTEE), str):
        _someone_new(api, base, collection, case.body, creating=method == "POST")
    if "appliedAt" in case.body:
        if method == "PATCH" and case.body.get("dueAt") is None:
            case.body["dueAt"] = None
        _in_time(case.body)
    elif method == "PATCH" and isinstance(case.body.get("dueAt"), str):
        _after_any_stored_application(case.body)
    if "appliedAt" in case.body or LOT_EXPIRES_ON in case.body:
        _not_expired_when_given(case.body, creating=method == "POST")


# --- a schemathesis bug ----------------------------------------------------------------------------


@cache
def _header_validator(schema_json: str) -> jsonschema_rs.Validator:
    return jsonschema_rs.validator_for(json.loads(schema_json))


def _fits(schema: object, value: str) -> bool:
    return not isinstance(schema, dict) or _header_validator(json.dumps(schema, sort_keys=True)).is_valid(value)


@schemathesis.hook
def map_case(context: schemathesis.HookContext, case: schemathesis.Case) -> schemathesis.Case:
    """Leave out an optional header that the coverage phase filled with a value it did not mean to send.

    Schemathesis 4.32's coverage phase makes no value for an optional header whose pattern needs a
    character other than a letter or digit (our If-Match and If-None-Match). It then puts a wrong-type value
    such as `0` into every case of the operation, including those it calls positive and those that test
    something else, so the service rightly answers 400 and the case tests nothing of what it was made for.
    Only the cases that set out to test that very header keep it.
    """
    meta = case.meta
    data = meta.phase.data if meta is not None else None
    if not isinstance(data, CoveragePhaseData) or not case.headers:
        return case
    tested = data.parameter if data.parameter_location == ParameterLocation.HEADER else None
    for parameter in case.operation.headers:
        value = case.headers.get(parameter.name)
        if parameter.is_required or parameter.name == tested or not isinstance(value, str):
            continue
        if not _fits(parameter.definition.get("schema"), value):
            del case.headers[parameter.name]
    return case
