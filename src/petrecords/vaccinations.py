"""Pet vaccinations: `/v1/pet-vaccination`, a vaccine given to a pet, and when the next dose is due."""

from __future__ import annotations

import datetime
import functools
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from petrecords.pets import PETS
from petrecords.resources.declaration import (
    Errors,
    Field,
    OnDelete,
    Ownership,
    Reference,
    Refused,
    Resource,
    Unique,
    Values,
)
from petrecords.resources.fields import (
    DAY_MS,
    CalendarDate,
    Code,
    Embedded,
    Instant,
    Listed,
    Name,
    Prose,
    RecordId,
    UserOrGroup,
)
from petrecords.resources.filters import AnyOf, Compared, Owner, time_bound
from petrecords.store.base import Condition, Operator, Row
from petrecords.tables import Text, audit_columns, hour_indexed, metadata, not_null, only_on
from petrecords.vaccines import VACCINES

EARLIEST_MS = -2_208_988_800_000  # 1900-01-01T00:00:00Z
APPLIED_AHEAD_MS = 5 * 60_000
COMPLETED, ENTERED_IN_ERROR = STATUSES = ("completed", "entered-in-error")
"""A dose as given, or one recorded in error: kept, readable, and counting for nothing."""
DOSE_TYPES = ("primary", "booster")

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
    sa.Column("lot_number", Text, nullable=True),
    sa.Column("lot_expires_on", sa.Integer(), nullable=True, comment="days since 1970-01-01"),
    sa.Column("dose_type", Text, nullable=True, comment="primary or booster"),
    sa.Column("veterinarian", Text, nullable=True),
    sa.Column("veterinarian_licence", Text, nullable=True),
    sa.Column("clinic", Text, nullable=True),
    sa.Column("rabies_tag", Text, nullable=True, comment="in upper case"),
    sa.Column("status", Text, nullable=False, server_default=COMPLETED, comment="completed or entered-in-error"),
    sa.Column("status_reason", Text, nullable=True),
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
    # The filters of a clinic's record, each in the default order; the few doses with a tag, a lot number or a
    # dose type are the only ones in theirs.
    sa.Index(None, "status", "created_at", "id"),
    sa.Index(None, "dose_type", "created_at", "id", **not_null("dose_type")),
    sa.Index(None, "rabies_tag", "id", **not_null("rabies_tag")),
    sa.Index(None, "lot_number", "id", **not_null("lot_number")),
)
hour_indexed(pet_vaccinations, "due_at")

# A rabies tag belongs to one completed dose in a calendar year (UTC). The service checks it while it holds the tag
# and the year (see Unique below); the database refuses a second one too, whatever writes it. Each database writes
# the year of an instant its own way.
TAG_YEAR_INDEX = "ix_pet_vaccinations_rabies_tag_year"
TAG_YEAR_WHERE = f"status = '{COMPLETED}' AND rabies_tag IS NOT NULL"
YEAR_OF_APPLIED_AT = {
    # As PostgreSQL writes it back, so that the schema's comparison with the database finds them equal.
    "postgresql": "EXTRACT(year FROM (to_timestamp((applied_at::numeric / 1000.0)::double precision) "
    "AT TIME ZONE 'UTC'::text))",
    "sqlite": "strftime('%Y', applied_at / 1000.0, 'unixepoch')",
}
for _dialect, _year in YEAR_OF_APPLIED_AT.items():
    _where: dict[str, Any] = {f"{_dialect}_where": sa.text(TAG_YEAR_WHERE)}
    only_on(
        _dialect,
        sa.Index(
            TAG_YEAR_INDEX,
            pet_vaccinations.c.rabies_tag,
            sa.text(f"({_year})"),
            unique=True,
            **_where,
        ),
    )

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_DAY = CalendarDate()


def _due_after_applied(values: Values) -> Errors:
    due, applied = values.get("due_at"), values.get("applied_at")
    if due is not None and applied is not None and due <= applied:
        return {"dueAt": ["must be later than appliedAt."]}
    return {}


def _fits_the_pet(values: Values, referenced: Mapping[str, Row]) -> Errors:
    """The vaccine must be one for the pet's type, and the dose not given after the day the pet died; an omitted due
    date is the vaccine's protection."""
    pet, vaccine = referenced["petId"], referenced["vaccineId"]
    errors: Errors = {}
    if vaccine["pet_type"] != pet["pet_type"]:
        errors["vaccineId"] = [f"must be a vaccine for the pet's type, {pet['pet_type']}."]
    died = pet["deceased_at"]
    if died is not None and values["applied_at"] >= (died + 1) * DAY_MS:
        errors["appliedAt"] = [f"must not be after the day the pet died (deceasedAt, UTC), {_DAY.show(died)}."]
    if not errors and values.get("due_at") is None:
        values["due_at"] = values["applied_at"] + vaccine["duration"] * DAY_MS
    return errors


