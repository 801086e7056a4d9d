"""Certificates (contract v4 section 16): who issues, reads, changes and revokes one; the link shown once; the
public answer in its four forms, 404 for an unknown token and 410 for a revoked or expired one; the per-address
rate limit; certificates going with the pet's deletion or transfer; the feed. On both databases."""

from __future__ import annotations

import io
import json
import logging
import secrets
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
import httpx
import jwt
import pysqlite3.dbapi2 as sqlite3
import pytest
import sqlalchemy as sa
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from litestar.testing import AsyncTestClient
from pypdf import PdfReader

from petrecords.certificates.links import digest_of
from petrecords.certificates.public import PublicCertificates
from petrecords.certificates.reads import LINK
from petrecords.certificates.recent import RecentCertificates
from petrecords.config import Settings
from petrecords.logs import JsonFormatter
from petrecords.pets import PETS
from petrecords.store.postgres.statements import as_asyncpg_runs_it
from petrecords.store.sql import SqlTransaction
from petrecords.store.sqlite.statements import as_sqlite_runs_it
from petrecords.values import format_timestamp, now_ms, parse_datetime_ms
from tests.api.test_shares import WorkDone
from tests.certificates.support import DOSE_MEMBERS
from tests.support import (
    ADMIN,
    ALICE,
    BOB,
    MISSING_ID,
    assert_error,
    auth,
    create,
    create_vaccine,
    run_sql,
    scalar_sql,
)

Client = AsyncTestClient[Any]
CERTIFICATES = "/v1/pet-certificates"
CAROL = "carol@example.com"
DAY_MS = 86_400_000
FIELDS = {"id", "createdAt", "createdBy", "modifiedAt", "modifiedBy", "ownerId", "petId", "groups", "expiresAt"}
PUBLIC_JSON = {"certificateId", "issuedAt", "expiresAt", "asOf", "pet", "vaccinations"}


async def issue(client: Client, pet: dict[str, Any], user: str = ALICE, **extra: Any) -> dict[str, Any]:
    response = await client.post(CERTIFICATES, json={"petId": pet["id"], **extra}, headers=auth(user))
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


async def vaccinate(client: Client, pet: dict[str, Any], vaccine: dict[str, Any], **extra: Any) -> dict[str, Any]:
    body = {"petId": pet["id"], "vaccineId": vaccine["id"], "appliedAt": format_timestamp(now_ms() - DAY_MS), **extra}
    response = await client.post("/v1/pet-vaccination", json=body, headers=auth(ALICE))
    assert response.status_code == 201, response.text
    dose: dict[str, Any] = response.json()
    return dose


@pytest.fixture
async def rex(client: Client) -> dict[str, Any]:
    pet: dict[str, Any] = (
        await create(client, ALICE, name="Rex", pet_type="Dog", microchip="982000123456789", color="tan")
    ).json()
    return pet


@pytest.fixture
async def rabies(client: Client) -> dict[str, Any]:
    vaccine: dict[str, Any] = (
        await create_vaccine(client, name="Nobivac Rabies", pet_type="Dog", duration=365, group="Rabies")
    ).json()
    return vaccine


async def share_with(client: Client, pet: dict[str, Any], grantee: str) -> None:
    body = {"petId": pet["id"], "grantee": grantee, "access": "read"}
    response = await client.post("/v1/pet-shares", json=body, headers=auth(ALICE))
    assert response.status_code == 201, response.text


