"""Records and changes as an export file holds them, and as the tables store them, for any declared resource.

A record is exported as its GET shows it (from `resources.wire.show`, the one place that formats stored
values), plus `version`, the count of its writes (the revision its ETag derives from), plus `stored`, the
columns of its table that neither a field nor the layer accounts for, if its table has any. The way back
needs no rule per resource or kind, and trusts nothing the file says: each field's value is read by the
field's kind, as the API reads a client's (a field a declaration gains later is checked as it is declared),
and must be the very text the kind shows of what it read (an export holds nothing else: an untrimmed name, an
e-mail address in capitals, is not what the service writes); the rules between fields of one record
(`Resource.check`) hold; the audit users are e-mail addresses. The rules that read the clock read it at the
record's `modifiedAt`, as the API did when it took the record (a share that has expired since was in the future
then). The match keys follow from the text as a write makes them.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import sqlalchemy as sa

from petrecords.certificates.resource import REVOKED_LINKS as REVOKED_LINKS_COLLECTION
from petrecords.certificates.resource import revoked_certificate_links
from petrecords.resources.declaration import Resource, ResourceSet
from petrecords.resources.fields import Context
from petrecords.resources.wire import Shown, show
from petrecords.store.base import Row
from petrecords.store.records import stored_uuid
from petrecords.tables import SHARED, changes
from petrecords.text import match_key
from petrecords.values import format_timestamp, normalize_email, parse_record_id

AUDIT = {"id": "id", "createdAt": "created_at", "createdBy": "created_by", "modifiedAt": "modified_at"}
AUDIT["modifiedBy"] = "modified_by"
REVISION = "revision"
"""The column every resource's table counts its writes in (the ETag derives from it)."""
VERSION = "version"
"""The member of an exported record that holds its revision."""
STORED = "stored"
"""The member of an exported record that holds the columns no field accounts for."""
WRITES = ("created", "replaced", "deleted")
ACTIONS = (*WRITES, "due-soon", "overdue")
"""A change's actions: its record's writes, and the reminders (contract section 15), which write nothing."""


class Malformed(ValueError):
    """What is wrong with one line of a file, in words that name the member."""


@dataclass(frozen=True)
class Column:
    """One column a field is stored in, and how its value is read back from the field's wire form."""

    field: str
    name: str
    kind: Any
    type: sa.types.TypeEngine[Any]
    nullable: bool
    key_column: str | None
    default: Any
    """The stored value of a field that an older file does not name (see Field.default), or None."""


@functools.lru_cache(maxsize=64)
def field_columns(resource: Resource) -> tuple[Column, ...]:
    table = resource.table
    return tuple(
        Column(
            declared.name,
            declared.column,
            declared.kind,
            table.c[declared.column].type,
            bool(table.c[declared.column].nullable),
            declared.key_column,
            declared.default,
        )
        for declared in resource.fields
        if declared.kind.embeds is None
    )


@functools.lru_cache(maxsize=64)
def hidden_columns(resource: Resource) -> tuple[sa.Column[Any], ...]:
    """The columns of the resource's table that no field, key or audit rule fills: exported as they are."""
    known = {*AUDIT.values(), REVISION}
    for column in field_columns(resource):
        known.add(column.name)
        if column.key_column is not None:
            known.add(column.key_column)
    return tuple(column for column in resource.table.c if column.name not in known)


def counted(records: Mapping[str, int]) -> str:
    """Records by resource, as a command's line of result says them: "11 pets, 22 vaccines, 4 pet-vaccination
    records"."""
    return ", ".join(f"{count} {name}" for name, count in records.items()) + " records"


def embedded_fields(resource: Resource) -> frozenset[str]:
    return frozenset(declared.name for declared in resource.fields if declared.kind.embeds is not None)


# --- out -------------------------------------------------------------------------------------------


def json_value(value: Any) -> Any:
    return str(value) if isinstance(value, uuid.UUID) else value


def exported_record(resource: Resource, row: Row) -> Shown:
    """The record as GET shows it, with its version (and the columns no field holds, when there are any)."""
    shown = show(resource, row)
    shown[VERSION] = row[REVISION]
    hidden = hidden_columns(resource)
    if hidden:
        shown[STORED] = {column.name: json_value(row[column.name]) for column in hidden}
    return shown


