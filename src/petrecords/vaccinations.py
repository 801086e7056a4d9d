"""Pet vaccinations: `/v1/pet-vaccination`, a vaccine given to a pet, and when the next dose is due."""

from __future__ import annotations

from collections.abc import Mapping

import sqlalchemy as sa

from petrecords.pets import PETS
from petrecords.resources.declaration import Errors, Field, OnDelete, Ownership, Reference, Resource, Values
from petrecords.resources.fields import DAY_MS, Email, Embedded, Instant, Prose, RecordId
from petrecords.resources.filters import AnyOf, Owner, time_bound
from petrecords.store.base import Operator, Row
from petrecords.tables import Text, audit_columns, hour_indexed, metadata
from petrecords.vaccines import VACCINES

EARLIEST_MS = -2_208_988_800_000  # 1900-01-01T00:00:00Z
APPLIED_AHEAD_MS = 5 * 60_000

pet_vaccinations = sa.Table(
    "pet_vaccinations",
    metadata,
    *audit_columns(),
    sa.Column("owner_id", Text, nullable=False, comment="the pet's owner, kept equal to it"),
    sa.Column("pet_id", sa.Uuid(), sa.ForeignKey("pets.id"), nullable=False),
    sa.Column("vaccine_id", sa.Uuid(), sa.ForeignKey("vaccines.id"), nullable=False),
    sa.Column("applied_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
    sa.Column("due_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
    sa.Column("notes", Text, nullable=True),
    sa.Column("revision", sa.Integer(), nullable=False, comment="bumped on every write; the ETag derives from it"),
    sa.Index(None, "created_at", "id"),
    sa.Index(None, "owner_id", "created_at", "id"),
    # The owner second: an owner's list of one pet must out-rank the owner's own index, which keeps the
    # applied order too but holds every vaccination of the owner.
    sa.Index(None, "pet_id", "owner_id", "applied_at", "id"),
    sa.Index(None, "vaccine_id", "id"),
    sa.Index(None, "due_at", "id"),
    sa.Index(None, "owner_id", "due_at", "id"),
    sa.Index(None, "applied_at", "id"),
    sa.Index(None, "owner_id", "applied_at", "id"),
    sa.Index(None, "modified_at", "id"),
)
hour_indexed(pet_vaccinations, "due_at")


def _due_after_applied(values: Values) -> Errors:
    due, applied = values.get("due_at"), values.get("applied_at")
    if due is not None and applied is not None and due <= applied:
        return {"dueAt": ["must be later than appliedAt."]}
    return {}


def _fits_the_pet(values: Values, referenced: Mapping[str, Row]) -> Errors:
    """The vaccine must be one for the pet's type; an omitted due date is the vaccine's protection."""
    pet, vaccine = referenced["petId"], referenced["vaccineId"]
    if vaccine["pet_type"] != pet["pet_type"]:
        return {"vaccineId": [f"must be a vaccine for the pet's type, {pet['pet_type']}."]}
    if values.get("due_at") is None:
        values["due_at"] = values["applied_at"] + vaccine["duration"] * DAY_MS
    return {}


PET_VACCINATIONS = Resource(
    name="pet-vaccination",
    table=pet_vaccinations,
    title="pet vaccination",
    schema_name="PetVaccination",
    plural="PetVaccinations",
    path_parameter="petVaccinationId",
    description="A vaccine given to a pet, and when the next dose is due. Someone else's pet's vaccination "
    "answers exactly as one that does not exist.",
    fields=(
        Field("ownerId", "owner_id", Email("The pet's owner: it follows the pet to a new owner."), read_only=True),
        Field("petId", "pet_id", RecordId("A pet the caller may see."), required=True),
        Field("vaccineId", "vaccine_id", RecordId("A vaccine for the pet's type."), required=True),
        Field(
            "appliedAt",
            "applied_at",
            Instant(
                EARLIEST_MS,
                APPLIED_AHEAD_MS,
                "When the vaccine was given: RFC 3339 with `Z` or an offset, not before 1900, not later than five "
                "minutes after the service's clock; returned in UTC with milliseconds (rounded to the millisecond).",
            ),
            required=True,
        ),
        Field(
            "dueAt",
            "due_at",
            Instant(
                EARLIEST_MS,
                description="When the next dose is due: later than appliedAt (so not before 1900), not after "
                "9999-12-31T23:59:59.999Z (in UTC, rounded to the millisecond). When not given: appliedAt plus the "
                "vaccine's duration in days, fixed when the record is written (and computed again on a replace that "
                "omits it).",
                example="2027-11-21T16:06:29.123Z",
            ),
            derived=True,
        ),
        Field("notes", "notes", Prose(max_length=2000)),
        Field("vaccine", "", Embedded("vaccineId"), read_only=True, description="The vaccine, as its GET returns it."),
    ),
    ownership=Ownership(column="owner_id", through="petId"),
    references=(
        Reference("petId", PETS, OnDelete.CASCADE, "must be the id of a pet you may see."),
        Reference("vaccineId", VACCINES, OnDelete.RESTRICT, "must be the id of an existing vaccine."),
    ),
    filters=(
        AnyOf("petId", "pet_id", RecordId(), "Only the vaccinations of these pets."),
        AnyOf("vaccineId", "vaccine_id", RecordId(), "Only vaccinations with these vaccines."),
        Owner("owner_id"),
        time_bound("appliedAt", "applied_at", Operator.EQUAL, "appliedAt is exactly this instant."),
        time_bound("appliedAtMin", "applied_at", Operator.AT_LEAST, "appliedAt ≥ this."),
        time_bound("appliedAtMax", "applied_at", Operator.AT_MOST, "appliedAt ≤ this."),
        time_bound("dueFrom", "due_at", Operator.AT_LEAST, "dueAt ≥ this."),
        time_bound("dueTo", "due_at", Operator.BELOW, "dueAt < this: with the current time, what is overdue."),
    ),
    sort_fields=(
        "id",
        "petId",
        "vaccineId",
        "ownerId",
        "appliedAt",
        "dueAt",
        "createdAt",
        "createdBy",
        "modifiedAt",
        "modifiedBy",
    ),
    counted_over="due_at",
    tolerated=("pet",),
    command="vaccinations",
    check=_due_after_applied,
    complete=_fits_the_pet,
    examples={
        "petId": "019a8a4e-1f2b-7c3d-8e4f-5a6b7c8d9e0f",
        "vaccineId": "019a8a4e-2a3b-7c4d-9e5f-6a7b8c9d0e1f",
        "appliedAt": "2026-11-21T16:06:29.123Z",
    },
)
