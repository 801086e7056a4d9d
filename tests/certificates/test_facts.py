"""The facts of a certificate (petrecords.certificates.facts): which doses it shows, in which order and state, and
exactly the members of the public JSON (contract section 16)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from petrecords.certificates.facts import encode_facts
from tests.certificates.support import (
    CERTIFICATE_ID,
    DAY_MS,
    DOSE_MEMBERS,
    NOW_MS,
    dose_row,
    facts_of,
    many_doses,
    pet_row,
    vaccine_row,
)

PET_MEMBERS = ["id", "name", "petType", "breed", "sex", "neutered", "birthDate", "color", "microchip", "deceasedAt"]


def _json(facts: Any) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(encode_facts(facts))
    return decoded


class TestTheJson:
    def test_exactly_the_members_of_section_16_in_order(self) -> None:
        found = _json(facts_of(doses=many_doses(3)))
        assert list(found) == ["certificateId", "issuedAt", "expiresAt", "asOf", "pet", "vaccinations"]
        assert list(found["pet"]) == PET_MEMBERS
        assert all(list(dose) == DOSE_MEMBERS for dose in found["vaccinations"])

    def test_values_as_the_service_writes_them(self) -> None:
        vaccine = vaccine_row("Nobivac Rabies", "Rabies")
        dose = dose_row(NOW_MS - 10 * DAY_MS, revision=3)
        found = _json(facts_of(doses=[(dose, vaccine)]))
        assert found["certificateId"] == str(CERTIFICATE_ID)
        assert found["asOf"] == "2026-11-30T00:53:20.000Z"
        assert found["pet"]["birthDate"] == "2019-04-14"
        assert found["pet"]["deceasedAt"] is None
        [shown] = found["vaccinations"]
        assert shown["id"] == str(dose["id"])
        assert shown["version"] == 3
        assert (shown["group"], shown["vaccineName"], shown["manufacturer"]) == (
            "Rabies",
            "Nobivac Rabies",
            "MSD Animal Health",
        )
        assert shown["lotExpiresOn"] == "2026-12-13"
        assert shown["appliedAt"] == "2026-11-20T00:53:20.000Z"

    def test_no_email_notes_or_other_record_fields(self) -> None:
        text = encode_facts(facts_of(doses=many_doses(5))).decode()
        for absent in ("@", "not on a certificate", "ownerId", "createdBy", "notes", "status", "description"):
            assert absent not in text


class TestWhichDoses:
    def test_only_completed_doses_oldest_first(self) -> None:
        vaccine = vaccine_row()
        newer = dose_row(NOW_MS - 10 * DAY_MS)
        older = dose_row(NOW_MS - 400 * DAY_MS)
        in_error = dose_row(NOW_MS - 5 * DAY_MS, status="entered-in-error", status_reason="wrong pet")
        found = facts_of(doses=[(newer, vaccine), (in_error, vaccine), (older, vaccine)])
        assert [dose.id for dose in found.vaccinations] == [str(older["id"]), str(newer["id"])]

    def test_shown_groups_match_the_label_whatever_the_case(self) -> None:
        rabies, dhpp = vaccine_row("Nobivac Rabies", "Rabies"), vaccine_row("Vanguard", "DHPP")
        leptospirosis = vaccine_row("Lepto L4", None)
        doses = [
            (dose_row(NOW_MS - 3 * DAY_MS), rabies),
            (dose_row(NOW_MS - 2 * DAY_MS), dhpp),
            (dose_row(NOW_MS - DAY_MS), leptospirosis),
        ]
        assert [dose.group for dose in facts_of(doses=doses, groups=["RABIES", "lepto l4"]).vaccinations] == [
            "Rabies",
            "Lepto L4",
        ]
        assert len(facts_of(doses=doses, groups=None).vaccinations) == 3
        assert facts_of(doses=doses, groups=[]).vaccinations == ()

    def test_a_group_shows_its_latest_doses_label(self) -> None:
        old = vaccine_row("Rabisin", "rabies")
        new = vaccine_row("Nobivac Rabies", "Rabies")
        found = facts_of(doses=[(dose_row(NOW_MS - 400 * DAY_MS), old), (dose_row(NOW_MS - DAY_MS), new)])
        assert [(dose.group, dose.vaccine_name, dose.state) for dose in found.vaccinations] == [
            ("Rabies", "Rabisin", "superseded"),
            ("Rabies", "Nobivac Rabies", "current"),
        ]

    def test_vaccines_without_a_group_are_groups_of_their_own(self) -> None:
        first, second = vaccine_row("Lepto", None), vaccine_row("Lepto", None)
        found = facts_of(doses=[(dose_row(NOW_MS - 400 * DAY_MS), first), (dose_row(NOW_MS - DAY_MS), second)])
        assert [dose.state for dose in found.vaccinations] == ["overdue", "current"]


class TestStates:
    def _state_of_one(self, due_in_ms: int, **pet: Any) -> str:
        dose = dose_row(NOW_MS - 300 * DAY_MS)
        dose["due_at"] = NOW_MS + due_in_ms
        [shown] = facts_of(pet_row(**pet), [(dose, vaccine_row())], due_soon_days=30).vaccinations
        return shown.state

    def test_overdue_at_its_due_time(self) -> None:
        assert self._state_of_one(0) == "overdue"
        assert self._state_of_one(-1) == "overdue"

    def test_due_soon_within_the_days(self) -> None:
        assert self._state_of_one(1) == "due-soon"
        assert self._state_of_one(30 * DAY_MS) == "due-soon"
        assert self._state_of_one(30 * DAY_MS + 1) == "current"

    def test_deceased_pet_every_group_deceased(self) -> None:
        assert self._state_of_one(-DAY_MS, deceased_at=20_000) == "deceased"
        assert self._state_of_one(400 * DAY_MS, deceased_at=20_000) == "deceased"

    def test_same_instant_the_greater_id_is_latest(self) -> None:
        vaccine = vaccine_row()
        first = dose_row(NOW_MS - DAY_MS, id=uuid.UUID(int=1))
        second = dose_row(NOW_MS - DAY_MS, id=uuid.UUID(int=2))
        found = facts_of(doses=[(second, vaccine), (first, vaccine)])
        assert [(dose.id, dose.state) for dose in found.vaccinations] == [
            (str(first["id"]), "superseded"),
            (str(second["id"]), "current"),
        ]


_vaccines = st.lists(
    st.tuples(st.sampled_from(["Rabies", "RABIES", "DHPP", "dhpp", None]), st.sampled_from(["A", "B", "a"])),
    min_size=1,
    max_size=4,
)


@st.composite
def _records(draw: st.DrawFn) -> tuple[list[Any], int, bool]:
    vaccines = [vaccine_row(name, group) for group, name in draw(_vaccines)]
    doses = []
    for _ in range(draw(st.integers(min_value=0, max_value=12))):
        applied = NOW_MS - draw(st.integers(min_value=0, max_value=5)) * DAY_MS
        dose = dose_row(
            applied,
            due_in_days=draw(st.integers(min_value=1, max_value=60)),
            status=draw(st.sampled_from(["completed", "completed", "entered-in-error"])),
        )
        doses.append((dose, draw(st.sampled_from(vaccines))))
    return doses, draw(st.integers(min_value=0, max_value=40)), draw(st.booleans())


class TestRulesHoldForAnyRecords:
    @given(_records())
    def test_one_latest_per_group_and_every_other_superseded(self, records: tuple[list[Any], int, bool]) -> None:
        doses, due_soon_days, deceased = records
        facts = facts_of(pet_row(deceased_at=20_000 if deceased else None), doses, due_soon_days=due_soon_days)
        completed = [(dose, vaccine) for dose, vaccine in doses if dose["status"] == "completed"]
        assert len(facts.vaccinations) == len(completed)
        assert [(dose.applied_at, uuid.UUID(dose.id).int) for dose in facts.vaccinations] == sorted(
            (dose.applied_at, uuid.UUID(dose.id).int) for dose in facts.vaccinations
        )
        key_of = {
            str(dose["id"]): ("group", vaccine["group_name"].lower()) if vaccine["group_name"] else vaccine["id"]
            for dose, vaccine in completed
        }
        order_of = {str(dose["id"]): (dose["applied_at"], dose["id"].int) for dose, _ in completed}
        for shown in facts.vaccinations:
            later = [
                other
                for other in order_of
                if key_of[other] == key_of[shown.id] and order_of[other] > order_of[shown.id]
            ]
            if later:
                assert shown.state == "superseded"
            elif deceased:
                assert shown.state == "deceased"
            else:
                assert shown.state in {"overdue", "due-soon", "current"}

    @given(_records(), st.lists(st.sampled_from(["rabies", "DHPP", "A", "b", "nothing"]), max_size=3))
    def test_shown_groups_only_filter(self, records: tuple[list[Any], int, bool], groups: list[str]) -> None:
        doses, due_soon_days, _ = records
        every = facts_of(doses=doses, due_soon_days=due_soon_days)
        chosen = facts_of(doses=doses, due_soon_days=due_soon_days, groups=groups)
        wanted = {group.lower() for group in groups}
        assert chosen.vaccinations == tuple(dose for dose in every.vaccinations if dose.group.lower() in wanted)