def exported_change(row: Mapping[str, Any]) -> dict[str, Any]:
    """A change as the feed shows it, without its cursor."""
    return {
        "resource": row["resource"],
        "id": str(row["record_id"]),
        "action": row["action"],
        "version": row["version"],
        "at": format_timestamp(row["at"]),
        "by": row["by"],
        "record": msgspec.Raw(row["record"]),
    }


# --- in --------------------------------------------------------------------------------------------


_WRITTEN_TIMESTAMP = re.compile(r"(\d{4}-\d{2}-\d{2})T([01]\d|2[0-3]):([0-5]\d):([0-5]\d)\.(\d{3})Z", re.ASCII)


@functools.lru_cache(maxsize=4096)
def _day_ms(day: str) -> int | None:
    try:
        return (dt.date.fromisoformat(day) - _EPOCH_DAY).days * 86_400_000
    except ValueError:
        return None


_EPOCH_DAY = dt.date(1970, 1, 1)


def timestamp_ms(name: str, value: Any) -> int:
    """A timestamp as the service writes it (`format_timestamp`), exactly: epoch milliseconds."""
    match = _WRITTEN_TIMESTAMP.fullmatch(value) if isinstance(value, str) else None
    day = None if match is None else _day_ms(match[1])
    if match is None or day is None:
        raise Malformed(f"{name} must be a date-time as the service writes it (2026-11-21T16:06:29.123Z)")
    return day + int(match[2]) * 3_600_000 + int(match[3]) * 60_000 + int(match[4]) * 1000 + int(match[5])


def record_id(name: str, value: Any) -> uuid.UUID:
    parsed = parse_record_id(value) if isinstance(value, str) else None
    if parsed is None or str(parsed) != value:
        raise Malformed(f"{name} must be a record id in canonical form")
    return parsed


def _tail(problem: str) -> str:
    return problem.removesuffix(".")


def _json(value: Any) -> str:
    text = msgspec.json.encode(value).decode()
    return text if len(text) <= 80 else f"{text[:77]}..."


def stored_value(column: Column, value: Any, context: Context) -> Any:
    """The value the field is stored as: what its kind reads of `value`, which the kind must show exactly as
    `value` (the form the service writes); Malformed naming the field otherwise."""
    if value is None:
        if not column.nullable:
            raise Malformed(f"{column.field} must not be null")
        return None
    try:
        stored, problem = column.kind.read(value, context)
    except (TypeError, ValueError):
        stored, problem = None, f"holds {_json(value)}, which the service cannot read"
    if problem is not None:
        raise Malformed(f"{column.field} {_tail(problem)}")
    shown = None if stored is None else column.kind.show(stored)
    if shown != value:
        written = "null" if shown is None else _json(shown)
        raise Malformed(f"{column.field} is {_json(value)}, which the service writes as {written}")
    return stored


_INTEGER_RANGES = ((sa.SmallInteger, 2**15 - 1), (sa.BigInteger, 2**63 - 1), (sa.Integer, 2**31 - 1))


def whole_number(name: str, value: Any, column_type: sa.types.TypeEngine[Any], *, least: int) -> int:
    """A whole number from `least` that the column can hold."""
    most = next((most for kind, most in _INTEGER_RANGES if isinstance(column_type, kind)), 2**63 - 1)
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
        raise Malformed(f"{name} must be a whole number from {least} to {most}")
    return value


def user(name: str, value: Any) -> str:
    """A user who wrote a record or a change: an e-mail address, in lower case as the service keeps them."""
    email = normalize_email(value) if isinstance(value, str) else None
    if email is None:
        raise Malformed(f"{name} must be a user's e-mail address")
    if email != value:
        raise Malformed(f"{name} is {_json(value)}, which the service writes as {_json(email)}")
    return email


def _python_type(column_type: sa.types.TypeEngine[Any]) -> type | None:
    try:
        python_type: type = column_type.python_type
    except NotImplementedError:
        return None
    return python_type


def _stored_column(column: sa.Column[Any], value: Any) -> Any:
    python_type = None if value is None else _python_type(column.type)
    if python_type is uuid.UUID:
        return record_id(f"{STORED}.{column.name}", value)
    if python_type is int:
        return whole_number(f"{STORED}.{column.name}", value, column.type, least=-(2**63))
    return value


