"""Certificates: `/v1/pet-certificates`, a link an owner (or anyone who may read the pet) hands to a kennel or a border
check, shown once at creation, that works without an account until it expires or is deleted (contract section 16).

A certificate is between its issuer and the pet's owner (Ownership.issuer): they and an administrator read, list,
change and delete it; no share shows it to anyone else; the pet's transfer or deletion deletes it. The record keeps
the SHA-256 of its link's token, never the token (see links.py); a deleted certificate leaves that digest among the
revoked links, for good (as an expired link does, a revoked one answers 410, not 404, however old), and an export
takes them along (see portability.records.REVOKED_LINKS).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
import sqlalchemy as sa

from petrecords.certificates.links import TOKEN_LENGTH, digest_of, link_of, new_token
from petrecords.certificates.stored import forget_document, keep_document, made
from petrecords.pets import PETS
from petrecords.resources.declaration import (
    Field,
    OnDelete,
    Ownership,
    Preparing,
    Reference,
    Resource,
    Revealed,
    Values,
)
from petrecords.resources.fields import (
    DAY_MS,
    Context,
    Instant,
    Name,
    PlainKind,
    Problem,
    RecordId,
    SchemaContext,
    UserOrGroup,
)
from petrecords.resources.filters import AnyOf, Owner
from petrecords.store.base import Collection, Row, Transaction
from petrecords.tables import Text, audit_columns, metadata
from petrecords.text import match_key
from petrecords.values import now_ms

MOST_PER_PET = 100
"""Certificates of one pet, expired ones included until deleted."""
MOST_GROUPS = 20
"""Groups one certificate names."""
DEFAULT_DAYS = 30
"""How long a certificate whose create names no `expiresAt` lives."""
MOST_DAYS = 366
"""How far ahead a certificate's `expiresAt` may be."""

