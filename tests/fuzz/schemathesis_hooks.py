"""Schemathesis extensions, loaded into the `schemathesis run` process through SCHEMATHESIS_HOOKS.

- `records_of_others_are_missing`: the contract's object-level authorization, on every operation by id.
  Schemathesis' own `object_level_authorization` replays only reads, and only asks that the peer not
  get the owner's object; the contract asks more: someone else's record answers exactly as a record
  that does not exist, for reads and writes alike, and a write by the peer changes nothing.
- `map_case`: works around one bug of schemathesis' coverage phase (see there).

The identities come from the Web Fuzzing Commons auth file the test writes (FUZZ_AUTH_FILE): entries
named `alice` and `bob` (non-admins) and `admin`.
"""

from __future__ import annotations

import json
import os
import uuid
from functools import cache
from typing import Any
from urllib.parse import urlsplit

import httpx
import jsonschema_rs
import schemathesis
from schemathesis.core.parameters import ParameterLocation
from schemathesis.generation.meta import CoveragePhaseData

PEERS = {"alice@example.com": "bob", "bob@example.com": "alice"}
# Headers whose values differ between any two responses, even identical ones.
VOLATILE_HEADERS = {"date", "x-request-id", "content-length"}
TIMEOUT = 10.0


@cache
def _authorization(name: str) -> str:
    with open(os.environ["FUZZ_AUTH_FILE"], encoding="utf-8") as handle:
        document = json.load(handle)
    for entry in document["auth"]:
        if entry["name"] == name:
            for header in entry["fixedHeaders"]:
                if header["name"].lower() == "authorization":
                    return str(header["value"])
    raise LookupError(f"no identity {name!r} in the auth file")


@cache
def _client() -> httpx.Client:
    return httpx.Client(timeout=TIMEOUT)


def _send(method: str, url: str, identity: str, **kwargs: Any) -> httpx.Response:
    headers = {"Authorization": _authorization(identity), **kwargs.pop("headers", {})}
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


@schemathesis.check
def records_of_others_are_missing(
    ctx: schemathesis.CheckContext, response: schemathesis.Response, case: schemathesis.Case
) -> bool | None:
    """After every create, the other non-admin tries every operation on the new record: each answer must be
    the one a never-existing id gets, and the owner must still find the record exactly as created."""
    if case.method.upper() != "POST" or response.status_code != 201 or response.headers.get("idempotent-replayed"):
        return None
    record = response.json()
    peer = PEERS.get(record.get("ownerId"))
    if peer is None:
        return None
    parts = urlsplit(response.request.url)
    base = f"{parts.scheme}://{parts.netloc}"
    url = f"{base}/v1/pets/{record['id']}"
    missing = f"{base}/v1/pets/{_missing_id()}"
    etag = response.headers["etag"][0]
    body = {"name": "Mallory's", "petType": "Cat"}
    attempts: list[tuple[str, dict[str, Any]]] = [
        ("GET", {}),
        ("GET", {"headers": {"If-None-Match": etag}}),
        ("GET", {"headers": {"If-None-Match": "*"}}),
        ("PUT", {"json": body}),
        ("PUT", {"json": {**body, "ownerId": record["ownerId"]}}),
        ("PUT", {"json": {**body, "ownerId": f"{peer}@example.com"}}),
        ("PUT", {"json": body, "headers": {"If-Match": etag}}),
        ("PUT", {"json": body, "headers": {"If-Match": '"stale"'}}),
        ("DELETE", {}),
        ("DELETE", {"headers": {"If-Match": etag}}),
        ("DELETE", {"headers": {"If-Match": '"stale"'}}),
        ("OPTIONS", {}),
    ]
    for method, options in attempts:
        theirs = _send(method, url, peer, **options)
        nobodys = _send(method, missing, peer, **options)
        if _shape(theirs) != _shape(nobodys):
            raise AssertionError(
                f"{method} of {record['ownerId']}'s record by {peer}@example.com ({options}) is told apart from a "
                f"missing record:\n  theirs:  {_shape(theirs)}\n  missing: {_shape(nobodys)}"
            )
        if method != "OPTIONS" and theirs.status_code != 404:
            raise AssertionError(f"{method} of someone else's record answered {theirs.status_code}, not 404")

    listed = _send("GET", f"{base}/v1/pets", peer, params={"ids": record["id"]}).json()
    if listed.get("totalCount") != 0 or listed.get("items"):
        raise AssertionError(f"{peer}@example.com lists {record['ownerId']}'s record: {listed}")
    by_owner = _send("GET", f"{base}/v1/pets", peer, params={"ownerId": record["ownerId"]}).json()
    if by_owner.get("totalCount") != 0 or by_owner.get("items"):
        raise AssertionError(f"{peer}@example.com lists {record['ownerId']}'s records: {by_owner}")

    owner = "alice" if peer == "bob" else "bob"
    for identity in (owner, "admin"):
        after = _send("GET", url, identity)
        if after.status_code != 200 or after.json() != record or after.headers.get("etag") != etag:
            raise AssertionError(
                f"after {peer}'s attempts, {identity} reads {after.status_code} {after.text} "
                f"(ETag {after.headers.get('etag')}), not the record as created (ETag {etag})"
            )
    return None


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
