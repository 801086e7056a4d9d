"""The vaccine catalogue: `/v1/vaccines`, shared by every caller, written by administrators."""

from __future__ import annotations

import sqlalchemy as sa

from petrecords.resources.declaration import Field, Ownership, Resource, Writers
from petrecords.resources.fields import Name, Prose, WholeNumber, pet_type
from petrecords.resources.filters import AnyOf, Compared, Matches, number_bound
from petrecords.store.base import Operator
from petrecords.tables import Text, audit_columns, metadata, trigram_indexed
from petrecords.text import PROSE_CONTROLS

vaccines = sa.Table(
    "vaccines",
    metadata,
    *audit_columns(),
    sa.Column("name", Text, nullable=False),
    sa.Column("name_key", Text, nullable=False, comment="lower-cased name, for sorting and matching"),
    sa.Column("description", Text, nullable=True),
    sa.Column("description_key", Text, nullable=True, comment="lower-cased description, for matching"),
    sa.Column("pet_type", Text, nullable=False),
    sa.Column("duration", sa.Integer(), nullable=False, comment="days of protection"),
    sa.Column("group_name", Text, nullable=True, comment="the disease its doses protect against"),
    sa.Column("group_key", Text, nullable=True, comment="lower-cased group, for sorting and matching"),
    sa.Column("manufacturer", Text, nullable=True),
    sa.Index(None, "created_at", "id"),
    sa.Index(None, "pet_type", "created_at", "id"),
    sa.Index(None, "name_key", "id"),
    sa.Index(None, "modified_at", "id"),
    sa.Index(None, "group_key", "id"),
)

# `search` covers the name and the description: a record is a candidate when either has the pattern's trigrams.
trigram_indexed(vaccines, "name_key", "description_key")

GROUP = Name(
    max_length=100,
    key_column="group_key",
    example="Rabies",
    nullable=True,
    meaning="The disease the vaccine protects against, which its doses renew (Rabies, DHPP): two vaccines with equal "
    "groups, case ignored, renew each other's doses. Null: the vaccine is a group of its own.",
)

VACCINES = Resource(
    name="vaccines",
    table=vaccines,
    title="vaccine",
    schema_name="Vaccine",
    plural="Vaccines",
    path_parameter="vaccineId",
    description="The catalogue of vaccines, shared by every caller; only an administrator may change it.",
    fields=(
        Field("name", "name", Name(max_length=100, key_column="name_key", example="Rabies"), required=True),
        Field("description", "description", Prose(max_length=1000, key_column="description_key")),
        Field("petType", "pet_type", pet_type(), required=True),
        Field("duration", "duration", WholeNumber(1, 36500, "Days of protection."), required=True),
        Field("group", "group_name", GROUP),
        Field(
            "manufacturer",
            "manufacturer",
            Name(max_length=100, example="Boehringer Ingelheim", nullable=True, meaning="Who makes the product."),
        ),
    ),
    ownership=Ownership(writers=Writers.ADMIN),
    filters=(
        AnyOf("petType", "pet_type", pet_type(), "Only vaccines for these pet types (case-insensitive)."),
        Matches("name", ("name_key",), substring=False, description="Case-insensitive match of the whole name."),
        Matches(
            "search",
            ("name_key", "description_key"),
            substring=True,
            description="Case-insensitive substring of the name or of the description (which may hold line feeds "
            "and tabs).",
            kept=PROSE_CONTROLS,
        ),
        number_bound("durationMin", "duration", Operator.AT_LEAST, "duration ≥ this (days)."),
        number_bound("durationMax", "duration", Operator.AT_MOST, "duration ≤ this (days)."),
        Compared(
            "group",
            "group_key",
            GROUP,
            Operator.EQUAL,
            "Only the vaccines of this group: the whole group, case ignored.",
            keyed=True,
        ),
    ),
    sort_fields=("id", "name", "petType", "duration", "group", "createdAt", "createdBy", "modifiedAt", "modifiedBy"),
    counted_by="pet_type",
    examples={
        "name": "Rabies",
        "description": "Core vaccine.",
        "petType": "Dog",
        "duration": 365,
        "group": "Rabies",
        "manufacturer": "Boehringer Ingelheim",
    },
)
