"""Tokens shaped exactly as three identity providers issue them (tests/servers/), each signed by keys served
from a JWKS endpoint of the tests' own, with the settings docs/how-to gives for that provider: Keycloak (a realm's
default settings, the groups mapper with full paths, RS256, ES256 and EdDSA realm keys), Auth0 (namespaced custom
claims, `aud` a list, `sub` of its user store) and Microsoft Entra ID (v2 tokens, app roles, groups as object ids,
keys published without `alg`); and each provider rotating its key (a new `kid`) while requests run."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from petrecords.app import create_app
from tests.conftest import test_settings as settings_of
from tests.servers.jwks_server import (
    Auth0,
    Entra,
    JwksServer,
    Keycloak,
    Person,
    SigningKey,
    ec_key,
    ed_key,
    jwks_server,
    rsa_key,
)
from tests.support import assert_error, pet_body, wipe

pytestmark = pytest.mark.only_on("sqlite")  # the providers' token shapes and the keys' life: the same on both databases

Client = AsyncTestClient[Any]
OWNER = Person("olga@example.com", "olga")
VET = Person("vera@clinic.example", "vera", groups=("/clinic-42",))
NORTH = Person("nils@clinic.example", "nils", groups=("/clinics/north",))
ADMIN = Person("root@clinic.example", "root", roles=("admin",))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def keycloak_settings(keycloak: Keycloak) -> dict[str, Any]:
    """docs/how-to/keycloak.md's settings, with the realm's default audience."""
    return {
        "auth_issuer": keycloak.issuer,
        "auth_jwks_url": keycloak.jwks_url,
        "auth_audience": "account",
        "auth_user_claim": "email",
        "auth_roles_claim": "realm_access.roles",
        "auth_groups_claim": "groups",
    }


def auth0_settings(auth0: Auth0) -> dict[str, Any]:
    """docs/how-to/auth0.md's settings."""
    return {
        "auth_issuer": auth0.issuer,
        "auth_jwks_url": auth0.jwks_url,
        "auth_audience": auth0.api,
        "auth_user_claim": "https://clinic.example/email",
        "auth_roles_claim": "https://clinic.example/roles",
        "auth_groups_claim": "https://clinic.example/groups",
    }


def entra_settings(entra: Entra) -> dict[str, Any]:
    """docs/how-to/entra-id.md's settings."""
    return {
        "auth_issuer": entra.issuer,
        "auth_jwks_url": entra.jwks_url,
        "auth_audience": entra.CLIENT_ID,
        "auth_user_claim": "email",
        "auth_roles_claim": "roles",
        "auth_admin_role": "PetRecords.Admin",
        "auth_groups_claim": "groups",
    }


@contextlib.asynccontextmanager
async def provider_app(database_url: str, data_dir: Any, **values: Any) -> AsyncIterator[Client]:
    settings = settings_of(database_url, data_dir, auth_mode="jwks", auth_secret=None, **values)
    async with AsyncTestClient(app=create_app(settings)) as started:  # type: ignore[arg-type]
        yield started


@pytest.fixture
def logged(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="petrecords.auth")
    caplog.clear()
    return caplog


def refusal(logged: pytest.LogCaptureFixture) -> dict[str, Any]:
    """The one refusal line logged since `logged` was cleared."""
    lines = [getattr(line, "fields", {}) for line in logged.records if line.name == "petrecords.auth"]
    assert len(lines) == 1, lines
    return lines[0]


async def share_with(client: Client, owner: str, pet: dict[str, Any], grantee: str) -> None:
    shared = await client.post(
        "/v1/pet-shares", json={"petId": pet["id"], "grantee": grantee, "access": "care"}, headers=bearer(owner)
    )
    assert shared.status_code == 201, shared.text


KEYCLOAK_KEYS = [rsa_key("kc-rs256"), ec_key("kc-es256"), ed_key("kc-eddsa")]
for _key in KEYCLOAK_KEYS:
    _key.public_jwk["alg"] = _key.algorithm  # Keycloak names each realm key's algorithm, EdDSA's too