pet_certificates = sa.Table(
    "pet_certificates",
    metadata,
    *audit_columns(),
    sa.Column("owner_id", Text, nullable=False, comment="the pet's owner, kept equal to it"),
    sa.Column("pet_id", sa.Uuid(), sa.ForeignKey("pets.id"), nullable=False),
    sa.Column("groups", Text, nullable=True, comment="the groups shown, a JSON array; null: every group"),
    sa.Column("expires_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
    sa.Column("token_digest", Text, nullable=False, comment="SHA-256 of the link's token, hexadecimal"),
    # The public answer's one lookup, by the token's digest.
    sa.Index(None, "token_digest", unique=True),
    # A pet's certificates: counted on create, deleted with the pet.
    sa.Index(None, "pet_id", "created_at", "id"),
    sa.Index(None, "created_at", "id"),
    sa.Index(None, "owner_id", "created_at", "id"),
    sa.Index(None, "created_by", "created_at", "id"),
    sa.Index(None, "modified_at", "id"),
)

revoked_certificate_links = sa.Table(
    "revoked_certificate_links",
    metadata,
    sa.Column("id", sa.Uuid(), primary_key=True, comment="the deleted certificate's id"),
    sa.Column("token_digest", Text, nullable=False, comment="SHA-256 of its link's token, hexadecimal"),
    sa.Column("expires_at", sa.BigInteger(), nullable=False, comment="when it would have expired: epoch ms"),
    sa.Index(None, "token_digest", unique=True),
)

REVOKED_LINKS = Collection(name="revoked-certificate-links", table=revoked_certificate_links)
"""The links of deleted certificates, which answer 410: kept, never purged, and exported."""


class Expiry(Instant):
    """When a certificate stops working: in the future, and at most MOST_DAYS days after the service's clock."""

    def read(self, value: Any, context: Context) -> tuple[Any, Problem | None]:
        moment, problem = super().read(value, context)
        if problem is None and moment > context.now_ms + MOST_DAYS * DAY_MS:
            return None, f"must be at most {MOST_DAYS} days after the service's clock."
        return moment, problem


_GROUP = Name(max_length=100, example="Rabies")


@dataclass(frozen=True)
class Groups(PlainKind):
    """The groups a certificate shows: 1 to MOST_GROUPS names of vaccine groups (as a vaccine's `group`, or its name
    when it has none), matched case-insensitively; stored as a JSON array, duplicates (case ignored) left out. Null:
    every group."""

    nullable = True

    def read(self, value: Any, context: Context) -> tuple[Any, Problem | None]:
        if not isinstance(value, list) or not 1 <= len(value) <= MOST_GROUPS:
            return None, f"must be {self.expected(context)}."
        names: list[str] = []
        keys: set[str] = set()
        for item in value:
            name, problem = _GROUP.read(item, context)
            if problem is not None:
                return None, f"must be {self.expected(context)}."
            if match_key(name) not in keys:
                keys.add(match_key(name))
                names.append(name)
        return msgspec.json.encode(names).decode(), None

    def show(self, stored: Any) -> Any:
        return msgspec.json.decode(stored)

    def expected(self, context: Context) -> str:
        return f"null, or a list of 1 to {MOST_GROUPS} group names of 1 to 100 characters"

    def schema(self, context: SchemaContext, *, sent: bool) -> dict[str, Any]:
        names = _GROUP.schema(context, sent=sent)
        names.pop("description", None)
        names.pop("examples", None)
        return {
            "oneOf": [
                {"type": "array", "items": names, "minItems": 1, "maxItems": MOST_GROUPS},
                {"type": "null"},
            ],
            "description": "The groups the certificate shows, matched case-insensitively against each dose's group "
            "label (its vaccine's `group`, or its `name` when that is null); a name given twice, case ignored, is "
            "kept once. Null: every group.",
            "examples": [["Rabies", "DHPP"]],
        }


LINK_SCHEMA = {
    "type": "string",
    "pattern": f"^/public/certificates/[A-Za-z0-9_-]{{{TOKEN_LENGTH}}}$",
    "readOnly": True,
    "description": "The public path of the certificate, with a token of 256 random bits: whoever holds it reads the "
    "certificate. Shown here alone; the service keeps only a digest of it.",
    "examples": ["/public/certificates/q1n3Vb0yH0kq9s6y5r7m2Xw8cJd4Ef1gTu3Lp6Oa0Zs"],
}


async def _revoke(tx: Transaction, certificate: Row) -> None:
    """Keep a deleted certificate's link among the revoked ones, so that it answers 410."""
    revoked = {key: certificate[key] for key in ("id", "token_digest", "expires_at")}
    await tx.insert(REVOKED_LINKS, revoked)
    await forget_document(tx, certificate["id"])


async def _make_document(preparing: Preparing) -> Values:
    """Make the public JSON of the certificate as its write leaves it, and keep it in the write's transaction
    (stored.py), so that its link's first read finds it made."""
    from petrecords.certificates.reads import completed_doses, pet_with_vouch  # it reads this module's tables

    tx, written = preparing.tx, preparing.written
    found = await pet_with_vouch(tx, written["pet_id"])
    if found is None:
        return {}  # no such pet: the write is refused before it is made
    pet, pet_revision, doses_vouch = found
    days = preparing.settings.due_soon_days
    version = (written["revision"], pet_revision, doses_vouch)
    answer = made(
        version=version,
        certificate_id=written["id"],
        issued_at_ms=written["created_at"],
        expires_at_ms=written["expires_at"],
        groups=None if written["groups"] is None else Groups().show(written["groups"]),
        pet=pet,
        doses=await completed_doses(tx, pet["id"]),
        now_ms=now_ms(),
        due_soon_days=days,
    )
    await keep_document(tx, written["id"], version, answer, due_soon_days=days)
    return {}


def _new_link() -> tuple[Values, dict[str, Any]]:
    """A new certificate's link: the record keeps its token's digest alone; the create's answer shows the link."""
    token = new_token()
    return {"token_digest": digest_of(token)}, {"link": link_of(token)}


PET_CERTIFICATES = Resource(
    name="pet-certificates",
    table=pet_certificates,
    title="pet certificate",
    schema_name="PetCertificate",
    plural="PetCertificates",
    path_parameter="petCertificateId",
    description="A certificate of a pet's vaccinations: a link that works without an account "
    "(`GET /public/certificates/{token}`) until it expires or the certificate is deleted. Whoever may read the pet "
    "may issue one; its issuer, the pet's owner and an administrator read, change and delete it. The link is shown "
    "in the answer to the create alone. The pet's transfer or deletion deletes its certificates.",
    fields=(
        Field(
            "ownerId",
            "owner_id",
            UserOrGroup("The pet's owner (a user, or group:NAME): it follows the pet."),
            read_only=True,
        ),
        Field(
            "petId",
            "pet_id",
            RecordId("A pet the caller may read. It cannot change."),
            required=True,
            fixed=True,
        ),
        Field("groups", "groups", Groups()),
        Field(
            "expiresAt",
            "expires_at",
            Expiry(
                0,
                description=f"When the link stops working (410): in the future and at most {MOST_DAYS} days after the "
                f"service's clock. Default: {DEFAULT_DAYS} days after creation.",
                example="2027-01-04T16:06:29.123Z",
                future=True,
            ),
            default_ahead_ms=DEFAULT_DAYS * DAY_MS,
        ),
    ),
    ownership=Ownership(column="owner_id", through="petId", issuer="created_by"),
    references=(Reference("petId", PETS, OnDelete.CASCADE, "must be the id of a pet you may read."),),
    filters=(
        AnyOf("petId", "pet_id", RecordId(), "Only the certificates of these pets."),
        Owner("owner_id"),
    ),
    sort_fields=("id", "petId", "expiresAt", "createdAt", "createdBy", "modifiedAt", "modifiedBy"),
    revealed=Revealed(
        make=_new_link,
        revoke=_revoke,
        schemas={"link": LINK_SCHEMA},
    ),
    prepare=_make_document,
    most_per_reference=("petId", MOST_PER_PET),
    tolerated=("link",),  # the create's answer, sent back
    command="certificates",
    examples={"petId": "019a8a4e-1f2b-7c3d-8e4f-5a6b7c8d9e0f", "groups": ["Rabies"]},
)