class TestIssue:
    async def test_the_link_is_shown_once(self, client: Client, rex: dict[str, Any]) -> None:
        created = await issue(client, rex)

        assert set(created) == FIELDS | {"link"}
        assert created["link"].startswith("/public/certificates/")
        assert len(created["link"].removeprefix("/public/certificates/")) == 43
        assert created["ownerId"] == ALICE
        assert created["groups"] is None
        got = await client.get(f"{CERTIFICATES}/{created['id']}", headers=auth())
        assert set(got.json()) == FIELDS
        listed = await client.get(CERTIFICATES, headers=auth())
        assert all("link" not in item for item in listed.json()["items"])
        history = await client.get(f"{CERTIFICATES}/{created['id']}/history", headers=auth())
        assert "link" not in history.text
        assert created["link"].rsplit("/", 1)[1] not in history.text
        feed = await client.get("/v1/changes", headers=auth(admin=True))
        assert created["link"].rsplit("/", 1)[1] not in feed.text

    async def test_only_a_digest_of_the_token_is_kept(
        self, client: Client, rex: dict[str, Any], database_url: str
    ) -> None:
        created = await issue(client, rex)
        token = created["link"].rsplit("/", 1)[1]

        kept = await scalar_sql(database_url, "SELECT token_digest FROM pet_certificates")
        assert kept == digest_of(token)
        assert token not in str(kept)

    async def test_it_expires_thirty_days_after_creation_by_default(self, client: Client, rex: dict[str, Any]) -> None:
        created = await issue(client, rex)

        created_ms = _ms(created["createdAt"])
        assert _ms(created["expiresAt"]) == created_ms + 30 * DAY_MS

    async def test_expiry_is_in_the_future_and_at_most_366_days_ahead(
        self, client: Client, rex: dict[str, Any]
    ) -> None:
        for expires in (now_ms() - 1000, now_ms() + 367 * DAY_MS):
            response = await client.post(
                CERTIFICATES, json={"petId": rex["id"], "expiresAt": format_timestamp(expires)}, headers=auth()
            )
            assert set(assert_error(response, 400, 994)["errors"]) == {"expiresAt"}
        kept = await issue(client, rex, expiresAt=format_timestamp(now_ms() + 365 * DAY_MS))
        assert kept["expiresAt"]

    async def test_groups_are_names_or_null(self, client: Client, rex: dict[str, Any]) -> None:
        for groups in ([], ["x" * 101], "Rabies", [1], ["a"] * 21):
            response = await client.post(CERTIFICATES, json={"petId": rex["id"], "groups": groups}, headers=auth())
            assert set(assert_error(response, 400, 994)["errors"]) == {"groups"}, groups
        created = await issue(client, rex, groups=[" Rabies ", "rabies", "DHPP"])
        assert created["groups"] == ["Rabies", "DHPP"]

    async def test_a_pet_the_caller_may_not_read_is_400_naming_pet_id(
        self, client: Client, rex: dict[str, Any]
    ) -> None:
        for pet_id in (rex["id"], MISSING_ID):
            response = await client.post(CERTIFICATES, json={"petId": pet_id}, headers=auth(BOB))
            assert set(assert_error(response, 400, 994)["errors"]) == {"petId"}

    async def test_whoever_may_read_the_pet_may_issue_one(self, client: Client, rex: dict[str, Any]) -> None:
        await share_with(client, rex, BOB)

        created = await issue(client, rex, BOB)

        assert created["createdBy"] == BOB
        assert created["ownerId"] == ALICE

    async def test_at_most_100_for_a_pet(self, client: Client, rex: dict[str, Any]) -> None:
        for _ in range(100):
            await issue(client, rex)

        response = await client.post(CERTIFICATES, json={"petId": rex["id"]}, headers=auth())

        assert set(assert_error(response, 400, 994)["errors"]) == {"petId"}

    async def test_an_idempotent_replay_shows_the_same_link_kept_sealed(
        self, client: Client, rex: dict[str, Any], database_url: str
    ) -> None:
        key = f"cert-{rex['id']}"
        headers = {**auth(), "Idempotency-Key": key}
        first = await client.post(CERTIFICATES, json={"petId": rex["id"]}, headers=headers)
        again = await client.post(CERTIFICATES, json={"petId": rex["id"]}, headers=headers)

        assert again.headers["Idempotent-Replayed"] == "true"
        assert again.content == first.content
        assert "link" in again.json()
        token = first.json()["link"].rsplit("/", 1)[1]
        kept = bytes(await scalar_sql(database_url, f"SELECT body FROM idempotency_keys WHERE key = '{key}'"))  # noqa: S608
        assert first.json()["id"].encode() in kept
        assert token.encode() not in kept
        assert b"/public/certificates/" not in kept

    async def test_a_replay_after_the_signing_key_changed_shows_the_record_without_the_link(
        self, make_client: Callable[[Settings], Client], make_settings: Callable[..., Settings]
    ) -> None:
        headers = {**auth(), "Idempotency-Key": "cert-across-keys"}
        async with make_client(make_settings(signing_key=_new_signing_key())) as before:
            pet = (await create(before, ALICE)).json()
            first = await before.post(CERTIFICATES, json={"petId": pet["id"]}, headers=headers)
            assert first.status_code == 201, first.text
        async with make_client(make_settings(signing_key=_new_signing_key())) as after:
            again = await after.post(CERTIFICATES, json={"petId": pet["id"]}, headers=headers)

        assert (again.status_code, again.headers["Idempotent-Replayed"]) == (201, "true")
        assert again.json() == {name: value for name, value in first.json().items() if name != "link"}