AUTH0_KEY = rsa_key("auth0-1")
ENTRA_KEY = rsa_key("entra-1")


@dataclass
class Provider:
    """One provider: the keys it signs with, the shape of its tokens, its how-to's settings, and how it rotates:
    Keycloak signs with a new key as soon as it has one; Auth0 and Entra ID publish the next key before they sign
    with it."""

    keys: list[SigningKey]
    shape: Callable[[JwksServer], Any]
    settings: Callable[[Any], dict[str, Any]]
    published_first: bool


PROVIDERS = {
    "Keycloak": Provider(KEYCLOAK_KEYS, Keycloak, keycloak_settings, published_first=False),
    "Auth0": Provider([AUTH0_KEY], Auth0, auth0_settings, published_first=True),
    "Entra ID": Provider([ENTRA_KEY], Entra, entra_settings, published_first=True),
}


@dataclass
class Served:
    shape: Any
    client: Client


@pytest.fixture(scope="module")
async def served(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[dict[str, Served]]:
    """Each provider's key set, served, and an app with its how-to's settings, for the module."""
    async with contextlib.AsyncExitStack() as stack:
        apps = {}
        for name, provider in PROVIDERS.items():
            shape = provider.shape(stack.enter_context(jwks_server(list(provider.keys))))
            app = provider_app(database_url, tmp_path_factory.mktemp("data"), **provider.settings(shape))
            apps[name] = Served(shape, await stack.enter_async_context(app))
        yield apps


@pytest.fixture
async def at(database_url: str, served: dict[str, Served]) -> dict[str, Served]:
    """The providers' apps, on an emptied database."""
    await wipe(database_url)
    return served


# --- Keycloak --------------------------------------------------------------------------------------


class TestKeycloak:
    @pytest.fixture
    def keycloak(self, at: dict[str, Served]) -> Keycloak:
        shape: Keycloak = at["Keycloak"].shape
        return shape

    @pytest.fixture
    def at_keycloak(self, at: dict[str, Served]) -> Client:
        return at["Keycloak"].client

    @pytest.mark.parametrize("key", KEYCLOAK_KEYS, ids=lambda key: key.algorithm)
    async def test_each_kind_of_realm_key(self, at_keycloak: Client, keycloak: Keycloak, key: SigningKey) -> None:
        response = await at_keycloak.post("/v1/pets", json=pet_body(), headers=bearer(keycloak.token(key, OWNER)))

        assert response.status_code == 201, response.text
        assert response.json()["ownerId"] == OWNER.email

    async def test_the_realm_role_makes_an_admin(self, at_keycloak: Client, keycloak: Keycloak) -> None:
        as_admin = keycloak.token(KEYCLOAK_KEYS[0], ADMIN)
        as_owner = keycloak.token(KEYCLOAK_KEYS[0], OWNER)

        given = await at_keycloak.post("/v1/pets", json=pet_body(ownerId=OWNER.email), headers=bearer(as_admin))
        refused = await at_keycloak.post("/v1/pets", json=pet_body(ownerId=ADMIN.email), headers=bearer(as_owner))

        assert given.status_code == 201, given.text
        assert_error(refused, 403, 997)

    @pytest.mark.parametrize(("member", "grantee"), [(VET, "group:clinic-42"), (NORTH, "group:clinics/north")])
    async def test_a_group_by_its_full_path(
        self, at_keycloak: Client, keycloak: Keycloak, member: Person, grantee: str
    ) -> None:
        owner = keycloak.token(KEYCLOAK_KEYS[1], OWNER)
        pet = (await at_keycloak.post("/v1/pets", json=pet_body(), headers=bearer(owner))).json()
        await share_with(at_keycloak, owner, pet, grantee)

        seen = await at_keycloak.get(f"/v1/pets/{pet['id']}", headers=bearer(keycloak.token(KEYCLOAK_KEYS[2], member)))
        other = await at_keycloak.get(f"/v1/pets/{pet['id']}", headers=bearer(keycloak.token(KEYCLOAK_KEYS[2], ADMIN)))

        assert seen.status_code == 200, seen.text
        assert other.status_code == 200  # the administrator
        listed = await at_keycloak.get("/v1/pets", headers=bearer(keycloak.token(KEYCLOAK_KEYS[0], member)))
        assert [found["id"] for found in listed.json()["items"]] == [pet["id"]]

    async def test_a_front_desk_registers_a_patient_records_a_dose_and_lists_what_is_due(
        self, at_keycloak: Client, keycloak: Keycloak
    ) -> None:
        """A clinic's front desk with a realm's default tokens and nothing else (contract sections 5 and 14): the
        clinic's own patient, its dose, and the clinic's due list, which a second member of the group sees too."""
        desk = bearer(keycloak.token(KEYCLOAK_KEYS[0], VET))
        colleague = bearer(keycloak.token(KEYCLOAK_KEYS[1], Person("carl@clinic.example", "carl", groups=VET.groups)))
        stranger = bearer(keycloak.token(KEYCLOAK_KEYS[2], OWNER))
        vaccine = await at_keycloak.post(
            "/v1/vaccines",
            json={"name": "Rabies 1-year", "group": "Rabies", "petType": "Dog", "duration": 365},
            headers=bearer(keycloak.token(KEYCLOAK_KEYS[0], ADMIN)),
        )
        assert vaccine.status_code == 201, vaccine.text

        pet = await at_keycloak.post("/v1/pets", json=pet_body(ownerId="group:clinic-42"), headers=desk)
        assert pet.status_code == 201, pet.text
        dose = await at_keycloak.post(
            "/v1/pet-vaccination",
            json={
                "petId": pet.json()["id"],
                "vaccineId": vaccine.json()["id"],
                "appliedAt": "2024-01-10T09:00:00Z",
                "lotNumber": "RB-2231",
                "veterinarian": "Vera Example",
            },
            headers=desk,
        )
        assert dose.status_code == 201, dose.text
        assert dose.json()["ownerId"] == "group:clinic-42"

        for caller in (desk, colleague):
            due = await at_keycloak.get("/v1/due", params={"ownerId": "group:clinic-42"}, headers=caller)
            assert due.status_code == 200, due.text
            assert [(item["petId"], item["vaccinationId"], item["group"]) for item in due.json()["items"]] == [
                (pet.json()["id"], dose.json()["id"], "Rabies")
            ]
        assert (await at_keycloak.get("/v1/due", headers=stranger)).json()["totalCount"] == 0
        assert (await at_keycloak.get(f"/v1/pets/{pet.json()['id']}", headers=stranger)).status_code == 404

    async def test_an_audience_mapper_adds_the_service(self, at_keycloak: Client, keycloak: Keycloak) -> None:
        token = keycloak.token(KEYCLOAK_KEYS[0], OWNER, audience=["pet-records", "account"])

        assert (await at_keycloak.get("/v1/pets", headers=bearer(token))).status_code == 200

    async def test_an_issuer_written_with_a_slash_is_named_in_the_log(
        self, at_keycloak: Client, keycloak: Keycloak, logged: pytest.LogCaptureFixture
    ) -> None:
        claims = keycloak.claims(OWNER)
        claims["iss"] += "/"

        response = await at_keycloak.get("/v1/pets", headers=bearer(KEYCLOAK_KEYS[0].sign(claims)))

        assert_error(response, 401, 997)
        assert refusal(logged)["detail"] == f'expected "{keycloak.issuer}", found "{keycloak.issuer}/"'

    async def test_a_client_without_the_email_scope(
        self, at_keycloak: Client, keycloak: Keycloak, logged: pytest.LogCaptureFixture
    ) -> None:
        claims = keycloak.claims(OWNER)
        del claims["email"], claims["email_verified"]

        response = await at_keycloak.get("/v1/pets", headers=bearer(KEYCLOAK_KEYS[0].sign(claims)))

        assert_error(response, 401, 997)
        assert refusal(logged)["detail"] == "'email' (PETRECORDS_AUTH_USER_CLAIM) is missing"


# --- Auth0 -----------------------------------------------------------------------------------------


class TestAuth0:
    @pytest.fixture
    def auth0(self, at: dict[str, Served]) -> Auth0:
        shape: Auth0 = at["Auth0"].shape
        return shape

    @pytest.fixture
    def at_auth0(self, at: dict[str, Served]) -> Client:
        return at["Auth0"].client

    async def test_namespaced_claims_name_the_caller_the_roles_and_the_groups(
        self, at_auth0: Client, auth0: Auth0
    ) -> None:
        vet = Person("vera@clinic.example", "vera", groups=("clinic-42",))
        owner = auth0.token(AUTH0_KEY, OWNER)
        given = await at_auth0.post(
            "/v1/pets", json=pet_body(ownerId=OWNER.email), headers=bearer(auth0.token(AUTH0_KEY, ADMIN))
        )
        await share_with(at_auth0, owner, given.json(), "group:clinic-42")

        seen = await at_auth0.get(given.headers["location"], headers=bearer(auth0.token(AUTH0_KEY, vet)))

        assert given.status_code == 201, given.text
        assert given.json()["createdBy"] == ADMIN.email
        assert seen.status_code == 200

    async def test_a_token_for_another_api_is_named_in_the_log(
        self, at_auth0: Client, auth0: Auth0, logged: pytest.LogCaptureFixture
    ) -> None:
        claims = auth0.claims(OWNER)
        claims["aud"] = ["https://billing.clinic.example", claims["aud"][1]]

        response = await at_auth0.get("/v1/pets", headers=bearer(AUTH0_KEY.sign(claims)))

        assert_error(response, 401, 997)
        assert refusal(logged)["detail"] == (
            f'expected "{auth0.api}", found ["https://billing.clinic.example","{auth0.issuer}userinfo"]'
        )


# --- Microsoft Entra ID ----------------------------------------------------------------------------


class TestEntraId:
    @pytest.fixture
    def entra(self, at: dict[str, Served]) -> Entra:
        shape: Entra = at["Entra ID"].shape
        return shape

    @pytest.fixture
    def at_entra(self, at: dict[str, Served]) -> Client:
        return at["Entra ID"].client

    async def test_app_roles_and_groups_by_object_id(self, at_entra: Client, entra: Entra) -> None:
        admin = Person("root@clinic.example", "root", roles=("PetRecords.Admin",))
        given = await at_entra.post(
            "/v1/pets", json=pet_body(ownerId=OWNER.email), headers=bearer(entra.token(ENTRA_KEY, admin))
        )
        (clinic,) = entra.group_ids(VET)
        await share_with(at_entra, entra.token(ENTRA_KEY, OWNER), given.json(), f"group:{clinic}")

        seen = await at_entra.get(given.headers["location"], headers=bearer(entra.token(ENTRA_KEY, VET)))

        assert given.status_code == 201, given.text
        assert seen.status_code == 200

    async def test_without_the_optional_email_claim_the_log_names_those_that_hold_one(
        self, at_entra: Client, entra: Entra, logged: pytest.LogCaptureFixture
    ) -> None:
        response = await at_entra.get("/v1/pets", headers=bearer(entra.token(ENTRA_KEY, OWNER, email=False)))

        assert_error(response, 401, 997)
        assert refusal(logged)["detail"] == (
            "'email' (PETRECORDS_AUTH_USER_CLAIM) is missing; claims that hold an e-mail address: preferred_username"
        )

    async def test_a_v1_token_is_named_by_its_issuer(
        self, at_entra: Client, entra: Entra, logged: pytest.LogCaptureFixture
    ) -> None:
        claims = entra.claims(OWNER)
        claims.update(iss=f"https://sts.windows.net/{entra.TENANT}/", ver="1.0")

        response = await at_entra.get("/v1/pets", headers=bearer(ENTRA_KEY.sign(claims)))

        assert_error(response, 401, 997)
        assert refusal(logged)["reason"] == "issuer"


# --- key rotation while requests run ---------------------------------------------------------------

COOLDOWN_SECONDS = 0.3
"""The unknown-kid cooldown of the rotations' apps: a new kid is fetched at most this long after the last fetch."""
CACHE_SECONDS = 1
"""How long they use fetched keys: a key that left the set is refused at most this long (and a cooldown) later."""


ROTATING_KEYS = {provider: (rsa_key(f"{provider}-old"), rsa_key(f"{provider}-new")) for provider in PROVIDERS}
MADE_UP_KEY = rsa_key("made-up")


class Traffic:
    """Clients that ask for their pets again and again, each with a token of the key the provider signs with at the
    time they got it, noting each answer's status, the kid and when."""

    def __init__(self, client: Client, token_of: Callable[[SigningKey], str]) -> None:
        self.client = client
        self.token_of = token_of
        self.signing: SigningKey | None = None
        self.answers: list[tuple[float, str, int]] = []
        self._stop = asyncio.Event()

    async def _ask(self) -> None:
        while not self._stop.is_set():
            key = self.signing
            assert key is not None
            response = await self.client.get("/v1/pets", headers=bearer(self.token_of(key)))
            self.answers.append((time.monotonic(), key.kid, response.status_code))
            await asyncio.sleep(0.005)

    @contextlib.asynccontextmanager
    async def running(self, clients: int = 2) -> AsyncIterator[None]:
        tasks = [asyncio.create_task(self._ask()) for _ in range(clients)]
        try:
            yield
        finally:
            self._stop.set()
            await asyncio.gather(*tasks)

    def statuses(self, kid: str, *, after: float = 0.0, before: float = float("inf")) -> set[int]:
        return {status for at, key, status in self.answers if key == kid and after <= at < before}


@pytest.mark.parametrize("provider", list(PROVIDERS))
async def test_a_new_key_while_requests_run(database_url: str, tmp_path: Any, provider: str) -> None:
    rotation = PROVIDERS[provider]
    old, new = ROTATING_KEYS[provider]
    with jwks_server([old]) as server:
        shape = rotation.shape(server)
        values = {
            **rotation.settings(shape),
            "auth_jwks_refresh_cooldown_seconds": COOLDOWN_SECONDS,
            "auth_jwks_cache_seconds": CACHE_SECONDS,
        }
        async with provider_app(database_url, tmp_path, **values) as client:
            traffic = Traffic(client, lambda key: shape.token(key, ADMIN))
            traffic.signing = old
            async with traffic.running():
                await asyncio.sleep(0.3)
                if rotation.published_first:
                    server.keys = [old, new]
                    await asyncio.sleep(CACHE_SECONDS + 0.2)  # every instance has it before it signs with it
                    switched = time.monotonic()
                    traffic.signing = new
                else:
                    switched = time.monotonic()
                    server.keys = [old, new]
                    traffic.signing = new
                await asyncio.sleep(COOLDOWN_SECONDS + 0.3)
                server.keys = [new]
                retired = time.monotonic()
                old_token = shape.token(old, ADMIN)
                # A made-up kid, once the cooldown has passed, has the key set fetched again, without the old key.
                await asyncio.sleep(COOLDOWN_SECONDS + 0.05)
                await client.get("/v1/pets", headers=bearer(shape.token(MADE_UP_KEY, ADMIN)))
                after_retirement = await client.get("/v1/pets", headers=bearer(old_token))

    assert {status for _, _, status in traffic.answers} <= {200, 401}
    assert traffic.statuses(old.kid) == {200}  # while the provider published it
    if rotation.published_first:
        assert traffic.statuses(new.kid) == {200}
    else:
        # Signed with before anyone fetched it: refused until the next fetch, at most a cooldown later.
        assert traffic.statuses(new.kid, after=switched + COOLDOWN_SECONDS + 0.2) == {200}
    assert traffic.statuses(new.kid, after=retired) == {200}
    assert_error(after_retirement, 401, 997)