@functools.lru_cache(maxsize=64)
def _members(resource: Resource, *, versioned: bool) -> tuple[frozenset[str], tuple[str, ...]]:
    """The members a record of the resource may have, and those it must have."""
    required = (*AUDIT, *((VERSION,) if versioned else ()))
    allowed = {*required, STORED, *embedded_fields(resource)}
    allowed.update(column.field for column in field_columns(resource))
    return frozenset(allowed), required


class ExportReader:
    """Turns exported records back into rows, against the configured lists of values (the pet types). (Not
    store.records.Reader, which turns a query's result rows into Rows.)"""

    def __init__(
        self, resources: ResourceSet, lists: Mapping[str, tuple[str, ...]], *, now_ms: int | None = None
    ) -> None:
        self.resources = {resource.name: resource for resource in resources.resources}
        self._choices = Context.configured(lists, now_ms=0).choices
        self._now_ms = now_ms
        """The clock the rules read; None: each record's modifiedAt."""

    def resource(self, name: Any) -> Resource:
        found = self.resources.get(name) if isinstance(name, str) else None
        if found is None:
            raise Malformed(f"resource {name!r} is none of {', '.join(self.resources)}")
        return found

    def row(self, resource: Resource, record: Mapping[str, Any], *, versioned: bool = True) -> Row:
        """The row of a record as the file has it; `versioned`: with its version (a change's record has none)."""
        allowed, required = _members(resource, versioned=versioned)
        if not allowed.issuperset(record):
            unknown = sorted(set(record) - allowed)
            raise Malformed(f"a {resource.title} record has no member {', '.join(unknown)}")
        for member in required:
            if member not in record:
                raise Malformed(f"the record has no {member}")
        row: Row = {
            "id": record_id("id", record["id"]),
            "created_at": timestamp_ms("createdAt", record["createdAt"]),
            "modified_at": timestamp_ms("modifiedAt", record["modifiedAt"]),
            "created_by": user("createdBy", record["createdBy"]),
            "modified_by": user("modifiedBy", record["modifiedBy"]),
        }
        if versioned:
            row[REVISION] = whole_number(VERSION, record[VERSION], resource.table.c[REVISION].type, least=1)
        context = Context(self._choices, row["modified_at"] if self._now_ms is None else self._now_ms)
        for column in field_columns(resource):
            if column.field in record:
                stored = stored_value(column, record[column.field], context)
            elif column.default is not None or column.nullable:
                # A field a file does not name (an export made before the field existed) takes its default, or is
                # not set.
                stored = column.default
            else:
                raise Malformed(f"the record has no {column.field}")
            row[column.name] = stored
            if column.key_column is not None:
                row[column.key_column] = None if stored is None else match_key(stored)
        if resource.check is not None:
            for name, problems in resource.check(row).items():
                raise Malformed(f"{name} {_tail(problems[0])}")
        extra = record.get(STORED, {})
        if not isinstance(extra, dict):
            raise Malformed(f"{STORED} must be an object")
        for hidden in hidden_columns(resource):
            row[hidden.name] = _stored_column(hidden, extra.get(hidden.name))
        return row


def wire_name(resource: Resource, column: str) -> str:
    """The member of a record's wire form that shows a column."""
    audit = {stored: member for member, stored in AUDIT.items()}
    if column in audit:
        return audit[column]
    return next(declared.name for declared in resource.fields if declared.column == column)


def shared_through(resource: Resource, record: Mapping[str, Any]) -> tuple[uuid.UUID | None, str | None]:
    """What the log files a change under, as the service does (`Resource.shared_through`): the record others see
    it through, and whom a share names."""
    key_column, grantee_column = resource.shared_through
    key = grantee = None
    if key_column is not None:
        name = wire_name(resource, key_column)
        key = record_id(f"record.{name}", record.get(name))
    if grantee_column is not None:
        name = wire_name(resource, grantee_column)
        grantee = record.get(name)
        if not isinstance(grantee, str) or not grantee:
            raise Malformed(f"record.{name} must name whom the {resource.title} names")
    return key, grantee


