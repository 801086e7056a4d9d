"""What the public answer reads: a link by its token's digest, with what vouches for its facts, and the doses the
facts show. Statements of their own, reading only the columns a certificate shows, instead of the generic list
machinery (which read every column of every dose and vaccine, a quarter of an uncached answer's time).

`LINK` finds a token's link, live or revoked, in one statement that probes the unique digest index of each table
(a token of no link costs that and nothing else). For a live one it also reads the link's vouch: the certificate's
and the pet's revisions, and the writes to the pet's doses and to the vaccines, which the database's own triggers
count (stored.pet_dose_writes, stored.vaccine_writes), whoever writes. Every write that can change what a certificate
shows moves one of these: a change of the certificate or of the pet bumps its revision, a dose of the pet inserted,
changed or deleted (or moved to another pet) its count, a vaccine changed the vaccines' count; writes to other pets'
doses move none of them. Facts kept with the vouch they were made from hold while a later `LINK` reads the same one.
The counts are read by key: two probes, however many doses the pet has.

`LINK` reads the certificate's document as kept (stored.py) in the same statement, by its primary key, and nothing
that only making the facts needs: a first read whose document holds costs that one statement, and builds no row.
`LINK_RECORD` reads the link again with what its facts are made from (the certificate's instants and groups, the
pet's columns), in the transaction that reads the doses, where the document is missing or stale.

`PET` reads a pet and its vouch, for a certificate's write to make its document; `DOSES` the doses of a pet with
their vaccines, by the pet's index.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, TypeVar

import msgspec
import sqlalchemy as sa

from petrecords.certificates.facts import COMPLETED, Row
from petrecords.certificates.resource import PET_CERTIFICATES, revoked_certificate_links
from petrecords.certificates.stored import certificate_documents, pet_dose_writes, vaccine_writes
from petrecords.pets import PETS
from petrecords.store.base import Store, Transaction
from petrecords.store.records import stored_uuid
from petrecords.store.sql import SqlStore, SqlTransaction
from petrecords.vaccinations import PET_VACCINATIONS
from petrecords.vaccines import VACCINES

MOST_DOSES = 1000
"""The doses of a pet one certificate reads, oldest first: far more than a pet is given in its life."""
PET_COLUMNS = ("id", "name", "pet_type", "breed", "sex", "neutered", "birth_date", "color", "microchip", "deceased_at")
"""The pet's columns that a certificate shows (facts.build_facts)."""
DOSE_COLUMNS = (
    "id",
    "status",
    "revision",
    "applied_at",
    "due_at",
    "lot_number",
    "lot_expires_on",
    "dose_type",
    "veterinarian",
    "veterinarian_licence",
    "clinic",
    "rabies_tag",
)
VACCINE_COLUMNS = ("id", "name", "group_name", "manufacturer")
STORED_COLUMNS = ("vouch", "good_until", "document")
"""The columns of the certificate's document as kept (stored.py)."""

_certificates = PET_CERTIFICATES.table
_pets = PETS.table
_doses = PET_VACCINATIONS.table
_vaccines = VACCINES.table
_documents = certificate_documents
_DIGEST = sa.bindparam("digest", type_=sa.String())
_PET = sa.bindparam("pet_id", type_=sa.Uuid())


def _as_text(value: sa.ColumnElement[Any]) -> sa.ColumnElement[str]:
    return sa.cast(sa.func.coalesce(value, 0), sa.String())


def _doses_vouch(pet_id: sa.ColumnElement[Any]) -> sa.ColumnElement[str]:
    """The writes to the pet's doses and to the vaccines as the database counts them, in one value: of the
    certificate's pet, or of a given one. Two probes by key, whatever the pet's doses."""
    doses = sa.select(pet_dose_writes.c.writes).where(pet_dose_writes.c.pet_id == pet_id).scalar_subquery()
    vaccines = sa.select(vaccine_writes.c.writes).where(vaccine_writes.c.id == 1).scalar_subquery()
    return _as_text(doses).concat(":").concat(_as_text(vaccines))


_VOUCHED = (_certificates.c.revision, _pets.c.revision, _doses_vouch(_certificates.c.pet_id))
"""What vouches for a live link's facts (Link.vouch), in this order."""


def _link_statement(*live_columns: sa.ColumnElement[Any], documents: bool) -> sa.CompoundSelect[Any]:
    """A link found by its digest among the live ones (these columns, after whether it is revoked, its digest, its
    expiry and its vouch) and the revoked ones (nulls in their place)."""
    joined = _certificates.join(_pets, _pets.c.id == _certificates.c.pet_id)
    if documents:
        joined = joined.outerjoin(_documents, _documents.c.certificate_id == _certificates.c.id)
    live = sa.select(
        sa.literal(0).label("revoked"),
        _certificates.c.token_digest,
        _certificates.c.expires_at,
        *_VOUCHED,
        *live_columns,
    ).select_from(joined)
    revoked = sa.select(
        sa.literal(1),
        revoked_certificate_links.c.token_digest,
        revoked_certificate_links.c.expires_at,
        *(sa.null() for _ in range(len(live.selected_columns) - 3)),
    )
    return sa.union_all(
        live.where(_certificates.c.token_digest == _DIGEST),
        revoked.where(revoked_certificate_links.c.token_digest == _DIGEST),
    )


