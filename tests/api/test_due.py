"""What is due (contract v4 section 14): `GET /v1/pets/{id}/vaccination-status` and `GET /v1/due`, the latest
completed dose of each group, with the share rules of section 12. On both databases."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from litestar.testing import AsyncTestClient

from petrecords import due_rows
from petrecords.app import create_app
from petrecords.config import Settings
from tests.api.test_shares import CLINIC, SHARES, VET, as_vet, share
from tests.support import (
    ADMIN,
    ALICE,
    BOB,
    DOSES,
    MISSING_ID,
    admin,
    assert_error,
    at,
    auth,
    create,
    create_vaccine,
    dose,
    overlapping_client,
    run_sql,
    scalar_sql,
)

Client = AsyncTestClient[Any]
DUE = "/v1/due"
NOW = datetime.datetime.now(datetime.UTC).replace(microsecond=0)


async def status(client: Client, pet: dict[str, Any], headers: dict[str, str] | None = None) -> dict[str, Any]:
    response = await client.get(f"/v1/pets/{pet['id']}/vaccination-status", headers=headers or auth())
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


async def due(client: Client, headers: dict[str, str] | None = None, **params: Any) -> dict[str, Any]:
    response = await client.get(DUE, params=params, headers=headers or auth())
    assert response.status_code == 200, response.text
    page: dict[str, Any] = response.json()
    return page


def groups(page: dict[str, Any]) -> list[tuple[str, str]]:
    """(pet name, group) of each item, in order."""
    return [(item["petName"], item["group"]) for item in page["items"]]


def doses_of(page: dict[str, Any]) -> list[str]:
    return [item["vaccinationId"] for item in page["items"]]


@pytest.fixture
async def rabies_3y(client: Client) -> dict[str, Any]:
    vaccine: dict[str, Any] = (await create_vaccine(client, name="Rabies 3-year", group="RABIES")).json()
    return vaccine


@pytest.fixture
async def lepto(client: Client) -> dict[str, Any]:
    vaccine: dict[str, Any] = (await create_vaccine(client, name="Lepto")).json()
    return vaccine


class TestStatus:
    async def test_each_group_at_its_latest_dose_ordered_by_due_date(
        self,
        client: Client,
        rex: dict[str, Any],
        rabies: dict[str, Any],
        rabies_3y: dict[str, Any],
        lepto: dict[str, Any],
    ) -> None:
        await dose(client, rex, rabies, -800, -435)
        booster = await dose(client, rex, rabies_3y, -400, 10)
        leptos = await dose(client, rex, lepto, -30, 335)

        asked = datetime.datetime.now(datetime.UTC)
        answer = await status(client, rex)
        answered = datetime.datetime.now(datetime.UTC)

        assert answer["petId"] == rex["id"]
        # The time of the answer (to the millisecond the API shows), not of the module's NOW.
        as_of = datetime.datetime.fromisoformat(answer["asOf"])
        assert asked - datetime.timedelta(milliseconds=1) <= as_of <= answered
        assert answer["items"] == [
            {
                "group": "RABIES",
                "vaccineId": rabies_3y["id"],
                "vaccineName": "Rabies 3-year",
                "vaccinationId": booster["id"],
                "appliedAt": booster["appliedAt"],
                "dueAt": booster["dueAt"],
                "state": "due-soon",
            },
            {
                "group": "Lepto",
                "vaccineId": lepto["id"],
                "vaccineName": "Lepto",
                "vaccinationId": leptos["id"],
                "appliedAt": leptos["appliedAt"],
                "dueAt": leptos["dueAt"],
                "state": "current",
            },
        ]

    async def test_states_follow_the_due_date_and_the_due_soon_days(
        self, client: Client, rex: dict[str, Any], rabies: dict[str, Any], lepto: dict[str, Any]
    ) -> None:
        await dose(client, rex, rabies, -400, -1)
        await dose(client, rex, lepto, -300, 29)

        assert [item["state"] for item in (await status(client, rex))["items"]] == ["overdue", "due-soon"]

    async def test_a_configured_due_soon_window(
        self, make_client: Callable[[Settings], Client], make_settings: Callable[..., Settings]
    ) -> None:
        async with make_client(make_settings(due_soon_days=5)) as client:
            rex = (await create(client, ALICE, name="Rex")).json()
            rabies = (await create_vaccine(client, name="Rabies")).json()
            await dose(client, rex, rabies, -300, 6)

            assert [item["state"] for item in (await status(client, rex))["items"]] == ["current"]

    async def test_a_pet_that_died_is_deceased_in_every_group(
        self, client: Client, rex: dict[str, Any], rabies: dict[str, Any], lepto: dict[str, Any]
    ) -> None:
        await dose(client, rex, rabies, -400, -1)
        await dose(client, rex, lepto, -300, 100)
        died = await client.patch(f"/v1/pets/{rex['id']}", json={"deceasedAt": at(0)[:10]}, headers=auth())
        assert died.status_code == 200, died.text

        answer = await status(client, rex)

        assert [(item["group"], item["state"]) for item in answer["items"]] == [
            ("Rabies", "deceased"),
            ("Lepto", "deceased"),
        ]
        assert (await due(client, before=at(1000)))["totalCount"] == 0

    async def test_a_pet_without_doses_has_no_items(self, client: Client, rex: dict[str, Any]) -> None:
        assert (await status(client, rex))["items"] == []

    async def test_someone_elses_pet_is_404_and_a_share_grants_it(
        self, client: Client, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        await dose(client, rex, rabies, -400, -1)
        path = f"/v1/pets/{rex['id']}/vaccination-status"

        assert_error(await client.get(path, headers=auth(BOB)), 404, 995)
        assert_error(await client.get(f"/v1/pets/{MISSING_ID}/vaccination-status", headers=auth(BOB)), 404, 995)
        assert_error(await client.get("/v1/pets/not-an-id/vaccination-status", headers=auth()), 404, 995)
        await share(client, rex, BOB)
        assert len((await status(client, rex, auth(BOB)))["items"]) == 1
        assert len((await status(client, rex, auth(ADMIN, admin=True)))["items"]) == 1

    async def test_it_takes_no_parameters_and_only_get(self, client: Client, rex: dict[str, Any]) -> None:
        path = f"/v1/pets/{rex['id']}/vaccination-status"

        response = await client.post(path, json={}, headers=auth())

        assert_error(response, 405, 993)
        assert "GET" in response.headers["Allow"]


class TestLatestDose:
    async def test_a_booster_renews_the_doses_before_it(
        self, client: Client, rex: dict[str, Any], rabies: dict[str, Any], rabies_3y: dict[str, Any]
    ) -> None:
        await dose(client, rex, rabies, -800, -435)
        assert doses_of(await due(client)) != []

        booster = await dose(client, rex, rabies_3y, -400, 700)

        assert (await due(client))["totalCount"] == 0
        assert doses_of(await due(client, before=at(800))) == [booster["id"]]

    async def test_the_latest_is_the_one_applied_last_whatever_its_due_date(
        self, client: Client, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        later = await dose(client, rex, rabies, -100, -50)
        await dose(client, rex, rabies, -200, 300)

        assert doses_of(await due(client)) == [later["id"]]

    async def test_a_tie_in_applied_at_goes_to_the_greater_id(
        self, client: Client, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        first = await dose(client, rex, rabies, -100, -50)
        second = await dose(client, rex, rabies, -100, -40)

        assert doses_of(await due(client)) == [max(first["id"], second["id"])]

    async def test_a_pet_with_more_doses_than_one_read_takes(
        self, client: Client, rex: dict[str, Any], rabies: dict[str, Any], lepto: dict[str, Any], monkeypatch: Any
    ) -> None:
        monkeypatch.setattr(due_rows, "READ_AT_ONCE", 2)
        for days in (-900, -700, -500):
            await dose(client, rex, rabies, days, days + 100)
        latest = await dose(client, rex, rabies, -300, -200)
        await dose(client, rex, lepto, -800, -700)
        leptos = await dose(client, rex, lepto, -600, -5)

        assert doses_of(await due(client)) == [latest["id"], leptos["id"]]
        assert [item["vaccinationId"] for item in (await status(client, rex))["items"]] == [latest["id"], leptos["id"]]

    async def test_a_vaccine_without_a_group_is_its_own(
        self, client: Client, rex: dict[str, Any], rabies: dict[str, Any], lepto: dict[str, Any]
    ) -> None:
        other = (await create_vaccine(client, name="Lepto 4")).json()
        await dose(client, rex, rabies, -100, -50)
        await dose(client, rex, lepto, -100, -40)
        await dose(client, rex, other, -90, -30)

        assert groups(await due(client)) == [("Rex", "Rabies"), ("Rex", "Lepto"), ("Rex", "Lepto 4")]

    async def test_a_dose_entered_in_error_counts_for_nothing(
        self, client: Client, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        first = await dose(client, rex, rabies, -800, -435)
        booster = await dose(client, rex, rabies, -400, 700)
        marked = await client.patch(
            f"{DOSES}/{booster['id']}",
            json={"status": "entered-in-error", "statusReason": "Another pet's dose."},
            headers=auth(),
        )
        assert marked.status_code == 200, marked.text

        assert doses_of(await due(client)) == [first["id"]]
        assert [item["vaccinationId"] for item in (await status(client, rex))["items"]] == [first["id"]]

    async def test_a_deleted_dose_gives_its_place_back(
        self, client: Client, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        first = await dose(client, rex, rabies, -800, -435)
        booster = await dose(client, rex, rabies, -400, 700)

        deleted = await client.delete(f"{DOSES}/{booster['id']}", headers=auth())

        assert deleted.status_code == 200, deleted.text
        assert doses_of(await due(client)) == [first["id"]]
        await client.delete(f"{DOSES}/{first['id']}", headers=auth())
        assert (await status(client, rex))["items"] == []

    async def test_a_replaced_dose_moves_between_pets_and_dates(
        self, client: Client, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        max_ = (await create(client, ALICE, name="Max")).json()
        moved = await dose(client, rex, rabies, -400, -10)
        body = {"petId": max_["id"], "vaccineId": rabies["id"], "appliedAt": at(-300), "dueAt": at(-5)}

        replaced = await client.put(f"{DOSES}/{moved['id']}", json=body, headers=auth())

        assert replaced.status_code == 200, replaced.text
        assert groups(await due(client)) == [("Max", "Rabies")]
        assert (await status(client, rex))["items"] == []
        assert (await due(client))["items"][0]["dueAt"] == at(-5)

    @pytest.mark.parametrize("to_the_first", [False, True], ids=["to a later pet", "to an earlier pet"])
    async def test_a_dose_moved_to_another_pet_is_its_latest_there(
        self, client: Client, rabies: dict[str, Any], to_the_first: bool
    ) -> None:
        pets = [(await create(client, ALICE, name=name)).json() for name in ("First", "Second")]
        origin, target = pets[::-1] if to_the_first else pets
        moved = await dose(client, origin, rabies, -100, -10)
        await dose(client, target, rabies, -400, -20)

        answer = await client.patch(f"{DOSES}/{moved['id']}", json={"petId": target["id"]}, headers=auth())

        assert answer.status_code == 200, answer.text
        assert [(item["petId"], item["vaccinationId"]) for item in (await due(client))["items"]] == [
            (target["id"], moved["id"])
        ]

    async def test_a_vaccines_group_changed_regroups_the_doses(
        self, client: Client, rex: dict[str, Any], rabies: dict[str, Any], lepto: dict[str, Any]
    ) -> None:
        await dose(client, rex, rabies, -800, -435)
        leptos = await dose(client, rex, lepto, -400, -20)
        assert len((await due(client))["items"]) == 2

        regrouped = await client.patch(f"/v1/vaccines/{lepto['id']}", json={"group": "rabies"}, headers=admin())

        assert regrouped.status_code == 200, regrouped.text
        assert [(item["group"], item["vaccinationId"]) for item in (await due(client))["items"]] == [
            ("rabies", leptos["id"])
        ]
        renamed = await client.patch(f"/v1/vaccines/{lepto['id']}", json={"group": None}, headers=admin())
        assert renamed.status_code == 200, renamed.text
        assert groups(await due(client)) == [("Rex", "Rabies"), ("Rex", "Lepto")]

    async def test_a_renamed_pet_or_vaccine_shows_its_new_name(
        self, client: Client, rex: dict[str, Any], lepto: dict[str, Any]
    ) -> None:
        await dose(client, rex, lepto, -400, -10)

        await client.patch(f"/v1/pets/{rex['id']}", json={"name": "Rexy"}, headers=auth())
        await client.patch(f"/v1/vaccines/{lepto['id']}", json={"name": "Lepto 4"}, headers=admin())

        item = (await due(client))["items"][0]
        assert (item["petName"], item["group"], item["vaccineName"]) == ("Rexy", "Lepto 4", "Lepto 4")
        assert [(one["group"], one["vaccineName"]) for one in (await status(client, rex))["items"]] == [
            ("Lepto 4", "Lepto 4")
        ]
        assert groups(await due(client, sort="petName")) == [("Rexy", "Lepto 4")]

    async def test_a_deleted_pet_leaves_the_list(
        self, client: Client, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        await dose(client, rex, rabies, -400, -10)

        deleted = await client.delete(f"/v1/pets/{rex['id']}", headers=auth())

        assert deleted.status_code == 200, deleted.text
        assert (await due(client, admin()))["totalCount"] == 0


class TestConcurrentWriters:
    async def test_doses_written_at_once_leave_each_group_at_its_latest(
        self, client: Client, settings: Settings, rabies: dict[str, Any], lepto: dict[str, Any]
    ) -> None:
        """The writes of one pet's doses hold the pet, one at a time: each rewrites the pet's due rows from every dose
        written before it, and the last leaves the latest of each group, whatever order they ran in."""
        rex = (await create(client, ALICE, name="Rex")).json()
        gone = [await dose(client, rex, lepto, -300 + n, -10 + n) for n in range(3)]
        bodies = [
            {"petId": rex["id"], "vaccineId": vaccine["id"], "appliedAt": at(-200 + n), "dueAt": at(-100 + n)}
            for n in range(8)
            for vaccine in (rabies, lepto)
        ]
        # A connection for each request (on PostgreSQL): they wait for the pet's lock, which is what this tests, and
        # none for a pooled connection, which it does not. With the default pool of 10, the last of the 19 waited
        # for a connection while the writes before them ran one at a time, and on a busy machine got 503 ("no pooled
        # connection came free within 5 s").
        at_once = settings.model_copy(update={"db_pool_size": len(bodies) + len(gone)})
        async with overlapping_client(create_app(at_once)) as concurrent:
            answers = await asyncio.gather(
                *(concurrent.post(DOSES, json=body, headers=auth()) for body in bodies),
                *(concurrent.delete(f"{DOSES}/{one['id']}", headers=auth()) for one in gone),
            )

        assert sorted(answer.status_code for answer in answers) == [200] * len(gone) + [201] * len(bodies)
        created = [answer.json() for answer in answers if answer.status_code == 201]
        latest = {
            vaccine["id"]: max(
                (one for one in created if one["vaccineId"] == vaccine["id"]), key=lambda d: d["appliedAt"]
            )
            for vaccine in (rabies, lepto)
        }
        page = await due(client, admin())
        assert sorted(doses_of(page)) == sorted(one["id"] for one in latest.values())
        assert page["totalCount"] == 2

    async def test_a_vaccines_group_changed_beside_doses_of_its_group_leaves_fresh_rows(
        self, client: Client, settings: Settings, rabies: dict[str, Any], rabies_3y: dict[str, Any]
    ) -> None:
        """A vaccine's new group and a dose of another vaccine of its group, for the same pets, at once: the
        vaccine's write rewrites the rows of the pets with a dose of it, and each dose's write its pet's; whichever
        commits last, the rows are what the doses and the vaccines now say. (The dose's write reads its pet's doses
        holding their vaccines, which the vaccine's write holds exclusively.)"""
        pets = [(await create(client, ALICE, name=f"Pet {n}")).json() for n in range(6)]
        for pet in pets:
            await dose(client, pet, rabies, -400, -10)
        for round_, group in enumerate(("Core", "Rabies", "Core")):
            async with overlapping_client(create_app(settings)) as concurrent:
                bodies = [
                    {"petId": pet["id"], "vaccineId": rabies_3y["id"], "appliedAt": at(-300 + round_), "dueAt": at(-5)}
                    for pet in pets
                ]
                answers = await asyncio.gather(
                    concurrent.patch(f"/v1/vaccines/{rabies['id']}", json={"group": group}, headers=admin()),
                    *(concurrent.post(DOSES, json=body, headers=auth()) for body in bodies),
                )
            assert [answer.status_code for answer in answers] == [200] + [201] * len(pets), answers
            for pet in pets:
                # Fresh: the group of each dose as its vaccine now says, the latest of each group.
                doses = (await client.get(DOSES, params={"petId": pet["id"], "pageSize": 100}, headers=auth())).json()
                groups_now = {rabies["id"]: group, rabies_3y["id"]: "RABIES"}
                latest: dict[str, dict[str, Any]] = {}
                for one in doses["items"]:
                    key = groups_now[one["vaccineId"]].lower()
                    if key not in latest or (one["appliedAt"], one["id"]) > (
                        latest[key]["appliedAt"],
                        latest[key]["id"],
                    ):
                        latest[key] = one
                found = sorted(
                    (item["group"].lower(), item["vaccinationId"]) for item in (await status(client, pet))["items"]
                )
                assert found == sorted((key, one["id"]) for key, one in latest.items()), (round_, pet["name"])

    async def test_two_vaccines_regrouped_at_once_leave_fresh_rows(
        self, client: Client, settings: Settings, rabies: dict[str, Any], lepto: dict[str, Any]
    ) -> None:
        """Two vaccines' groups changed at once, for the same pets: neither write holds the other's vaccine, and each
        read the other's group as it was. Each now holds the pets' due rows before it reads their doses, so the one
        that writes them last reads what the other committed: the rows are what both vaccines now say."""
        pets = [(await create(client, ALICE, name=f"Pet {n}")).json() for n in range(8)]
        for n, pet in enumerate(pets):
            await dose(client, pet, rabies, -400 + n, -10)
            await dose(client, pet, lepto, -300 - n, -5)
        for round_, groups in enumerate((("Core", "Core"), ("Rabies", "Lepto"), ("Core", "Core"), ("Lepto", "Core"))):
            async with overlapping_client(create_app(settings)) as concurrent:
                answers = await asyncio.gather(
                    *(
                        concurrent.patch(f"/v1/vaccines/{vaccine['id']}", json={"group": group}, headers=admin())
                        for vaccine, group in zip((rabies, lepto), groups, strict=True)
                    )
                )
            assert [answer.status_code for answer in answers] == [200, 200], answers
            groups_now = {rabies["id"]: groups[0].lower(), lepto["id"]: groups[1].lower()}
            for pet in pets:
                doses = (await client.get(DOSES, params={"petId": pet["id"], "pageSize": 100}, headers=auth())).json()
                latest: dict[str, dict[str, Any]] = {}
                for one in doses["items"]:
                    key = groups_now[one["vaccineId"]]
                    if key not in latest or (one["appliedAt"], one["id"]) > (
                        latest[key]["appliedAt"],
                        latest[key]["id"],
                    ):
                        latest[key] = one
                found = sorted(
                    (item["group"].lower(), item["vaccinationId"]) for item in (await status(client, pet))["items"]
                )
                assert found == sorted((key, one["id"]) for key, one in latest.items()), (round_, pet["name"])
        # And the list: one row for each pet and group, no stale one left beside it.
        page = await due(client, admin(), pageSize=100, before=at(365))
        assert page["totalCount"] == len(pets) * 2, page

    async def test_a_vaccines_write_beside_its_pets_writes_and_shares_leaves_fresh_rows(
        self, client: Client, settings: Settings, rabies: dict[str, Any], lepto: dict[str, Any]
    ) -> None:
        """Two vaccines renamed and regrouped at once with renames, a transfer and shares of the pets with doses of
        them. A vaccine's write holds the vaccine and the pets' due rows, not the pets; a pet's or a share's write
        holds the pet, not the vaccines: both rewrite the pet's due rows and their grants, so each holds them first.
        Whichever commits last, every write succeeds and the rows are what the records now say."""
        pets = [(await create(client, ALICE, name=f"Pet {n}")).json() for n in range(6)]
        for n, pet in enumerate(pets):
            await dose(client, pet, rabies, -400 + n, -10)
            await dose(client, pet, lepto, -300 + n, -5)
        shared: list[str] = []
        at_once = settings.model_copy(update={"db_pool_size": 16})
        for round_, group in enumerate(("Core", None, "Rabies", None)):
            writes = [
                ("patch", f"/v1/vaccines/{rabies['id']}", {"name": f"Rabies {round_}", "group": group}, admin()),
                ("patch", f"/v1/vaccines/{lepto['id']}", {"name": f"Lepto {round_}"}, admin()),
                *(
                    ("patch", f"/v1/pets/{pet['id']}", {"name": f"Pet {n}.{round_}"}, auth())
                    for n, pet in enumerate(pets[:2])
                ),
                *(
                    ("delete", f"{SHARES}/{one}", None, auth())
                    if shared
                    else ("post", SHARES, {"petId": pet["id"], "grantee": CLINIC, "access": "read"}, auth())
                    for one, pet in zip(shared or [""] * 3, pets[3:], strict=True)
                ),
            ]
            if round_ == 1:
                writes.append(("patch", f"/v1/pets/{pets[2]['id']}", {"ownerId": BOB}, admin()))
            async with overlapping_client(create_app(at_once)) as concurrent:
                answers = await asyncio.gather(
                    *(
                        concurrent.request(method, path, json=body, headers=headers)
                        for method, path, body, headers in writes
                    )
                )
            assert [answer.status_code for answer in answers] == [
                201 if method == "post" else 200 for method, *_ in writes
            ], [answer.text for answer in answers if answer.status_code >= 300]
            shared = [] if shared else [answer.json()["id"] for answer in answers if answer.status_code == 201]

            records = {
                record["id"]: record
                for path in ("/v1/pets", "/v1/vaccines")
                for record in (await client.get(path, params={"pageSize": 100}, headers=admin())).json()["items"]
            }
            page = await due(client, admin(), pageSize=100, before=at(365))
            assert page["totalCount"] == len(pets) * 2, page
            for item in page["items"]:
                pet, vaccine = records[item["petId"]], records[item["vaccineId"]]
                assert (item["petName"], item["ownerId"]) == (pet["name"], pet["ownerId"]), (round_, item)
                assert (item["vaccineName"], item["group"]) == (vaccine["name"], vaccine["group"] or vaccine["name"])
            seen = {item["petId"] for item in (await due(client, as_vet(), pageSize=100, before=at(365)))["items"]}
            assert seen == ({pet["id"] for pet in pets[3:]} if shared else set()), round_


class TestRoomForReminders:
    """What reminders (contract section 15) will read: a row's `reminded` mark, which only a new dueAt clears."""

    async def test_a_mark_stays_until_the_due_date_moves(
        self, client: Client, database_url: str, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        given = await dose(client, rex, rabies, -400, 10)
        await run_sql(database_url, "UPDATE due_doses SET reminded = 'due-soon'")

        await client.patch(f"/v1/pets/{rex['id']}", json={"name": "Rexy"}, headers=auth())
        await client.patch(f"{DOSES}/{given['id']}", json={"notes": "Left shoulder."}, headers=auth())
        assert await scalar_sql(database_url, "SELECT reminded FROM due_doses") == "due-soon"

        await client.patch(f"{DOSES}/{given['id']}", json={"dueAt": at(20)}, headers=auth())
        assert await scalar_sql(database_url, "SELECT reminded FROM due_doses") == "none"

    async def test_a_new_latest_dose_starts_unreminded(
        self, client: Client, database_url: str, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        await dose(client, rex, rabies, -400, 10)
        await run_sql(database_url, "UPDATE due_doses SET reminded = 'overdue'")

        await dose(client, rex, rabies, -1, 364)

        assert await scalar_sql(database_url, "SELECT reminded FROM due_doses") == "none"


class TestWhoSees:
    async def test_owners_see_their_own_and_an_admin_everyone(
        self, client: Client, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        bo = (await create(client, BOB, name="Bo")).json()
        await dose(client, rex, rabies, -400, -10)
        await dose(client, bo, rabies, -400, -20, user=BOB)

        assert groups(await due(client)) == [("Rex", "Rabies")]
        assert groups(await due(client, auth(BOB))) == [("Bo", "Rabies")]
        everyone = await due(client, admin())
        assert groups(everyone) == [("Bo", "Rabies"), ("Rex", "Rabies")]
        assert [item["ownerId"] for item in everyone["items"]] == [BOB, ALICE]
        assert groups(await due(client, admin(), ownerId=ALICE)) == [("Rex", "Rabies")]

    @pytest.mark.parametrize("to_the_first", [False, True], ids=["to a later pet", "to an earlier pet"])
    async def test_a_dose_moved_between_two_pets_shared_with_one_clinic(
        self, client: Client, rabies: dict[str, Any], to_the_first: bool
    ) -> None:
        pets = [(await create(client, ALICE, name=name)).json() for name in ("First", "Second")]
        for pet in pets:
            assert (await share(client, pet, CLINIC)).status_code == 201
        origin, target = pets[::-1] if to_the_first else pets
        moved = await dose(client, origin, rabies, -100, -10)

        answer = await client.patch(f"{DOSES}/{moved['id']}", json={"petId": target["id"]}, headers=auth())

        assert answer.status_code == 200, answer.text
        page = await due(client, as_vet())
        assert [(item["petId"], item["vaccinationId"]) for item in page["items"]] == [(target["id"], moved["id"])]
        assert page["totalCount"] == 1

    async def test_a_clinic_sees_its_patients_while_shared(
        self, client: Client, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        max_ = (await create(client, ALICE, name="Max")).json()
        await dose(client, rex, rabies, -400, -10)
        await dose(client, max_, rabies, -400, -20)
        assert (await due(client, as_vet()))["totalCount"] == 0

        shared = (await share(client, rex, CLINIC)).json()

        page = await due(client, as_vet())
        assert (groups(page), page["totalCount"]) == ([("Rex", "Rabies")], 1)
        assert (await due(client, as_vet(), access="shared"))["totalCount"] == 1
        assert (await due(client, as_vet(), access="owned"))["totalCount"] == 0
        assert (await due(client, auth(), access="shared"))["totalCount"] == 0
        assert (await due(client, as_vet(), ownerId=ALICE))["totalCount"] == 1
        assert len((await status(client, rex, as_vet()))["items"]) == 1

        revoked = await client.delete(f"/v1/pet-shares/{shared['id']}", headers=auth())

        assert revoked.status_code == 200, revoked.text
        assert (await due(client, as_vet()))["totalCount"] == 0
        assert_error(await client.get(f"/v1/pets/{rex['id']}/vaccination-status", headers=as_vet()), 404, 995)

    async def test_a_vets_own_pets_and_their_clinics(
        self, client: Client, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        own = (await create(client, VET, name="Vet's cat")).json()
        await dose(client, rex, rabies, -400, -10)
        await dose(client, own, rabies, -400, -30, user=VET)
        await share(client, rex, CLINIC)

        page = await due(client, as_vet())

        assert (groups(page), page["totalCount"]) == ([("Vet's cat", "Rabies"), ("Rex", "Rabies")], 2)
        assert groups(await due(client, as_vet(), access="owned")) == [("Vet's cat", "Rabies")]

    async def test_a_vets_pages_merge_their_own_their_clinics_and_theirs_each_once(
        self, client: Client, rex: dict[str, Any], rabies: dict[str, Any], lepto: dict[str, Any]
    ) -> None:
        """Read from the due rows by grantee (the clinic's, the vet's own shares) and the vet's own rows, merged."""
        own = (await create(client, VET, name="Vet's cat")).json()
        both = (await create(client, ALICE, name="Both")).json()
        await dose(client, rex, rabies, -400, -10)
        await dose(client, rex, lepto, -400, -25)
        await dose(client, own, rabies, -400, -30, user=VET)
        await dose(client, both, rabies, -400, -20)
        await share(client, rex, CLINIC)
        await share(client, both, CLINIC)
        await share(client, both, VET)

        whole = await due(client, as_vet())

        expected = [("Vet's cat", "Rabies"), ("Rex", "Lepto"), ("Both", "Rabies"), ("Rex", "Rabies")]
        assert (groups(whole), whole["totalCount"]) == (expected, 4)
        pages = [doses_of(await due(client, as_vet(), pageSize=1, pageIndex=index)) for index in (1, 2, 3, 4)]
        assert pages == [[one] for one in doses_of(whole)]
        assert groups(await due(client, as_vet(), access="shared")) == expected[1:]
        assert groups(await due(client, as_vet(), access="shared", petType="Cat")) == []

        # A booster takes its group off the list; a share gone takes its pet's rows, but the other share's stay.
        await dose(client, rex, lepto, -5, 300)
        assert groups(await due(client, as_vet(), access="shared")) == [("Both", "Rabies"), ("Rex", "Rabies")]
        shares = {
            found["grantee"]: found["id"]
            for found in (await client.get("/v1/pet-shares", params={"petId": both["id"]}, headers=auth())).json()[
                "items"
            ]
        }
        assert (await client.delete(f"/v1/pet-shares/{shares[CLINIC]}", headers=auth())).status_code == 200
        assert groups(await due(client, as_vet(), access="shared")) == [("Both", "Rabies"), ("Rex", "Rabies")]
        assert groups(await due(client, as_vet(("clinic-b",)), access="shared")) == [("Both", "Rabies")]
        assert (await client.delete(f"/v1/pet-shares/{shares[VET]}", headers=auth())).status_code == 200
        assert groups(await due(client, as_vet(), access="shared")) == [("Rex", "Rabies")]

    async def test_a_transfer_moves_the_pet_and_ends_its_shares(
        self, client: Client, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        await dose(client, rex, rabies, -400, -10)
        await share(client, rex, CLINIC)

        moved = await client.patch(f"/v1/pets/{rex['id']}", json={"ownerId": BOB}, headers=admin())

        assert moved.status_code == 200, moved.text
        assert (await due(client))["totalCount"] == 0
        assert (await due(client, as_vet()))["totalCount"] == 0
        page = await due(client, auth(BOB))
        assert ([item["ownerId"] for item in page["items"]], page["totalCount"]) == ([BOB], 1)

    async def test_a_share_that_expired_grants_nothing(
        self, client: Client, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        await dose(client, rex, rabies, -400, -10)
        expires = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=1)
        await share(client, rex, BOB, expiresAt=expires.isoformat().replace("+00:00", "Z"))
        assert (await due(client, auth(BOB)))["totalCount"] == 1

        await asyncio.sleep(max(0.0, (expires - datetime.datetime.now(datetime.UTC)).total_seconds()) + 0.05)

        page = await due(client, auth(BOB))
        assert (page["items"], page["totalCount"]) == ([], 0)
        assert_error(await client.get(f"/v1/pets/{rex['id']}/vaccination-status", headers=auth(BOB)), 404, 995)


class TestList:
    @pytest.fixture
    async def patients(self, client: Client, rabies: dict[str, Any], lepto: dict[str, Any]) -> list[dict[str, Any]]:
        names = ["Zed", "amy", "Bo", "Cy"]
        pets = [(await create(client, ALICE, name=name, pet_type="Dog")).json() for name in names]
        for n, pet in enumerate(pets):
            await dose(client, pet, rabies, -400, -40 + n)
            await dose(client, pet, lepto, -400, -40 + n)
        return pets

    async def test_due_date_then_pet_then_group(self, client: Client, patients: list[dict[str, Any]]) -> None:
        page = await due(client)

        expected = []
        for pet in patients:
            first, second = sorted(["Rabies", "Lepto"], key=str.lower)
            ids = [pet["id"]]
            expected.extend([(ids[0], first), (ids[0], second)])
        assert [(item["petId"], item["group"]) for item in page["items"]] == expected
        assert page["totalCount"] == 8

    async def test_pages_are_stable_and_counted_exactly(self, client: Client, patients: list[dict[str, Any]]) -> None:
        whole = doses_of(await due(client))
        pages = [await due(client, pageSize=3, pageIndex=index) for index in (1, 2, 3, 4)]

        assert [doses_of(page) for page in pages] == [whole[0:3], whole[3:6], whole[6:8], []]
        assert [(page["totalPages"], page["totalCount"]) for page in pages] == [(3, 8)] * 4
        assert [(page["hasPreviousPage"], page["hasNextPage"]) for page in pages] == [
            (False, True),
            (True, True),
            (True, False),
            (True, False),
        ]

    async def test_sorted_by_pet_name_or_group(self, client: Client, patients: list[dict[str, Any]]) -> None:
        by_name = await due(client, sort="petName")
        names = [item["petName"] for item in by_name["items"]]
        assert names == ["amy", "amy", "Bo", "Bo", "Cy", "Cy", "Zed", "Zed"]
        by_group = await due(client, sort="-group,dueAt")
        assert [item["group"] for item in by_group["items"]] == ["Rabies"] * 4 + ["Lepto"] * 4
        assert [item["petName"] for item in by_group["items"][:4]] == ["Zed", "amy", "Bo", "Cy"]
        descending = await due(client, sort="dueAt", order="desc")
        assert [item["petName"] for item in descending["items"][::2]] == ["Cy", "Bo", "amy", "Zed"]
        each = await due(client, sort="group,petName", order="desc,asc")
        assert [(item["group"], item["petName"]) for item in each["items"][:2]] == [("Rabies", "amy"), ("Rabies", "Bo")]

    async def test_filters(self, client: Client, patients: list[dict[str, Any]], rabies: dict[str, Any]) -> None:
        zed, amy = patients[0], patients[1]
        cat = (await create(client, ALICE, name="Tom", pet_type="Cat")).json()
        cat_vaccine = (await create_vaccine(client, name="FVRCP", pet_type="Cat")).json()
        await dose(client, cat, cat_vaccine, -400, -1)

        assert (await due(client, before=at(-38.5)))["totalCount"] == 4
        assert (await due(client, after=at(-38.5)))["totalCount"] == 5
        assert (await due(client, after=at(-38.5), before=at(-37.5)))["totalCount"] == 2
        assert (await due(client, petId=f"{zed['id']},{amy['id']}"))["totalCount"] == 4
        assert (await due(client, petType="cat"))["totalCount"] == 1
        assert groups(await due(client, petType="Cat")) == [("Tom", "FVRCP")]
        assert (await due(client, group="RABIES"))["totalCount"] == 4
        assert (await due(client, group=" fvrcp "))["totalCount"] == 1
        assert (await due(client, before=at(-1000)))["totalCount"] == 0

    @pytest.mark.parametrize(
        ("params", "named"),
        [
            ({"name": "Rex"}, "name"),
            ({"dueTo": at(0)}, "dueTo"),
            ({"q": "x"}, "q"),
            ({"dueAt_gte": at(0)}, "dueAt_gte"),
            ({"before": "yesterday"}, "before"),
            ({"after": "2026-13-01T00:00:00Z"}, "after"),
            ({"petId": "nope"}, "petId"),
            ({"petType": "Dragon"}, "petType"),
            ({"ownerId": "not an e-mail"}, "ownerId"),
            ({"access": "mine"}, "access"),
            ({"sort": "appliedAt"}, "sort"),
            ({"sort": "dueAt,dueAt"}, "sort"),
            ({"order": "up"}, "order"),
            ({"sort": "-group,petName", "order": "desc,asc"}, "order"),
            ({"sort": "group", "order": "desc,asc"}, "order"),
            ({"pageIndex": "0"}, "pageIndex"),
            ({"pageSize": "x"}, "pageSize"),
            ({"group": " "}, "group"),
            ({"group": ["Rabies", "Lepto"]}, "group"),
            ({"before": [at(0), at(1)]}, "before"),
        ],
    )
    async def test_anything_else_is_400(self, client: Client, params: dict[str, Any], named: str) -> None:
        response = await client.get(DUE, params=params, headers=auth())

        body = assert_error(response, 400, 994)
        assert named in body["errors"]

    async def test_a_large_page_size_is_reduced(self, client: Client, patients: list[dict[str, Any]]) -> None:
        page = await due(client, pageSize=100000)

        assert (page["pageSize"], len(page["items"])) == (100, 8)

    async def test_an_item_has_the_contracts_members(
        self, client: Client, patients: list[dict[str, Any]], rabies: dict[str, Any]
    ) -> None:
        item = (await due(client, pageSize=1))["items"][0]

        assert set(item) == {
            "petId",
            "petName",
            "petType",
            "ownerId",
            "group",
            "vaccineId",
            "vaccineName",
            "vaccinationId",
            "appliedAt",
            "dueAt",
        }
        assert (item["petName"], item["petType"], item["ownerId"]) == ("Zed", "Dog", ALICE)


async def test_only_get_is_allowed(client: Client) -> None:
    response: httpx.Response = await client.post(DUE, json={}, headers=auth())

    assert_error(response, 405, 993)