def _as_recorded(stored: Values | None, written: Values) -> Errors:
    """Corrections never overwrite: a dose entered in error can only be deleted, a new one is completed, and the
    reason goes with the status. The product had not expired on the day it was given."""
    if stored is not None and stored["status"] == ENTERED_IN_ERROR:
        return {"status": ["is entered-in-error: the dose can no longer be written, only deleted."]}
    errors: Errors = {}
    if stored is None and written["status"] != COMPLETED:
        errors["status"] = ["must be completed on create: a dose is marked entered-in-error by a replace or update."]
    elif written["status"] == ENTERED_IN_ERROR and written["status_reason"] is None:
        errors["statusReason"] = ["is required when status is entered-in-error: why the dose was recorded in error."]
    elif written["status"] == COMPLETED and written["status_reason"] is not None:
        errors["statusReason"] = ["must be null while status is completed."]
    expires, applied_day = written["lot_expires_on"], written["applied_at"] // DAY_MS
    if expires is not None and expires < applied_day:
        errors["lotExpiresOn"] = [
            f"must not be before the day of appliedAt (UTC), {_DAY.show(applied_day)}: the product had expired."
        ]
    return errors


def _no_dose_after_death(pet: Values) -> Refused | None:
    """A pet's doses as its death leaves them: none completed after the day it died."""
    died = pet.get("deceased_at")
    if died is None:
        return None
    return Refused(
        conditions=(
            Condition(("applied_at",), Operator.AT_LEAST, ((died + 1) * DAY_MS,)),
            Condition(("status",), Operator.EQUAL, (COMPLETED,)),
        ),
        errors={"deceasedAt": ["must not be before the day (UTC) of a completed vaccination of the pet."]},
    )


@functools.lru_cache(maxsize=64)
def _year_ms(year: int) -> int:
    return (datetime.datetime(year, 1, 1, tzinfo=datetime.UTC) - _EPOCH) // datetime.timedelta(milliseconds=1)


def _completed_that_year(values: Values) -> tuple[Condition, ...] | None:
    """The completed doses applied in the calendar year (UTC) of this one, when it is completed (a replace that does
    not name the status keeps it: completed, for a dose entered in error is written no more)."""
    applied = values.get("applied_at")
    if applied is None or values.get("status") not in (None, COMPLETED):
        return None
    year = (_EPOCH + datetime.timedelta(milliseconds=applied)).year
    return (
        Condition(("status",), Operator.EQUAL, (COMPLETED,)),
        Condition(("applied_at",), Operator.AT_LEAST, (_year_ms(year),)),
        Condition(("applied_at",), Operator.BELOW, (_year_ms(year + 1),)),
    )


LOT_NUMBER = Code(
    50,
    allowed="A-Za-z0-9./-",
    inner=" ",
    allowed_text="ASCII letters, digits, -, / and ., and spaces between them",
    description="The batch or serial number on the vial: trimmed, 1–50 ASCII letters, digits, -, / and ., and spaces "
    "between them, kept as written (the filter matches it exactly, case included). Blank or null is null.",
    example="A123-45/B",
)
RABIES_TAG = Code(
    30,
    allowed="A-Za-z0-9-",
    allowed_text="letters, digits and hyphens",
    upper=True,
    description="The rabies tag number: trimmed, 1–30 ASCII letters, digits and hyphens, matched case-insensitively "
    "and returned in upper case. Unique among the vaccinations that exist, are completed and were applied in the "
    "same calendar year (UTC): another is 409. Blank or null is null.",
    example="R-2026-0042",
)