LINK = _link_statement(*(_documents.c[name] for name in STORED_COLUMNS), documents=True)
LINK_RECORD = _link_statement(
    _certificates.c.id,
    _certificates.c.created_at,
    _certificates.c.groups,
    *(_pets.c[name] for name in PET_COLUMNS),
    documents=False,
)
_FIRST = 3 + len(_VOUCHED)
"""Where the columns of either statement's own begin."""
PET = sa.select(_pets.c.revision, _doses_vouch(_PET), *(_pets.c[name] for name in PET_COLUMNS)).where(
    _pets.c.id == _PET
)
DOSES = (
    sa.select(*(_doses.c[name] for name in DOSE_COLUMNS), *(_vaccines.c[name] for name in VACCINE_COLUMNS))
    .select_from(_doses.join(_vaccines, _vaccines.c.id == _doses.c.vaccine_id))
    # Every status, the few others dropped after: a condition on it could lead a planner to its index instead.
    .where(_doses.c.pet_id == _PET)
    .order_by(_doses.c.applied_at, _doses.c.id)
    .limit(sa.bindparam("most", type_=sa.Integer()))
)


class Link(msgspec.Struct, frozen=True, gc=False):
    """A link found by its digest (LINK): whether it is live, and its document as kept with what vouches for it."""

    token_digest: str
    expires_at_ms: int
    revoked: bool
    vouch: tuple[Any, ...] | None
    """What vouches for the facts of a live link (see the module's note); None for a revoked one."""
    stored: tuple[Any, ...]
    """The certificate's document as kept (STORED_COLUMNS), all None where none is."""


class LinkRecord(msgspec.Struct, frozen=True):
    """A link found by its digest with what its facts are made from (LINK_RECORD)."""

    token_digest: str
    expires_at_ms: int
    revoked: bool
    vouch: tuple[Any, ...] | None
    id: uuid.UUID | None
    created_at_ms: int
    groups: str | None
    """The certificate's groups as stored: a JSON array, or None for every group."""
    pet: Row | None
    """None, as the id and the vouch, for a revoked link."""


Found = TypeVar("Found", Link, LinkRecord)


def _pet(values: Sequence[Any]) -> dict[str, Any]:
    pet = dict(zip(PET_COLUMNS, values, strict=True))
    pet["id"] = stored_uuid(pet["id"])
    if pet["neutered"] is not None:
        pet["neutered"] = bool(pet["neutered"])  # SQLite's are 0 and 1
    return pet


def _link(values: Sequence[Any]) -> Link:
    revoked, token_digest, expires_at = values[:3]
    if revoked:
        return Link(token_digest, expires_at, True, None, (None,) * len(STORED_COLUMNS))
    return Link(token_digest, expires_at, False, tuple(values[3:_FIRST]), tuple(values[_FIRST:]))


def _link_record(values: Sequence[Any]) -> LinkRecord:
    revoked, token_digest, expires_at = values[:3]
    if revoked:
        return LinkRecord(token_digest, expires_at, True, None, None, 0, None, None)
    link_id, created_at, groups = values[_FIRST : _FIRST + 3]
    vouch = tuple(values[3:_FIRST])
    pet = _pet(values[_FIRST + 3 :])
    return LinkRecord(token_digest, expires_at, False, vouch, stored_uuid(link_id), created_at, groups, pet)


async def find_link(tx: Transaction, digest: str) -> LinkRecord | None:
    """The link, live or revoked, whose token has this digest, with what its facts are made from: one statement."""
    rows = await _statements(tx).fetch((LINK_RECORD, {"digest": digest}))
    return _link_record(rows[0]) if rows else None


async def look_up_link(store: Store, digest: str) -> Link | None:
    """The link, live or revoked, whose token has this digest, with its document as kept, in the one statement alone
    (SqlStore.lookup): no transaction where the store needs none."""
    if not isinstance(store, SqlStore):
        raise TypeError(f"{type(store).__name__} runs no statements")
    rows = await store.lookup((LINK, {"digest": digest}))
    return _link(rows[0]) if rows else None


async def pet_with_vouch(tx: Transaction, pet_id: uuid.UUID) -> tuple[Row, int, Any] | None:
    """A pet as a certificate shows it, with its revision and its doses' vouch (as LINK reads them): None for none."""
    rows = await _statements(tx).fetch((PET, {"pet_id": pet_id}))
    if not rows:
        return None
    revision, doses_vouch, *pet = rows[0]
    return _pet(pet), revision, doses_vouch


async def completed_doses(tx: Transaction, pet_id: uuid.UUID) -> list[tuple[Row, Row]]:
    """The pet's completed doses, oldest first, each with its vaccine, as facts.build_facts takes them."""
    found: list[tuple[Row, Row]] = []
    width = len(DOSE_COLUMNS)
    for values in await _statements(tx).fetch((DOSES, {"pet_id": pet_id, "most": MOST_DOSES})):
        dose = dict(zip(DOSE_COLUMNS, values[:width], strict=True))
        if dose["status"] != COMPLETED:
            continue
        dose["id"] = stored_uuid(dose["id"])
        vaccine = dict(zip(VACCINE_COLUMNS, values[width:], strict=True))
        vaccine["id"] = stored_uuid(vaccine["id"])
        found.append((dose, vaccine))
    return found


def _statements(tx: Transaction) -> SqlTransaction:
    if not isinstance(tx, SqlTransaction):
        raise TypeError(f"{type(tx).__name__} runs no statements")
    return tx
