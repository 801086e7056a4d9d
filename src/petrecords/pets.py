"""The pet resource: `/v1/pets`."""

from __future__ import annotations

import sqlalchemy as sa

from petrecords.resources.declaration import Field, Ownership, Resource
from petrecords.resources.fields import Email, Name, pet_type
from petrecords.resources.filters import AnyOf, Matches, Owner
from petrecords.tables import Text, audit_columns, metadata, trigram_indexed

NAME_MAX_LENGTH = 100

pets = sa.Table(
    "pets",
    metadata,
    *audit_columns(),
    sa.Column("owner_id", Text, nullable=False),
    sa.Column("name", Text, nullable=False),
    sa.Column("name_key", Text, nullable=False, comment="lower-cased name, for sorting and matching"),
    sa.Column("pet_type", Text, nullable=False),
    sa.Column("revision", sa.Integer(), nullable=False, comment="bumped on every write; the ETag derives from it"),
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
)

# `search` (a substring anywhere in the name) reads its candidates from the name's trigrams.
trigram_indexed(pets, "name_key")

PETS = Resource(
    name="pets",
    table=pets,
    title="pet",
    schema_name="Pet",
    plural="Pets",
    path_parameter="petId",
    description="Pet records: name, type and owner.",
    fields=(
        Field(
            "ownerId",
            "owner_id",
            Email(
                "The owner. Defaults to the caller (on replace: the current owner); only an admin may name "
                "another user."
            ),
        ),
        Field("name", "name", Name(max_length=NAME_MAX_LENGTH, key_column="name_key"), required=True),
        Field("petType", "pet_type", pet_type(), required=True),
    ),
    ownership=Ownership(column="owner_id", settable=True),
    filters=(
        AnyOf("petType", "pet_type", pet_type(), "Only these pet types (case-insensitive)."),
        Owner("owner_id"),
        Matches("name", ("name_key",), substring=False, description="Case-insensitive match of the whole name."),
        Matches("search", ("name_key",), substring=True, description="Case-insensitive substring of the name."),
    ),
    sort_fields=("id", "name", "petType", "ownerId", "createdAt", "createdBy", "modifiedAt", "modifiedBy"),
    counted_by="pet_type",
    examples={"name": "Rex", "petType": "Dog"},
)
