"""Shares: `/v1/pet-shares`, an owner letting someone else see a pet's records (a co-owner, a pet sitter) or look
after its health (a clinic's vets), until they expire or are deleted."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from petrecords.pets import PETS
from petrecords.resources.declaration import (
    Errors,
    Field,
    Grants,
    OnDelete,
    Ownership,
    Reference,
    Resource,
    Unique,
    Values,
)
from petrecords.resources.fields import (
    USER_OR_GROUP_SCHEMA,
    Instant,
    Listed,
    RecordId,
    SchemaContext,
    UserOrGroup,
)
from petrecords.resources.filters import AnyOf, Owner
from petrecords.store.base import Row
from petrecords.tables import Text, audit_columns, metadata

ACCESS = ("read", "care")
"""`read`: the pet, its vaccinations and their history; `care`: that, and writing the pet's vaccinations."""
MOST_PER_PET = 100

pet_shares = sa.Table(
    "pet_shares",
    metadata,
    *audit_columns(),
    sa.Column("owner_id", Text, nullable=False, comment="the pet's owner, kept equal to it"),
    sa.Column("pet_id", sa.Uuid(), sa.ForeignKey("pets.id"), nullable=False),
    sa.Column("grantee", Text, nullable=False, comment="an e-mail address, or group:NAME"),
    sa.Column("access", Text, nullable=False, comment="read or care"),
    sa.Column("expires_at", sa.BigInteger(), nullable=True, comment="epoch milliseconds; null: never"),
    sa.Index(None, "pet_id", "grantee", unique=True),
    # What a grantee may see: the pets shared with them, found by their name first.
    sa.Index(None, "grantee", "pet_id", "expires_at"),
    sa.Index(None, "created_at", "id"),
    sa.Index(None, "owner_id", "created_at", "id"),
    sa.Index(None, "modified_at", "id"),
)


class Grantee(UserOrGroup):
    """Who a share names: a user, or everyone whose token lists a group (read as an owner is)."""

    def schema(self, context: SchemaContext, *, sent: bool) -> dict[str, Any]:
        return {
            **USER_OR_GROUP_SCHEMA,
            "description": "A user, by e-mail address, or `group:NAME`: everyone whose token lists the group NAME "
            "(1-100 letters, digits and `. _ : @ - /`, compared exactly, case included). One leading `/`, as "
            "Keycloak writes a group's full path, is not part of the name: `group:/clinic-42` is `group:clinic-42`.",
            "examples": ["vet@clinic.example", "group:clinic-42", "group:clinics/north"],
        }


def _not_the_owner(values: Values, referenced: Mapping[str, Row]) -> Errors:
    """A share names someone else than the pet's owner."""
    if values.get("grantee") == referenced["petId"]["owner_id"]:
        return {"grantee": ["must not be the pet's owner, who may do everything already."]}
    return {}


PET_SHARES = Resource(
    name="pet-shares",
    table=pet_shares,
    title="pet share",
    schema_name="PetShare",
    plural="PetShares",
    path_parameter="petShareId",
    description="A share of a pet's records: the grantee (a user, or every member of a group) may read the pet, its "
    "vaccinations and their history, and with `care` also write the pet's vaccinations, until the share expires or "
    "is deleted. Its owner writes it; the grantee may read it, and a user grantee may delete it (to leave).",
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
            RecordId("A pet the caller owns (an administrator: any pet). It cannot change."),
            required=True,
            fixed=True,
        ),
        Field("grantee", "grantee", Grantee(), required=True, fixed=True),
        Field(
            "access",
            "access",
            Listed(
                values=ACCESS,
                description="read (the pet, its vaccinations and their history) or care (also "
                "writing the pet's vaccinations)",
            ),
            required=True,
        ),
        Field(
            "expiresAt",
            "expires_at",
            Instant(
                0,
                description="After it the share grants nothing (it stays listed until deleted); when given, in the "
                "future. Null: never.",
                example="2027-11-21T16:06:29.123Z",
                nullable=True,
                future=True,
            ),
        ),
    ),
    ownership=Ownership(column="owner_id", through="petId"),
    references=(Reference("petId", PETS, OnDelete.CASCADE, "must be the id of a pet you own.", owned=True),),
    grants=Grants(
        reference="petId",
        grantee_column="grantee",
        access_column="access",
        expires_column="expires_at",
        writing=("care",),
        most_per_target=MOST_PER_PET,
    ),
    unique=(Unique(("petId", "grantee")),),
    filters=(
        AnyOf("petId", "pet_id", RecordId(), "Only the shares of these pets."),
        AnyOf("grantee", "grantee", Grantee(), "Only the shares naming these grantees."),
        AnyOf("access", "access", Listed(values=ACCESS), "Only shares of these accesses."),
        Owner("owner_id"),
    ),
    sort_fields=(
        "id",
        "petId",
        "grantee",
        "access",
        "expiresAt",
        "createdAt",
        "createdBy",
        "modifiedAt",
        "modifiedBy",
    ),
    command="shares",
    complete=_not_the_owner,
    examples={"petId": "019a8a4e-1f2b-7c3d-8e4f-5a6b7c8d9e0f", "grantee": "group:clinic-42", "access": "care"},
)
