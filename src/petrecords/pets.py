"""The pet resource: `/v1/pets`."""

from __future__ import annotations

import sqlalchemy as sa

from petrecords.resources.declaration import Errors, Field, Ownership, Resource, Unique, Values
from petrecords.resources.fields import CalendarDate, Flag, Listed, Microchip, Name, UserOrGroup, pet_type
from petrecords.resources.filters import AnyOf, Compared, HasValue, Matches, Owner
from petrecords.store.base import Operator
from petrecords.tables import Text, audit_columns, metadata, not_null, trigram_indexed

NAME_MAX_LENGTH = 100
SEXES = ("female", "male", "unknown")

pets = sa.Table(
    "pets",
    metadata,
    *audit_columns(),
    sa.Column("owner_id", Text, nullable=False),
    sa.Column("name", Text, nullable=False),
    sa.Column("name_key", Text, nullable=False, comment="lower-cased name, for sorting and matching"),
    sa.Column("pet_type", Text, nullable=False),
    sa.Column("birth_date", sa.Integer(), nullable=True, comment="days since 1970-01-01"),
    sa.Column("sex", Text, nullable=True),
    sa.Column("neutered", sa.Boolean(), nullable=True),
    sa.Column("breed", Text, nullable=True),
    sa.Column("breed_key", Text, nullable=True, comment="lower-cased breed, for sorting and matching"),
    sa.Column("microchip", Text, nullable=True, comment="15 digits (ISO 11784), 10 of 0-9 A-F (FDX-A) or 9 (AVID)"),
    sa.Column("color", Text, nullable=True),
    sa.Column("deceased_at", sa.Integer(), nullable=True, comment="days since 1970-01-01"),
    # The default order and the filters each have an index that ends in the order's tie-breaker.
    sa.Index(None, "created_at", "id"),
    sa.Index(None, "owner_id", "created_at", "id"),
    # name_key rides along at the end so that counting a type's matches of `name`/`search` reads
    # only the index, not every matching row of the table.
    sa.Index(None, "pet_type", "created_at", "id", "name_key"),
    sa.Index(None, "owner_id", "pet_type", "created_at", "id", "name_key"),
    sa.Index(None, "modified_at", "id"),
    sa.Index(None, "name_key", "id"),
    sa.Index(None, "owner_id", "name_key", "id"),
    # Most pets have no chip: only those with one are in the index that keeps chips unique.
    sa.Index(None, "microchip", unique=True, **not_null("microchip")),
    sa.Index(None, "birth_date", "id"),
    sa.Index(None, "owner_id", "birth_date", "id"),
    sa.Index(None, "breed_key", "id"),
    # Few pets have died: `deceased=true` reads them alone.
    sa.Index(None, "deceased_at", "id", **not_null("deceased_at")),
)

# `search` (a substring anywhere in the name) reads its candidates from the name's trigrams.
trigram_indexed(pets, "name_key")


def _died_after_birth(stored: Values | None, written: Values) -> Errors:
    """A pet dies on or after the day it was born."""
    born, died = written.get("birth_date"), written.get("deceased_at")
    if born is None or died is None or died >= born:
        return {}
    if stored is not None and stored["deceased_at"] == died:
        # Only the birth date moved: it is the one to name.
        return {"birthDate": ["must not be after deceasedAt, the day the pet died."]}
    return {"deceasedAt": ["must not be before birthDate, the day the pet was born."]}


PETS = Resource(
    name="pets",
    table=pets,
    title="pet",
    schema_name="Pet",
    plural="Pets",
    path_parameter="petId",
    description="Pet records: name, type and owner, and what a clinic keeps: birth date, sex, neutered, breed, "
    "microchip, colour and markings, and the day it died.",
    fields=(
        Field(
            "ownerId",
            "owner_id",
            UserOrGroup(
                "The owner: a user (an e-mail address), or a group as group:NAME (a clinic, whose members all have "
                "the owner's rights). Defaults to the caller (on replace: the current owner). A non-admin may name "
                "themselves or a group their token lists; only an admin may name another user or group."
            ),
        ),
        Field("name", "name", Name(max_length=NAME_MAX_LENGTH, key_column="name_key"), required=True),
        Field("petType", "pet_type", pet_type(), required=True),
        Field("birthDate", "birth_date", CalendarDate(nullable=True)),
        Field("sex", "sex", Listed(values=SEXES, nullable=True, description="female, male or unknown")),
        Field("neutered", "neutered", Flag(nullable=True, description="Whether the pet is neutered (or spayed).")),
        Field(
            "breed", "breed", Name(max_length=NAME_MAX_LENGTH, key_column="breed_key", example="Beagle", nullable=True)
        ),
        Field("microchip", "microchip", Microchip()),
        Field(
            "color",
            "color",
            Name(
                max_length=NAME_MAX_LENGTH,
                example="Tricolour, white blaze",
                nullable=True,
                meaning="Colour and markings, as a certificate shows them.",
            ),
        ),
        Field(
            "deceasedAt",
            "deceased_at",
            CalendarDate(
                description="The day the pet died, YYYY-MM-DD: not after today (UTC), not before birthDate, nor before "
                "the day (UTC) of a completed vaccination of it already recorded; no vaccination of it may be applied "
                "after that day. Null: living.",
                nullable=True,
            ),
        ),
    ),
    unique=(Unique(("microchip",)),),
    ownership=Ownership(column="owner_id", settable=True),
    filters=(
        AnyOf("petType", "pet_type", pet_type(), "Only these pet types (case-insensitive)."),
        Owner("owner_id"),
        Matches("name", ("name_key",), substring=False, description="Case-insensitive match of the whole name."),
        Matches("search", ("name_key",), substring=True, description="Case-insensitive substring of the name."),
        AnyOf("sex", "sex", Listed(values=SEXES), "Only pets of these sexes (case-insensitive)."),
        AnyOf("neutered", "neutered", Flag(), "Only neutered pets (true), or only those that are not (false)."),
        AnyOf(
            "microchip",
            "microchip",
            Microchip(nullable=False),
            "The pet with this microchip code (15 digits, 10 characters 0-9 and A-F, or 9 digits; separators removed, "
            "case ignored).",
        ),
        HasValue("deceased", "deceased_at", "Only deceased pets (true: deceasedAt is set), or living ones (false)."),
        Matches("breed", ("breed_key",), substring=False, description="Case-insensitive match of the whole breed."),
        Compared("birthDateFrom", "birth_date", CalendarDate(), Operator.AT_LEAST, "birthDate on or after this."),
        Compared("birthDateTo", "birth_date", CalendarDate(), Operator.BELOW, "birthDate before this."),
    ),
    sort_fields=(
        "id",
        "name",
        "petType",
        "ownerId",
        "birthDate",
        "breed",
        "createdAt",
        "createdBy",
        "modifiedAt",
        "modifiedBy",
    ),
    counted_by="pet_type",
    review=_died_after_birth,
    examples={
        "name": "Rex",
        "petType": "Dog",
        "birthDate": "2019-04-23",
        "sex": "male",
        "microchip": "982000123456789",
    },
)