class TestWhoMay:
    async def test_issuer_owner_and_admin_read_others_get_404(self, client: Client, rex: dict[str, Any]) -> None:
        await share_with(client, rex, BOB)
        await share_with(client, rex, CAROL)
        created = await issue(client, rex, BOB)
        path = f"{CERTIFICATES}/{created['id']}"

        for user, admin in ((ALICE, False), (BOB, False), (ADMIN, True)):
            response = await client.get(path, headers=auth(user, admin=admin))
            assert response.status_code == 200, user
        assert_error(await client.get(path, headers=auth(CAROL)), 404, 995)
        assert_error(await client.delete(path, headers=auth(CAROL)), 404, 995)
        listed = await client.get(CERTIFICATES, headers=auth(CAROL))
        assert listed.json()["totalCount"] == 0
        for user in (ALICE, BOB):
            listed = await client.get(CERTIFICATES, headers=auth(user))
            assert [item["id"] for item in listed.json()["items"]] == [created["id"]]

    async def test_only_expiry_and_groups_change(self, client: Client, rex: dict[str, Any]) -> None:
        created = await issue(client, rex)
        path = f"{CERTIFICATES}/{created['id']}"
        other = (await create(client, ALICE, name="Fido")).json()

        moved = await client.patch(path, json={"petId": other["id"]}, headers=auth())
        assert set(assert_error(moved, 400, 994)["errors"]) == {"petId"}
        patched = await client.patch(path, json={"groups": ["Rabies"]}, headers=auth())
        assert patched.status_code == 200, patched.text
        assert patched.json()["groups"] == ["Rabies"]
        assert patched.json()["expiresAt"] == created["expiresAt"]
        assert "link" not in patched.json()
        later = format_timestamp(now_ms() + 100 * DAY_MS)
        replaced = await client.put(path, json={"petId": rex["id"], "expiresAt": later}, headers=auth())
        assert replaced.status_code == 200, replaced.text
        assert replaced.json()["expiresAt"] == later
        assert replaced.json()["groups"] == ["Rabies"]


