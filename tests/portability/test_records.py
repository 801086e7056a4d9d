"""Records as an export file holds them, read back into rows (portability/records.py): a file written before a field
existed still loads."""

from __future__ import annotations

from typing import Any

from petrecords.config import DEFAULT_PET_TYPES
from petrecords.portability.records import ExportReader
from petrecords.registry import RESOURCES
from petrecords.resources.fields import PET_TYPES
from petrecords.vaccinations import PET_VACCINATIONS
from tests.support import ALICE

AUDIT = {
    "createdAt": "2026-01-02T03:04:05.678Z",
    "createdBy": ALICE,
    "modifiedAt": "2026-01-02T03:04:05.678Z",
    "modifiedBy": ALICE,
    "version": 1,
}


def test_a_vaccination_exported_before_the_clinics_fields_is_a_completed_dose_without_them() -> None:
    """Contract v3 knew none of a dose's certificate fields nor its status: such a dose was given as recorded."""
    older: dict[str, Any] = {
        **AUDIT,
        "id": "01900000-0000-7000-8000-000000000001",
        "ownerId": ALICE,
        "petId": "01900000-0000-7000-8000-000000000002",
        "vaccineId": "01900000-0000-7000-8000-000000000003",
        "appliedAt": "2026-01-02T03:04:05.678Z",
        "dueAt": "2027-01-02T03:04:05.678Z",
        "notes": None,
    }

    row = ExportReader(RESOURCES, {PET_TYPES: DEFAULT_PET_TYPES}).row(PET_VACCINATIONS, older)

    assert row["status"] == "completed"
    new_columns = ("lot_number", "lot_expires_on", "dose_type", "veterinarian", "veterinarian_licence", "clinic")
    assert all(row[column] is None for column in (*new_columns, "rabies_tag", "status_reason"))
