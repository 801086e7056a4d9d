"""Rows as the store reads them, for the certificates' tests: a pet, vaccines and doses, and the facts they make."""

from __future__ import annotations

import uuid
from typing import Any

from petrecords.certificates.facts import CertificateFacts, build_facts
from petrecords.values import new_record_id

DAY_MS = 86_400_000
NOW_MS = 1_796_000_000_000  # 2026-11-29T…Z
CERTIFICATE_ID = uuid.UUID("019ad0a0-0000-7000-8000-000000000001")
# The members of a dose on a certificate, in the order the page and the JSON show them.
DOSE_MEMBERS = [
    "id",
    "version",
    "group",
    "vaccineName",
    "manufacturer",
    "lotNumber",
    "lotExpiresOn",
    "appliedAt",
    "dueAt",
    "doseType",
    "veterinarian",
    "veterinarianLicence",
    "clinic",
    "rabiesTag",
    "state",
]


def pet_row(**values: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": uuid.UUID("019ad0a0-0000-7000-8000-0000000000aa"),
        "owner_id": "alice@example.com",
        "name": "Rex",
        "pet_type": "Dog",
        "breed": "Beagle",
        "sex": "male",
        "neutered": True,
        "birth_date": 18_000,
        "color": "tricolour, white blaze",
        "microchip": "982000123456789",
        "deceased_at": None,
    }
    row.update(values)
    return row


def vaccine_row(name: str = "Nobivac Rabies", group: str | None = "Rabies", **values: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": new_record_id(),
        "name": name,
        "group_name": group,
        "manufacturer": "MSD Animal Health",
        "pet_type": "Dog",
        "duration": 365,
        "description": "not on a certificate",
    }
    row.update(values)
    return row


def dose_row(applied_at_ms: int, *, due_in_days: int = 365, **values: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": new_record_id(),
        "revision": 1,
        "owner_id": "alice@example.com",
        "created_by": "vet@clinic.example",
        "applied_at": applied_at_ms,
        "due_at": applied_at_ms + due_in_days * DAY_MS,
        "notes": "not on a certificate",
        "lot_number": "A123-45",
        "lot_expires_on": 20_800,
        "dose_type": "booster",
        "veterinarian": "Dr. Jane Doe",
        "veterinarian_licence": "VET-12345",
        "clinic": "Clinique du Parc, 1 rue du Parc, Lyon",
        "rabies_tag": "R2026-001",
        "status": "completed",
        "status_reason": None,
    }
    row.update(values)
    return row


def many_doses(count: int) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """`count` doses of five groups, a month apart, the latest first due in a year."""
    vaccines = [
        vaccine_row("Nobivac Rabies", "Rabies"),
        vaccine_row("Vanguard Plus 5", "DHPP", manufacturer="Zoetis"),
        vaccine_row("Nobivac KC", "Kennel cough"),
        vaccine_row("Leptospirosis L4", None, manufacturer=None),
        vaccine_row("Lyme", "Borreliosis", manufacturer="Boehringer Ingelheim"),
    ]
    return [
        (dose_row(NOW_MS - (count - number) * 30 * DAY_MS, rabies_tag=f"R-{number}"), vaccines[number % 5])
        for number in range(count)
    ]


def facts_of(
    pet: dict[str, Any] | None = None,
    doses: list[tuple[dict[str, Any], dict[str, Any]]] | None = None,
    *,
    groups: list[str] | None = None,
    now_ms: int = NOW_MS,
    due_soon_days: int = 30,
) -> CertificateFacts:
    return build_facts(
        certificate_id=CERTIFICATE_ID,
        issued_at_ms=now_ms - DAY_MS,
        expires_at_ms=now_ms + 30 * DAY_MS,
        groups=groups,
        pet=pet or pet_row(),
        doses=doses if doses is not None else many_doses(5),
        now_ms=now_ms,
        due_soon_days=due_soon_days,
    )
