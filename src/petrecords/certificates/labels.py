"""What the printed and the phone forms of a certificate call each fact, and how they write its value: both say
the same thing in the same words."""

from __future__ import annotations

from collections.abc import Iterator

from petrecords.certificates.facts import CertificateFacts, CertifiedDose, CertifiedPet

TITLE = "Certificate of vaccination"
NOT_RECORDED = "—"
STATE_LABELS = {
    "current": "current",
    "due-soon": "due soon",
    "overdue": "overdue",
    "deceased": "deceased",
    "superseded": "superseded",
}
VERIFY_NOTE = (
    "Issued by Pet Records from the clinic's records as they stand at the time above. Its signed form "
    "(the same link, Accept: application/jose) verifies offline with the keys at /.well-known/jwks.json."
)


def instant(value: str) -> str:
    """An RFC 3339 instant of the facts (`2026-11-21T16:06:29.123Z`) as a reader takes it in, in UTC as the labels
    say: `2026-11-21 16:06`. The minute is what a certificate needs; the JSON and its JWS keep the millisecond."""
    return f"{value[:10]} {value[11:16]}"


def shown(value: str | bool | None) -> str:
    if value is None:
        return NOT_RECORDED
    if isinstance(value, bool):
        return "yes" if value else "no"
    return value


def validity(facts: CertificateFacts) -> list[tuple[str, str]]:
    return [
        ("Certificate", facts.certificate_id),
        ("Issued", f"{instant(facts.issued_at)} UTC"),
        ("Expires", f"{instant(facts.expires_at)} UTC"),
        ("As of", f"{instant(facts.as_of)} UTC"),
    ]


def pet_facts(pet: CertifiedPet) -> list[tuple[str, str]]:
    """The pet's facts but its name, which heads them."""
    return [
        ("Microchip", shown(pet.microchip)),
        ("Species", pet.pet_type),
        ("Breed", shown(pet.breed)),
        ("Sex", shown(pet.sex)),
        ("Neutered", shown(pet.neutered)),
        ("Born", shown(pet.birth_date)),
        ("Colour", shown(pet.color)),
        ("Died", shown(pet.deceased_at)),
        ("Pet id", pet.id),
    ]


DOSE_COLUMNS = (
    "Product",
    "Manufacturer",
    "Lot",
    "Lot expires",
    "Applied (UTC)",
    "Valid until (UTC)",
    "Dose",
    "Veterinarian",
    "Licence",
    "Clinic",
    "Rabies tag",
    "State",
)
"""The columns of the printed table of doses, and the order of every dose's facts on the page."""


def dose_facts(dose: CertifiedDose) -> list[str]:
    """A dose's facts in the order of DOSE_COLUMNS."""
    return [
        dose.vaccine_name,
        shown(dose.manufacturer),
        shown(dose.lot_number),
        shown(dose.lot_expires_on),
        instant(dose.applied_at),
        instant(dose.due_at),
        shown(dose.dose_type),
        shown(dose.veterinarian),
        shown(dose.veterinarian_licence),
        shown(dose.clinic),
        shown(dose.rabies_tag),
        STATE_LABELS[dose.state],
    ]


def dose_reference(dose: CertifiedDose) -> str:
    """Which record, and which version of it, a dose is: what a clinic looks it up by."""
    return f"{dose.group} · record {dose.id} version {dose.version}"


def every_text(facts: CertificateFacts) -> Iterator[str]:
    """Every text a form of these facts prints: which fonts a PDF needs is read from them."""
    yield facts.pet.name
    for _, value in (*validity(facts), *pet_facts(facts.pet)):
        yield value
    for dose in facts.vaccinations:
        yield from dose_facts(dose)
        yield dose_reference(dose)