def owner_of(resource: Resource, record: Mapping[str, Any]) -> str | None:
    """Whose a record is, as the change log files it: '' for a record every caller shares."""
    if resource.ownership.column is None:
        return SHARED
    owner = record.get(resource.ownership.field)
    return owner if isinstance(owner, str) else None


class ChangeBody(msgspec.Struct, forbid_unknown_fields=True):
    resource: str
    id: str
    action: str
    version: int
    at: str
    by: str
    record: msgspec.Raw


def change_row(reader: ExportReader, change: ChangeBody) -> dict[str, Any]:
    """A change as the log keeps it, but for its cursor. Whose the record was before the write is that of its
    previous change, which the loader fills in once every change is in; until then, as after the write."""
    resource = reader.resource(change.resource)
    if change.action not in ACTIONS:
        raise Malformed(f"action must be one of {', '.join(ACTIONS)}")
    version = whole_number("version", change.version, changes.c.version.type, least=1)
    by = user("by", change.by)
    try:
        record = msgspec.json.decode(change.record)
    except msgspec.DecodeError as exc:
        raise Malformed(f"record: {exc}") from None
    if not isinstance(record, dict):
        raise Malformed("record must be an object")
    # History and the feed serve the record as it is here: every value is checked as a record's is.
    try:
        reader.row(resource, record, versioned=False)
    except Malformed as exc:
        raise Malformed(f"record: {exc}") from None
    if record["id"] != change.id:
        raise Malformed(f"record.id is {record['id']}, not the change's id {change.id}")
    owner = owner_of(resource, record)
    if owner is None:
        raise Malformed(f"record has no {resource.ownership.field}, whose the {resource.title} is")
    shared = resource.ownership.column is None
    shared_key, grantee = shared_through(resource, record)
    # A notice (a reminder) is filed under its owner after only, as the service files it (kept.keep_notices).
    owner_before = owner if change.action in WRITES and (shared or change.action != "created") else None
    owner_after = owner if shared or change.action != "deleted" else None
    if resource.ownership.issuer is not None:
        # Filed under its issuer and its owner, as the service files it (see Ownership.issuer).
        issuer = wire_name(resource, resource.ownership.issuer)
        owner_before = user(f"record.{issuer}", record.get(issuer))
        owner_after = owner
    return {
        "resource": resource.name,
        "record_id": record_id("id", change.id),
        "action": change.action,
        "version": version,
        "at": timestamp_ms("at", change.at),
        "by": by,
        "owner_before": owner_before,
        "owner_after": owner_after,
        "record": bytes(change.record),
        "shared_key": shared_key,
        "grantee": grantee,
    }


# --- revoked certificate links ---------------------------------------------------------------------

REVOKED_LINKS = REVOKED_LINKS_COLLECTION.name
"""The `resource` of an export's lines of revoked links: a deleted certificate's link answers 410 after a move as
before it, not 404. Each line is `{"resource": "revoked-certificate-links", "record": {"id", "tokenDigest",
"expiresAt"}}`: the deleted certificate's id, the digest of its token (never the token), when it would have
expired."""
REVOKED_LINKS_QUERY = sa.select(
    revoked_certificate_links.c.id, revoked_certificate_links.c.token_digest, revoked_certificate_links.c.expires_at
).order_by(revoked_certificate_links.c.id)
_DIGEST = re.compile(r"[0-9a-f]{64}")


def exported_revoked_link(values: Sequence[Any]) -> dict[str, Any]:
    """A row of REVOKED_LINKS_QUERY as an export's record."""
    link_id, digest, expires_at = values
    return {"id": str(stored_uuid(link_id)), "tokenDigest": digest, "expiresAt": format_timestamp(expires_at)}


def revoked_link_row(record: dict[str, Any]) -> dict[str, Any]:
    """An export's record of a revoked link, read back strictly, as its table stores it."""
    if set(record) != {"id", "tokenDigest", "expiresAt"}:
        raise Malformed("a revoked link's record holds id, tokenDigest and expiresAt, and nothing else")
    digest = record["tokenDigest"]
    if not isinstance(digest, str) or _DIGEST.fullmatch(digest) is None:
        raise Malformed("tokenDigest must be 64 lower-case hexadecimal digits")
    return {
        "id": record_id("id", record["id"]),
        "token_digest": digest,
        "expires_at": timestamp_ms("expiresAt", record["expiresAt"]),
    }
