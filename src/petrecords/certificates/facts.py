"""The facts a certificate shows: the public JSON of contract section 16, and the rules that choose them.

One model, made once per answer, from which every form is made (the JSON, its JWS, the PDF, the page): they cannot
disagree. It holds exactly what a certificate shows and nothing else: no e-mail address of anyone, no notes.

Which doses, and in which state (section 14, for the doses of one group as a certificate shows them):

- a dose is shown when it is `completed` and its group's label (its vaccine's `group`, or its `name` when that is
  null) is one of the certificate's groups, case ignored; every group when the certificate names none;
- the doses of a group are those of vaccines with equal `group` values, case ignored, or, for a vaccine whose
  `group` is null, those of that vaccine alone; the group's latest dose is the one applied last (`appliedAt`, then
  the greater id);
- the latest dose's state is `deceased` for every group of a pet that died, else `overdue` when its `dueAt` is at
  or before `asOf`, `due-soon` when it is within the due-soon days after it, `current` otherwise; an earlier dose
  of the group is `superseded`, whatever its own `dueAt`;
- each dose shows its group's label as the status endpoint does: the latest dose's vaccine's;
- doses are listed oldest first (`appliedAt`, then id).
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Literal

import msgspec

from petrecords.text import match_key
from petrecords.values import format_timestamp

DAY_MS = 86_400_000
COMPLETED = "completed"
State = Literal["overdue", "due-soon", "current", "deceased", "superseded"]
STATES: tuple[State, ...] = ("overdue", "due-soon", "current", "deceased", "superseded")

Row = Mapping[str, Any]
"""A stored row, by column name, as the store reads it: ids as UUIDs, instants as epoch milliseconds, dates as
days since 1970-01-01."""


class CertifiedPet(msgspec.Struct, rename="camel", frozen=True):
    id: str
    name: str
    pet_type: str
    breed: str | None
    sex: str | None
    neutered: bool | None
    birth_date: str | None
    color: str | None
    microchip: str | None
    deceased_at: str | None


class CertifiedDose(msgspec.Struct, rename="camel", frozen=True):
    id: str
    version: int
    group: str
    vaccine_name: str
    manufacturer: str | None
    lot_number: str | None
    lot_expires_on: str | None
    applied_at: str
    due_at: str
    dose_type: str | None
    veterinarian: str | None
    veterinarian_licence: str | None
    clinic: str | None
    rabies_tag: str | None
    state: State


class CertificateFacts(msgspec.Struct, rename="camel", frozen=True):
    """The answer of `GET /public/certificates/{token}` as JSON, member for member, in the contract's order."""

    certificate_id: str
    issued_at: str
    expires_at: str
    as_of: str
    pet: CertifiedPet
    vaccinations: tuple[CertifiedDose, ...]