PET_VACCINATIONS = Resource(
    name="pet-vaccination",
    table=pet_vaccinations,
    title="pet vaccination",
    schema_name="PetVaccination",
    plural="PetVaccinations",
    path_parameter="petVaccinationId",
    description="A vaccine given to a pet, and when the next dose is due, with what a certificate shows of it. "
    "Someone else's pet's vaccination answers exactly as one that does not exist. A dose recorded in error is marked "
    "so (status entered-in-error, with a statusReason) and kept; from then on it can only be deleted.",
    fields=(
        Field(
            "ownerId",
            "owner_id",
            UserOrGroup("The pet's owner (a user, or group:NAME): it follows the pet to a new owner."),
            read_only=True,
        ),
        Field("petId", "pet_id", RecordId("A pet the caller may see."), required=True),
        Field("vaccineId", "vaccine_id", RecordId("A vaccine for the pet's type."), required=True),
        Field(
            "appliedAt",
            "applied_at",
            Instant(
                EARLIEST_MS,
                APPLIED_AHEAD_MS,
                "When the vaccine was given: RFC 3339 with `Z` or an offset, not before 1900, not later than five "
                "minutes after the service's clock, nor after the day the pet died (its deceasedAt, UTC); returned in "
                "UTC with milliseconds (rounded to the millisecond).",
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
        Field("lotNumber", "lot_number", LOT_NUMBER),
        Field(
            "lotExpiresOn",
            "lot_expires_on",
            CalendarDate(
                until_today=False,
                description="The product's expiry date, YYYY-MM-DD: not before the day (UTC) of appliedAt (an expired "
                "product is refused). Null: not recorded.",
                nullable=True,
            ),
        ),
        Field(
            "doseType",
            "dose_type",
            Listed(values=DOSE_TYPES, nullable=True, description="primary or booster"),
        ),
        Field(
            "veterinarian",
            "veterinarian",
            Name(
                max_length=100,
                example="Dr. Ana Ruiz",
                nullable=True,
                meaning="Who gave or supervised the dose.",
            ),
        ),
        Field(
            "veterinarianLicence",
            "veterinarian_licence",
            Name(max_length=50, example="VET-12345", nullable=True, meaning="Their licence number."),
        ),
        Field(
            "clinic",
            "clinic",
            Prose(max_length=300, meaning="The clinic's name and address, as a certificate shows them."),
        ),
        Field("rabiesTag", "rabies_tag", RABIES_TAG),
        Field(
            "status",
            "status",
            Listed(
                values=STATUSES,
                description="completed (when not given or null), or entered-in-error: the dose was recorded in error "
                "(a create must be completed; once entered-in-error, the dose can only be deleted)",
            ),
            default=COMPLETED,
        ),
        Field(
            "statusReason",
            "status_reason",
            Prose(
                max_length=500,
                meaning="Why the dose was marked entered-in-error: required when status becomes entered-in-error, "
                "null while it is completed.",
            ),
        ),
        Field("vaccine", "", Embedded("vaccineId"), read_only=True, description="The vaccine, as its GET returns it."),
    ),
    ownership=Ownership(column="owner_id", through="petId"),
    references=(
        Reference(
            "petId",
            PETS,
            OnDelete.CASCADE,
            "must be the id of a pet you may see.",
            requires=_no_dose_after_death,
            exclusive=True,  # a pet's due doses (petrecords.due_rows) are kept from all its doses
        ),
        Reference("vaccineId", VACCINES, OnDelete.RESTRICT, "must be the id of an existing vaccine."),
    ),
    unique=(
        Unique(
            ("rabiesTag",),
            within=_completed_that_year,
            among="among the completed vaccinations applied in the same calendar year (UTC)",
        ),
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
        AnyOf("status", "status", Listed(values=STATUSES), "Only vaccinations of these statuses."),
        AnyOf("doseType", "dose_type", Listed(values=DOSE_TYPES), "Only doses of these types (case-insensitive)."),
        Compared("rabiesTag", "rabies_tag", RABIES_TAG, Operator.EQUAL, "The doses with this rabies tag (any case)."),
        Compared(
            "lotNumber", "lot_number", LOT_NUMBER, Operator.EQUAL, "The doses from this lot (exactly, case included)."
        ),
    ),
    sort_fields=(
        "id",
        "petId",
        "vaccineId",
        "ownerId",
        "appliedAt",
        "dueAt",
        "status",
        "doseType",
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
    review=_as_recorded,
    examples={
        "petId": "019a8a4e-1f2b-7c3d-8e4f-5a6b7c8d9e0f",
        "vaccineId": "019a8a4e-2a3b-7c4d-9e5f-6a7b8c9d0e1f",
        "appliedAt": "2026-11-21T16:06:29.123Z",
        "lotNumber": "A123-45/B",
        "lotExpiresOn": "2027-06-30",
        "doseType": "booster",
        "veterinarian": "Dr. Ana Ruiz",
        "veterinarianLicence": "VET-12345",
        "clinic": "Riverside Veterinary Clinic, 1 Main St, Springfield",
        "rabiesTag": "R-2026-0042",
    },
)