class TestPublic:
    async def test_the_json_shows_exactly_the_facts(
        self, client: Client, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        first = await vaccinate(client, rex, rabies, notes="secret note", lotNumber="A1", rabiesTag="RT-1")
        created = await issue(client, rex)

        response = await client.get(created["link"])

        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("application/json")
        assert response.headers["cache-control"] == "no-store"
        assert response.headers["referrer-policy"] == "no-referrer"
        body = response.json()
        assert set(body) == PUBLIC_JSON
        assert body["certificateId"] == created["id"]
        assert body["issuedAt"] == created["createdAt"]
        assert body["pet"]["microchip"] == "982000123456789"
        assert [dose["id"] for dose in body["vaccinations"]] == [first["id"]]
        assert list(body["vaccinations"][0]) == DOSE_MEMBERS
        assert body["vaccinations"][0]["state"] == "current"
        assert "@" not in response.text
        assert "secret note" not in response.text

    async def test_only_the_named_groups_and_the_latest_dose_counts(
        self, client: Client, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        dhpp = (await create_vaccine(client, name="Nobivac DHPPi", pet_type="Dog", duration=365, group="DHPP")).json()
        older = await vaccinate(client, rex, rabies, appliedAt=format_timestamp(now_ms() - 400 * DAY_MS))
        newer = await vaccinate(client, rex, rabies)
        await vaccinate(client, rex, dhpp)
        created = await issue(client, rex, groups=["rabies"])

        body = (await client.get(created["link"])).json()

        assert [(dose["id"], dose["state"]) for dose in body["vaccinations"]] == [
            (older["id"], "superseded"),
            (newer["id"], "current"),
        ]

    async def test_at_most_the_first_doses_are_read(
        self, client: Client, rex: dict[str, Any], rabies: dict[str, Any], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        doses = [
            await vaccinate(client, rex, rabies, appliedAt=format_timestamp(now_ms() - days * DAY_MS))
            for days in (30, 20, 10)
        ]
        monkeypatch.setattr("petrecords.certificates.reads.MOST_DOSES", 2)
        created = await issue(client, rex)  # its document made with it

        body = (await client.get(created["link"])).json()

        assert [dose["id"] for dose in body["vaccinations"]] == [dose["id"] for dose in doses[:2]]

    async def test_the_jws_verifies_against_the_jwks(self, client: Client, rex: dict[str, Any]) -> None:
        created = await issue(client, rex)

        signed = await client.get(created["link"], headers={"Accept": "application/jose"})
        keys = await client.get("/.well-known/jwks.json")

        assert signed.status_code == 200
        assert signed.headers["content-type"].startswith("application/jose")
        assert keys.headers["cache-control"] == "no-store"
        header = jwt.get_unverified_header(signed.text)
        key_set = jwt.PyJWKSet.from_dict(keys.json())
        key = next(key for key in key_set.keys if key.key_id == header["kid"])
        payload = jwt.api_jws.decode(signed.text, key.key, algorithms=["EdDSA", "ES256"])
        assert httpx.Response(200, content=payload).json()["certificateId"] == created["id"]

    async def test_the_pdf_reads_back(self, client: Client, rex: dict[str, Any], rabies: dict[str, Any]) -> None:
        await vaccinate(client, rex, rabies, lotNumber="LOT-77", veterinarian="Dr Ana Ñúñez")
        created = await issue(client, rex)

        response = await client.get(created["link"], headers={"Accept": "application/pdf"})

        assert response.status_code == 200
        assert response.headers["content-type"] == "application/pdf"
        text = "".join(page.extract_text() for page in PdfReader(io.BytesIO(response.content)).pages)
        for expected in ("Rex", "982000123456789", "LOT-77", "Ñúñez", created["id"]):
            assert expected in text

    async def test_the_page_is_html_with_its_policy(self, client: Client, rex: dict[str, Any]) -> None:
        created = await issue(client, rex)

        response = await client.get(created["link"], headers={"Accept": "text/html,application/xhtml+xml"})

        assert response.status_code == 200
        assert response.headers["content-type"] == "text/html; charset=utf-8"
        assert response.headers["content-security-policy"].startswith("default-src 'none'")
        assert "<script" not in response.text

    async def test_any_other_accept_gets_json(self, client: Client, rex: dict[str, Any]) -> None:
        created = await issue(client, rex)

        response = await client.get(created["link"], headers={"Accept": "image/png"})

        assert response.headers["content-type"].startswith("application/json")

    async def test_unknown_is_404_revoked_and_expired_are_410(self, client: Client, rex: dict[str, Any]) -> None:
        created = await issue(client, rex)
        for unknown in ("/public/certificates/" + "A" * 43, "/public/certificates/short"):
            response = await client.get(unknown)
            assert_error(response, 404, 995)
            assert response.headers["cache-control"] == "no-store"
            assert response.headers["referrer-policy"] == "no-referrer"

        deleted = await client.delete(f"{CERTIFICATES}/{created['id']}", headers=auth())
        assert deleted.status_code == 200
        gone = await client.get(created["link"])
        assert_error(gone, 410, 981)
        assert gone.headers["cache-control"] == "no-store"

    async def test_every_answer_under_public_is_no_store_and_no_referrer(
        self, client: Client, rex: dict[str, Any]
    ) -> None:
        """Contract section 16: a path no route matches, or a method the link does not take, is answered with the
        same headers as the link itself (the path may hold a token)."""
        created = await issue(client, rex)
        answers = [
            await client.get("/public/certificates/"),
            await client.get("/public/other"),
            await client.get("/public/certificates/a/b"),
            await client.post(created["link"]),
            await client.delete(created["link"], headers=auth()),
        ]
        for response in answers:
            assert response.status_code in (404, 405), (response.request.url, response.status_code)
            assert response.headers["cache-control"] == "no-store", response.request.url
            assert response.headers["referrer-policy"] == "no-referrer", response.request.url
            assert response.headers.get_list("cache-control") == ["no-store"]

    async def test_a_random_token_costs_one_lookup_and_a_malformed_one_none(
        self, client: Client, rex: dict[str, Any], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        await issue(client, rex)
        work = WorkDone(monkeypatch)

        unknown, steps = await work.of(client.get("/public/certificates/" + "q" * 43))
        malformed, none = await work.of(client.get("/public/certificates/" + "q" * 42 + "!"))

        assert unknown.status_code == 404
        assert malformed.status_code == 404
        assert [step[0] for step in steps] == ["read"]
        assert "pet_certificates" in steps[0][1]
        assert "revoked_certificate_links" in steps[0][1]
        assert none == []

    async def test_an_expired_link_is_410(
        self, client: Client, rex: dict[str, Any], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        created = await issue(client, rex, expiresAt=format_timestamp(now_ms() + 60_000))
        later = now_ms() + 120_000
        monkeypatch.setattr("petrecords.certificates.public.now_ms", lambda: later)

        assert_error(await client.get(created["link"]), 410, 981)

    async def test_the_pets_deletion_and_transfer_revoke_its_certificates(self, client: Client) -> None:
        kept = (await create(client, ALICE, name="Kept")).json()
        given = (await create(client, ALICE, name="Given")).json()
        gone = await issue(client, kept)
        moved = await issue(client, given)

        deleted = await client.delete(f"/v1/pets/{kept['id']}", headers=auth())
        transferred = await client.patch(f"/v1/pets/{given['id']}", json={"ownerId": BOB}, headers=auth(admin=True))

        assert deleted.status_code == 200, deleted.text
        assert transferred.status_code == 200, transferred.text
        for certificate in (gone, moved):
            assert_error(await client.get(f"{CERTIFICATES}/{certificate['id']}", headers=auth(admin=True)), 404, 995)
            assert_error(await client.get(certificate["link"]), 410, 981)


class TestAskedAgain:
    """A link asked again answers from what its process kept, until anything it shows may have changed."""

    async def test_it_reads_at_most_one_statement_the_link_and_what_vouches_for_it(
        self,
        client: Client,
        rex: dict[str, Any],
        rabies: dict[str, Any],
        monkeypatch: pytest.MonkeyPatch,
        database_url: str,
    ) -> None:
        await vaccinate(client, rex, rabies)
        created = await issue(client, rex)
        first = await client.get(created["link"])
        # The first read found the document the create made; the next one tells this process that it still holds.
        await client.get(created["link"])
        work = WorkDone(monkeypatch)

        again, steps = await work.of(client.get(created["link"]))
        jws, signed_steps = await work.of(client.get(created["link"], headers={"Accept": "application/jose"}))

        assert again.status_code == 200
        assert {**again.json(), "asOf": None} == {**first.json(), "asOf": None}
        assert _ms(again.json()["asOf"]) >= _ms(first.json()["asOf"])
        assert jws.status_code == 200
        # SQLite tells from its connection that nothing was written since the link's vouch was read: no statement.
        expected = [] if database_url.startswith("sqlite") else [("read", str(LINK))]
        assert steps == signed_steps == expected

    async def test_writes_to_other_pets_leave_it_kept(
        self,
        client: Client,
        rex: dict[str, Any],
        rabies: dict[str, Any],
        monkeypatch: pytest.MonkeyPatch,
        database_url: str,
    ) -> None:
        await vaccinate(client, rex, rabies)
        created = await issue(client, rex)
        await client.get(created["link"])
        other = (await create(client, ALICE, name="Fido", pet_type="Dog")).json()
        await vaccinate(client, other, rabies)
        renamed = await client.patch(f"/v1/pets/{other['id']}", json={"name": "Fidel"}, headers=auth())
        assert renamed.status_code == 200, renamed.text
        await issue(client, other)
        work = WorkDone(monkeypatch)

        again, steps = await work.of(client.get(created["link"]))
        once_more, more_steps = await work.of(client.get(created["link"]))

        assert again.status_code == once_more.status_code == 200
        assert steps == [("read", str(LINK))]
        assert more_steps == ([] if database_url.startswith("sqlite") else [("read", str(LINK))])

    async def test_every_write_it_shows_is_shown_at_once(
        self, client: Client, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        dose = await vaccinate(client, rex, rabies)
        dhpp = (await create_vaccine(client, name="Vanguard DHPP", pet_type="Dog", duration=365, group="DHPP")).json()
        other = await vaccinate(client, rex, dhpp)
        created = await issue(client, rex)

        async def shown() -> dict[str, Any]:
            response = await client.get(created["link"])
            assert response.status_code == 200, response.text
            kept = await client.get(created["link"])
            assert {**kept.json(), "asOf": None} == {**response.json(), "asOf": None}
            body: dict[str, Any] = response.json()
            return body

        assert {item["id"] for item in (await shown())["vaccinations"]} == {dose["id"], other["id"]}
        in_error = {"status": "entered-in-error", "statusReason": "recorded for the wrong pet"}
        marked = await client.patch(f"/v1/pet-vaccination/{dose['id']}", json=in_error, headers=auth())
        assert marked.status_code == 200, marked.text
        assert [item["id"] for item in (await shown())["vaccinations"]] == [other["id"]]
        renamed = await client.patch(
            f"/v1/vaccines/{dhpp['id']}", json={"name": "Vanguard Plus 5"}, headers=auth(admin=True)
        )
        assert renamed.status_code == 200, renamed.text
        assert [item["vaccineName"] for item in (await shown())["vaccinations"]] == ["Vanguard Plus 5"]
        # One dose gone and another come: as many doses as before, each at its first revision.
        assert (await client.delete(f"/v1/pet-vaccination/{other['id']}", headers=auth())).status_code == 200
        newer = await vaccinate(client, rex, dhpp)
        assert [item["id"] for item in (await shown())["vaccinations"]] == [newer["id"]]
        pet = await client.patch(f"/v1/pets/{rex['id']}", json={"name": "Rexie"}, headers=auth())
        assert pet.status_code == 200, pet.text
        assert (await shown())["pet"]["name"] == "Rexie"
        expiry = format_timestamp(now_ms() + 5 * DAY_MS)
        narrowed = {"groups": ["Rabies"], "expiresAt": expiry}
        changed = await client.patch(f"{CERTIFICATES}/{created['id']}", json=narrowed, headers=auth())
        assert changed.status_code == 200, changed.text
        after = await shown()
        assert (after["vaccinations"], after["expiresAt"]) == ([], expiry)
        assert (await client.delete(f"{CERTIFICATES}/{created['id']}", headers=auth())).status_code == 200
        assert_error(await client.get(created["link"]), 410, 981)

    async def test_states_and_expiry_move_with_the_clock(
        self, client: Client, rex: dict[str, Any], rabies: dict[str, Any], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        dose = await vaccinate(client, rex, rabies)
        due = _ms(dose["dueAt"])
        created = await issue(client, rex, expiresAt=format_timestamp(due + DAY_MS))
        clock = [now_ms()]
        monkeypatch.setattr("petrecords.certificates.public.now_ms", lambda: clock[0])

        async def state() -> str:
            response = await client.get(created["link"])
            assert response.status_code == 200, response.text
            assert _ms(response.json()["asOf"]) == clock[0]
            value: str = response.json()["vaccinations"][0]["state"]
            return value

        assert [await state(), await state()] == ["current", "current"]
        clock[0] = due - DAY_MS
        assert [await state(), await state()] == ["due-soon", "due-soon"]
        clock[0] = due
        assert [await state(), await state()] == ["overdue", "overdue"]
        clock[0] = due + DAY_MS
        assert_error(await client.get(created["link"]), 410, 981)


class TestFirstRead:
    """A link read once, as a kennel reads it, answers from the document its certificate's write made (or the last
    read after a change made), read with the link in one statement; a write that changes what it shows makes it stale,
    and a stale one is never served. Each process here keeps nothing of its own (recent.py), as for a link read
    once."""

    @pytest.fixture(autouse=True)
    def forgetful(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(RecentCertificates, "keep", lambda *_, **__: None)

    @pytest.fixture
    async def client(
        self, make_client: Callable[[Settings], Client], make_settings: Callable[..., Settings]
    ) -> AsyncIterator[Client]:
        # An app of its own, its budget of public requests high and its own: the module's is shared by its tests.
        async with make_client(make_settings(public_rate_limit=10_000)) as client:
            yield client

    async def test_it_is_one_statement_in_every_form(
        self, client: Client, rex: dict[str, Any], rabies: dict[str, Any], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        await vaccinate(client, rex, rabies)
        await vaccinate(client, rex, rabies, appliedAt=format_timestamp(now_ms() - 2 * DAY_MS))
        created = await issue(client, rex)
        work = WorkDone(monkeypatch)

        for accept in ("application/json", "application/jose", "text/html", "application/pdf"):
            response, steps = await work.of(client.get(created["link"], headers={"Accept": accept}))
            assert response.status_code == 200, response.text
            assert steps == [("read", str(LINK))], accept
        stored, _ = await work.of(client.get(created["link"]))
        monkeypatch.setattr("petrecords.certificates.public.stored_answer", lambda *_, **__: None)
        made, _ = await work.of(client.get(created["link"]))
        assert {**stored.json(), "asOf": None} == {**made.json(), "asOf": None}
        assert [dose["state"] for dose in stored.json()["vaccinations"]] == ["superseded", "current"]

    async def test_every_write_it_shows_makes_it_stale(
        self,
        client: Client,
        rex: dict[str, Any],
        rabies: dict[str, Any],
        monkeypatch: pytest.MonkeyPatch,
        database_url: str,
    ) -> None:
        dose = await vaccinate(client, rex, rabies)
        dhpp = (await create_vaccine(client, name="Vanguard DHPP", pet_type="Dog", duration=365, group="DHPP")).json()
        created = await issue(client, rex)
        work = WorkDone(monkeypatch)

        async def write(path: str, body: dict[str, Any] | None = None, admin: bool = False) -> None:
            if body is None:
                response, steps = await work.of(client.delete(path, headers=auth()))
            else:
                response, steps = await work.of(client.patch(path, json=body, headers=auth(admin=admin)))
            assert response.status_code == 200, response.text
            # Marked stale by what the write moves of its own records, without a statement of the documents.
            assert not [step for step in steps if "certificate_documents" in step[1] and step[0] == "write"], steps

        async def shown() -> dict[str, Any]:
            first, steps = await work.of(client.get(created["link"]))
            assert first.status_code == 200, first.text
            assert steps != [("read", str(LINK))]  # the document was stale: made again, and kept
            again, steps = await work.of(client.get(created["link"]))
            assert steps == [("read", str(LINK))]
            assert {**again.json(), "asOf": None} == {**first.json(), "asOf": None}
            body: dict[str, Any] = first.json()
            return body

        newer = await vaccinate(client, rex, dhpp)
        assert [item["id"] for item in (await shown())["vaccinations"]] == [dose["id"], newer["id"]]
        await write(f"/v1/pet-vaccination/{dose['id']}", {"lotNumber": "B-77"})
        assert (await shown())["vaccinations"][0]["lotNumber"] == "B-77"
        await write(f"/v1/pet-vaccination/{dose['id']}", {"status": "entered-in-error", "statusReason": "wrong pet"})
        assert [item["id"] for item in (await shown())["vaccinations"]] == [newer["id"]]
        await write(f"/v1/vaccines/{dhpp['id']}", {"name": "Vanguard Plus 5"}, admin=True)
        assert (await shown())["vaccinations"][0]["vaccineName"] == "Vanguard Plus 5"
        await write(f"/v1/vaccines/{dhpp['id']}", {"manufacturer": "Zoetis"}, admin=True)
        assert (await shown())["vaccinations"][0]["manufacturer"] == "Zoetis"
        await write(f"/v1/vaccines/{dhpp['id']}", {"group": "Distemper"}, admin=True)
        assert (await shown())["vaccinations"][0]["group"] == "Distemper"
        await write(f"/v1/pet-vaccination/{newer['id']}")
        assert (await shown())["vaccinations"] == []
        await write(f"/v1/pets/{rex['id']}", {"name": "Rexie", "microchip": "982000123456780"})
        pet = (await shown())["pet"]
        assert (pet["name"], pet["microchip"]) == ("Rexie", "982000123456780")
        await write(f"/v1/pets/{rex['id']}", {"deceasedAt": format_timestamp(now_ms())[:10]})
        assert (await shown())["pet"]["deceasedAt"] is not None
        expiry = format_timestamp(now_ms() + 5 * DAY_MS)
        changed = await client.patch(f"{CERTIFICATES}/{created['id']}", json={"expiresAt": expiry}, headers=auth())
        assert changed.status_code == 200, changed.text
        response, steps = await work.of(client.get(created["link"]))
        assert (response.json()["expiresAt"], steps) == (expiry, [("read", str(LINK))])  # made by the change
        # The id as 32 hex digits: how SQLite keeps it, and a form PostgreSQL reads as a uuid too.
        kept = "SELECT count(*) FROM certificate_documents"
        kept += f" WHERE certificate_id = '{uuid.UUID(created['id']).hex}'"
        assert await scalar_sql(database_url, kept) == 1
        assert (await client.delete(f"{CERTIFICATES}/{created['id']}", headers=auth())).status_code == 200
        assert_error(await client.get(created["link"]), 410, 981)
        assert await scalar_sql(database_url, kept) == 0

    async def test_a_write_by_any_writer_makes_it_stale(
        self, client: Client, rex: dict[str, Any], rabies: dict[str, Any], database_url: str
    ) -> None:
        # Written past the service, as another release or a script may write, moving no revision and no instant:
        # the database counts each write itself.
        dose = await vaccinate(client, rex, rabies)
        fido = (await create(client, ALICE, name="Fido", pet_type="Dog")).json()
        created, fidos = await issue(client, rex), await issue(client, fido)

        async def shown(link: str) -> list[dict[str, Any]]:
            response = await client.get(link)
            assert response.status_code == 200, response.text
            vaccinations: list[dict[str, Any]] = response.json()["vaccinations"]
            return vaccinations

        def hex_id(record: dict[str, Any]) -> str:
            return uuid.UUID(record["id"]).hex

        # The ids are the test's own.
        lot = f"UPDATE pet_vaccinations SET lot_number = 'B-77' WHERE id = '{hex_id(dose)}'"  # noqa: S608
        maker = f"UPDATE vaccines SET manufacturer = 'Zoetis' WHERE id = '{hex_id(rabies)}'"  # noqa: S608
        move = f"UPDATE pet_vaccinations SET pet_id = '{hex_id(fido)}' WHERE id = '{hex_id(dose)}'"  # noqa: S608
        assert [item["id"] for item in await shown(created["link"])] == [dose["id"]]
        await run_sql(database_url, lot)
        assert (await shown(created["link"]))[0]["lotNumber"] == "B-77"
        await run_sql(database_url, maker)
        assert (await shown(created["link"]))[0]["manufacturer"] == "Zoetis"
        assert await shown(fidos["link"]) == []
        await run_sql(database_url, move)
        assert await shown(created["link"]) == []
        assert [item["id"] for item in await shown(fidos["link"])] == [dose["id"]]

    async def test_a_write_committed_while_a_read_makes_it_is_not_hidden(
        self, client: Client, rex: dict[str, Any], rabies: dict[str, Any], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        await vaccinate(client, rex, rabies)
        created = await issue(client, rex)
        renamed = await client.patch(f"/v1/pets/{rex['id']}", json={"name": "Rexie"}, headers=auth())
        assert renamed.status_code == 200, renamed.text
        keep = PublicCertificates._keep_document

        async def keep_after_a_write(self: PublicCertificates, *args: Any) -> None:
            # Between the read that made the document and the write that keeps it, a new name for the pet commits.
            async with self.services.store.transaction(write=True) as tx:
                assert isinstance(tx, SqlTransaction)
                pets = PETS.table
                rename = sa.update(pets).where(pets.c.id == sa.bindparam("pet_id", type_=sa.Uuid()))
                rename = rename.values(name="Max", revision=pets.c.revision + 1)
                await tx.execute(rename, {"pet_id": uuid.UUID(rex["id"])})
            await keep(self, *args)

        monkeypatch.setattr(PublicCertificates, "_keep_document", keep_after_a_write)
        made = await client.get(created["link"])
        monkeypatch.setattr(PublicCertificates, "_keep_document", keep)

        assert made.json()["pet"]["name"] == "Rexie"  # as the records were when it was read
        assert [(await client.get(created["link"])).json()["pet"]["name"] for _ in range(2)] == ["Max", "Max"]


class TestFeed:
    async def test_the_issuer_and_the_owner_see_the_changes(self, client: Client, rex: dict[str, Any]) -> None:
        await share_with(client, rex, BOB)
        await share_with(client, rex, CAROL)
        created = await issue(client, rex, BOB)
        await client.delete(f"{CERTIFICATES}/{created['id']}", headers=auth(BOB))

        for user, seen in ((ALICE, True), (BOB, True), (CAROL, False)):
            feed = (await client.get("/v1/changes?resource=pet-certificates", headers=auth(user))).json()
            actions = [change["action"] for change in feed["items"]]
            assert actions == (["created", "deleted"] if seen else []), user
        history = await client.get(f"{CERTIFICATES}/{created['id']}/history", headers=auth(BOB))
        assert history.status_code == 200


class TestLogs:
    async def test_no_link_token_reaches_the_log(
        self,
        make_client: Callable[[Settings], Client],
        make_settings: Callable[..., Settings],
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        caplog.set_level(logging.DEBUG)
        async with make_client(make_settings(access_log=True)) as logged:
            pet = (await create(logged, ALICE)).json()
            created = await issue(logged, pet)
            token = created["link"].rsplit("/", 1)[1]
            for path in (created["link"], created["link"].upper(), f"/public//certificates/{token}"):
                await logged.get(path, headers={"Accept": "application/pdf"})
            await logged.delete(f"{CERTIFICATES}/{created['id']}", headers=auth())
            await logged.get(created["link"])

        lines = [JsonFormatter().format(record) for record in caplog.records if record.name != "httpx"]
        access = [json.loads(line) for line in lines if '"petrecords.access"' in line]
        assert len([line for line in access if "/certificates/" in line["path"].lower()]) == 4
        assert not [line for line in lines if token in line or token.upper() in line]


class TestGuessedTokens:
    """A flood of random tokens costs one indexed lookup each, and leaves nothing kept."""

    async def test_each_costs_one_statement_and_none_is_kept(
        self,
        make_client: Callable[[Settings], Client],
        make_settings: Callable[..., Settings],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        # An app of its own, its budget of public requests high and its own: the module's is shared by its tests.
        async with make_client(make_settings(public_rate_limit=1000)) as client:
            pet = (await create(client, ALICE)).json()
            link = (await issue(client, pet))["link"]
            assert (await client.get(link)).status_code == 200
            work = WorkDone(monkeypatch)

            for _ in range(20):
                response, steps = await work.of(client.get("/public/certificates/" + secrets.token_urlsafe(32)))
                assert_error(response, 404, 995)
                assert steps == [("read", str(LINK))]
            guessed = "/public/certificates/" + "B" * 43
            await client.get(guessed)
            again, steps = await work.of(client.get(guessed))

        assert_error(again, 404, 995)
        assert steps == [("read", str(LINK))]  # a token guessed before is not remembered either

    async def test_the_statement_probes_the_digest_index_of_each_table(self, database_url: str) -> None:
        plan = await _plan(database_url, LINK, {"digest": digest_of("C" * 43)})

        assert "ix_pet_certificates_token_digest" in plan
        assert "ix_revoked_certificate_links_token_digest" in plan
        # A table read whole: SQLite says SCAN, PostgreSQL Seq Scan.
        assert not [line for line in plan.splitlines() if line.startswith("SCAN") or "Seq Scan" in line], plan


async def _plan(database_url: str, statement: Any, values: dict[str, Any]) -> str:
    """How the database runs a statement; on PostgreSQL with sequential scans discouraged, as on tables of the size
    an index is for (a test's tables are small enough for a scan to cost less)."""
    if database_url.startswith("sqlite"):
        sql, parameters = as_sqlite_runs_it(statement, values)
        connection = sqlite3.connect(database_url.removeprefix("sqlite:///"))
        try:
            return "\n".join(row[3] for row in connection.execute("EXPLAIN QUERY PLAN " + sql, parameters))
        finally:
            connection.close()
    sql, arguments = as_asyncpg_runs_it(statement, values)
    pg = await asyncpg.connect(database_url, timeout=5)
    try:
        async with pg.transaction():
            await pg.execute("SET LOCAL enable_seqscan = off")
            return "\n".join(row[0] for row in await pg.fetch("EXPLAIN " + sql, *arguments))
    finally:
        await pg.close()


class TestRateLimit:
    async def test_a_flooded_address_gets_429_without_a_database_read(
        self,
        make_client: Callable[[Settings], Client],
        make_settings: Callable[..., Settings],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        async with make_client(make_settings(public_rate_limit=3)) as limited:
            pet = (await create(limited, ALICE)).json()
            link = (await issue(limited, pet))["link"]
            assert (await limited.get(link)).status_code == 200  # kept: asked again, it would read the version
            for _ in range(2):
                assert (await limited.get("/public/certificates/" + "A" * 43)).status_code == 404
            reads: list[object] = []
            monkeypatch.setattr(
                "petrecords.certificates.public.find_link", lambda *args: reads.append(args) or _never()
            )
            monkeypatch.setattr(
                "petrecords.certificates.public.PublicCertificates._answer",
                lambda *args: reads.append(args) or _never(),
            )
            work = WorkDone(monkeypatch)
            for path in (link, "/public/certificates/" + "A" * 43, "/.well-known/jwks.json"):
                response, steps = await work.of(limited.get(path))
                assert_error(response, 429, 987)
                assert response.headers["retry-after"]
                assert response.headers["cache-control"] == "no-store"
                assert response.headers["referrer-policy"] == "no-referrer"
                assert steps == []
            assert reads == []


async def _never() -> None:
    raise AssertionError("the database was read")


def _ms(timestamp: str) -> int:
    parsed = parse_datetime_ms(timestamp)
    assert parsed is not None
    return int(parsed)


def _new_signing_key() -> str:
    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return pem.decode()