def build_facts(
    *,
    certificate_id: uuid.UUID,
    issued_at_ms: int,
    expires_at_ms: int,
    groups: Collection[str] | None,
    pet: Row,
    doses: Sequence[tuple[Row, Row]],
    now_ms: int,
    due_soon_days: int,
) -> CertificateFacts:
    """The facts of a certificate as of `now_ms`.

    `pet` is the pet's row (columns `id`, `name`, `pet_type`, `breed`, `sex`, `neutered`, `birth_date`, `color`,
    `microchip`, `deceased_at`); `doses` its vaccinations' rows, each with its vaccine's row (`id`, `name`,
    `group_name`, `manufacturer`), in any order and of any status; `groups` the certificate's own (None: every
    group); `due_soon_days` is PETRECORDS_DUE_SOON_DAYS.
    """
    dying_day = pet["deceased_at"]
    completed = [(dose, vaccine) for dose, vaccine in doses if dose["status"] == COMPLETED]
    latest: dict[object, tuple[Row, Row]] = {}
    for dose, vaccine in completed:
        key = group_key(vaccine)
        current = latest.get(key)
        if current is None or _applied_order(dose) > _applied_order(current[0]):
            latest[key] = (dose, vaccine)
    shown_labels = None if groups is None else {match_key(group) for group in groups}
    due_soon_until = now_ms + due_soon_days * DAY_MS
    shown: list[tuple[tuple[int, int], CertifiedDose]] = []
    for dose, vaccine in completed:
        label = group_label(vaccine)
        if shown_labels is not None and match_key(label) not in shown_labels:
            continue
        latest_dose, latest_vaccine = latest[group_key(vaccine)]
        state: State
        if latest_dose is not dose:
            state = "superseded"
        elif dying_day is not None:
            state = "deceased"
        else:
            state = due_state(dose["due_at"], now_ms=now_ms, due_soon_until_ms=due_soon_until)
        shown.append((_applied_order(dose), _certified_dose(dose, vaccine, group_label(latest_vaccine), state)))
    shown.sort(key=lambda ordered: ordered[0])
    return CertificateFacts(
        certificate_id=str(certificate_id),
        issued_at=format_timestamp(issued_at_ms),
        expires_at=format_timestamp(expires_at_ms),
        as_of=format_timestamp(now_ms),
        pet=_certified_pet(pet),
        vaccinations=tuple(dose for _, dose in shown),
    )


def group_key(vaccine: Row) -> object:
    """What the doses of one group share: their vaccines' `group`, case ignored, or the vaccine itself when it has
    none."""
    group = vaccine["group_name"]
    return ("vaccine", vaccine["id"]) if group is None else ("group", match_key(group))


def group_label(vaccine: Row) -> str:
    """The label of a vaccine's group: its `group`, or its `name` when that is null."""
    group: str | None = vaccine["group_name"]
    name: str = vaccine["name"]
    return name if group is None else group


def due_state(due_at_ms: int, *, now_ms: int, due_soon_until_ms: int) -> State:
    """The state of a group's latest dose of a living pet."""
    if due_at_ms <= now_ms:
        return "overdue"
    if due_at_ms <= due_soon_until_ms:
        return "due-soon"
    return "current"


def _applied_order(dose: Row) -> tuple[int, int]:
    dose_id: uuid.UUID = dose["id"]
    return dose["applied_at"], dose_id.int


def _certified_dose(dose: Row, vaccine: Row, label: str, state: State) -> CertifiedDose:
    return CertifiedDose(
        id=str(dose["id"]),
        version=dose["revision"],
        group=label,
        vaccine_name=vaccine["name"],
        manufacturer=vaccine["manufacturer"],
        lot_number=dose["lot_number"],
        lot_expires_on=_date(dose["lot_expires_on"]),
        applied_at=format_timestamp(dose["applied_at"]),
        due_at=format_timestamp(dose["due_at"]),
        dose_type=dose["dose_type"],
        veterinarian=dose["veterinarian"],
        veterinarian_licence=dose["veterinarian_licence"],
        clinic=dose["clinic"],
        rabies_tag=dose["rabies_tag"],
        state=state,
    )


def _certified_pet(pet: Row) -> CertifiedPet:
    return CertifiedPet(
        id=str(pet["id"]),
        name=pet["name"],
        pet_type=pet["pet_type"],
        breed=pet["breed"],
        sex=pet["sex"],
        neutered=pet["neutered"],
        birth_date=_date(pet["birth_date"]),
        color=pet["color"],
        microchip=pet["microchip"],
        deceased_at=_date(pet["deceased_at"]),
    )


_EPOCH = datetime.date(1970, 1, 1)


def _date(days: int | None) -> str | None:
    """A stored date (days since 1970-01-01) as the API writes it, YYYY-MM-DD."""
    return None if days is None else (_EPOCH + datetime.timedelta(days=days)).isoformat()


_encoder = msgspec.json.Encoder()


def encode_facts(facts: CertificateFacts) -> bytes:
    """The JSON answer: exactly the bytes that the JWS signs."""
    return _encoder.encode(facts)
