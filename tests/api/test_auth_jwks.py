"""Identity-provider mode (contract section 5): tokens verified against a JWKS with a pinned issuer and audience."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from litestar.testing import AsyncTestClient
from pydantic import ValidationError

from petrecords.config import Settings
from tests.servers.jwks_server import (
    AUDIENCE,
    ISSUER,
    JwksServer,
    SigningKey,
    claims,
    ec_key,
    ed_key,
    jwks_server,
    rsa_key,
)

# Verifying a token against a key set asks no database: the same on both.
pytestmark = pytest.mark.only_on("sqlite")

Client = AsyncTestClient[Any]
RSA = rsa_key("rsa-1")
EC = ec_key("ec-1")
ED = ed_key("ed-1")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@pytest.fixture
def provider() -> Iterator[JwksServer]:
    with jwks_server([RSA, EC, ED]) as server:
        yield server


@pytest.fixture
def jwks_settings(make_settings: Callable[..., Settings], provider: JwksServer) -> Callable[..., Settings]:
    def make(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "auth_mode": "jwks",
            "auth_jwks_url": provider.url,
            "auth_issuer": ISSUER,
            "auth_audience": AUDIENCE,
            "auth_secret": None,
        }
        values.update(overrides)
        return make_settings(**values)

    return make


@pytest.fixture
async def idp_client(
    make_client: Callable[[Settings], Client], jwks_settings: Callable[..., Settings]
) -> AsyncIterator[Client]:
    async with make_client(jwks_settings()) as client:
        yield client


async def assert_rejected(client: Client, token: str) -> None:
    response = await client.get("/v1/pets", headers=bearer(token))
    assert response.status_code == 401, response.text
    assert response.json()["code"] == 997
    assert 'error="invalid_token"' in response.headers["www-authenticate"]


class TestValidTokens:
    @pytest.mark.parametrize("key", [RSA, EC, ED], ids=["RS256", "ES256", "EdDSA"])
    async def test_each_asymmetric_algorithm_is_accepted(self, idp_client: Client, key: SigningKey) -> None:
        response = await idp_client.post(
            "/v1/pets", json={"name": "Rex", "petType": "Dog"}, headers=bearer(key.sign(claims("Alice@Example.com")))
        )

        assert response.status_code == 201, response.text
        assert response.json()["ownerId"] == "alice@example.com"

    async def test_admin_role_comes_from_the_roles_claim(self, idp_client: Client) -> None:
        admin = RSA.sign(claims("root@example.com", roles=["admin"]))

        response = await idp_client.post(
            "/v1/pets", json={"name": "Rex", "petType": "Dog", "ownerId": "bob@example.com"}, headers=bearer(admin)
        )

        assert response.status_code == 201

    async def test_other_claims_can_name_the_caller_and_roles(
        self, make_client: Callable[[Settings], Client], jwks_settings: Callable[..., Settings]
    ) -> None:
        settings = jwks_settings(auth_user_claim="email", auth_roles_claim="groups")
        token = RSA.sign(claims("opaque-subject-42", email="Carol@Example.com", groups=["admin"]))
        async with make_client(settings) as client:
            response = await client.post(
                "/v1/pets", json={"name": "Rex", "petType": "Dog", "ownerId": "dan@example.com"}, headers=bearer(token)
            )

        assert response.status_code == 201, response.text
        assert response.json()["createdBy"] == "carol@example.com"


class TestRejectedTokens:
    async def test_alg_none(self, idp_client: Client) -> None:
        header = b64(json.dumps({"alg": "none", "typ": "JWT", "kid": RSA.kid}).encode())
        await assert_rejected(idp_client, f"{header}.{b64(json.dumps(claims()).encode())}.")

    async def test_hmac_signed_with_the_public_key(self, idp_client: Client) -> None:
        public_pem = RSA.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        header = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": RSA.kid}).encode())
        payload = b64(json.dumps(claims()).encode())
        signature = b64(hmac.new(public_pem, f"{header}.{payload}".encode(), hashlib.sha256).digest())
        await assert_rejected(idp_client, f"{header}.{payload}.{signature}")

    @pytest.mark.parametrize(
        "issuer",
        [
            "https://id.example.com",
            "https://id.example.com/x",
            "https://id.example.com.evil/",
            "http://id.example.com/",
            "https://evil.example/https://id.example.com/",
        ],
    )
    async def test_wrong_issuer(self, idp_client: Client, issuer: str) -> None:
        await assert_rejected(idp_client, RSA.sign(claims(iss=issuer)))

    @pytest.mark.parametrize("audience", ["pet-records-admin", "pet", "other", ["other"]])
    async def test_wrong_audience(self, idp_client: Client, audience: Any) -> None:
        await assert_rejected(idp_client, RSA.sign(claims(aud=audience)))

    async def test_expired_beyond_the_allowance(self, idp_client: Client) -> None:
        await assert_rejected(idp_client, RSA.sign(claims(exp=int(time.time()) - 120)))

    async def test_not_yet_valid(self, idp_client: Client) -> None:
        await assert_rejected(idp_client, RSA.sign(claims(nbf=int(time.time()) + 600)))

    @pytest.mark.parametrize("missing", ["exp", "iss", "aud", "sub"])
    async def test_missing_claim(self, idp_client: Client, missing: str) -> None:
        await assert_rejected(idp_client, RSA.sign(claims(**{missing: None})))

    async def test_caller_not_an_email(self, idp_client: Client) -> None:
        await assert_rejected(idp_client, RSA.sign(claims("not-an-email")))

    async def test_unknown_critical_header(self, idp_client: Client) -> None:
        await assert_rejected(idp_client, RSA.sign(claims(), crit=["exp-ext"], **{"exp-ext": 1}))

    async def test_signature_by_a_key_not_in_the_set(self, idp_client: Client) -> None:
        stranger = rsa_key(RSA.kid)  # same kid, other key
        await assert_rejected(idp_client, stranger.sign(claims()))

    async def test_algorithm_that_does_not_fit_the_key(self, idp_client: Client) -> None:
        # An ES256 token naming the RSA key's kid.
        token = jwt.encode(claims(), EC.private, algorithm="ES256", headers={"kid": RSA.kid})
        await assert_rejected(idp_client, token)


class TestKeysNamedByTheToken:
    @pytest.mark.parametrize("header", ["jku", "x5u"])
    async def test_key_urls_in_the_token_are_never_fetched(self, idp_client: Client, header: str) -> None:
        attacker_key = rsa_key("attacker")
        with jwks_server([attacker_key]) as attacker:
            token = attacker_key.sign(claims(), **{header: attacker.url})
            await assert_rejected(idp_client, token)
            assert attacker.fetches == 0

    async def test_embedded_jwk_is_not_trusted(self, idp_client: Client) -> None:
        attacker_key = rsa_key("attacker")
        await assert_rejected(idp_client, attacker_key.sign(claims(), jwk=attacker_key.public_jwk))


class TestKeyCache:
    async def test_random_kids_cause_no_flood_of_fetches(self, idp_client: Client, provider: JwksServer) -> None:
        assert (await idp_client.get("/v1/pets", headers=bearer(RSA.sign(claims())))).status_code == 200
        before = provider.fetches

        forged = rsa_key("forged")  # one key (an RSA key takes a tenth of a second to make), a new kid each time
        for _ in range(25):
            await assert_rejected(idp_client, forged.sign(claims(), kid=uuid.uuid4().hex))

        assert provider.fetches - before <= 1

    async def test_rotated_key_is_picked_up_without_restart(
        self, make_client: Callable[[Settings], Client], jwks_settings: Callable[..., Settings], provider: JwksServer
    ) -> None:
        async with make_client(jwks_settings(auth_jwks_refresh_cooldown_seconds=0)) as client:
            assert (await client.get("/v1/pets", headers=bearer(RSA.sign(claims())))).status_code == 200
            rotated = rsa_key("rsa-2")
            provider.keys = [rotated]

            response = await client.get("/v1/pets", headers=bearer(rotated.sign(claims())))

        assert response.status_code == 200

    async def test_a_token_whose_key_left_the_set_is_refused_though_it_verified_before(
        self, make_client: Callable[[Settings], Client], jwks_settings: Callable[..., Settings], provider: JwksServer
    ) -> None:
        async with make_client(jwks_settings(auth_jwks_refresh_cooldown_seconds=0)) as client:
            before = RSA.sign(claims())
            assert (await client.get("/v1/pets", headers=bearer(before))).status_code == 200
            rotated = rsa_key("rsa-2")
            provider.keys = [rotated]
            assert (await client.get("/v1/pets", headers=bearer(rotated.sign(claims())))).status_code == 200

            response = await client.get("/v1/pets", headers=bearer(before))

        assert response.status_code == 401

    async def test_cached_keys_keep_working_while_the_provider_is_down(
        self, make_client: Callable[[Settings], Client], jwks_settings: Callable[..., Settings], provider: JwksServer
    ) -> None:
        settings = jwks_settings(auth_jwks_cache_seconds=1, auth_jwks_refresh_cooldown_seconds=0)
        async with make_client(settings) as client:
            assert (await client.get("/v1/pets", headers=bearer(EC.sign(claims())))).status_code == 200
            provider.down = True
            fetches = provider.fetches
            await asyncio.sleep(1.1)  # the cache is now stale, and the refresh fails

            response = await client.get("/v1/pets", headers=bearer(EC.sign(claims())))

        assert provider.fetches > fetches
        assert response.status_code == 200

    async def test_unreachable_provider_before_any_key_is_401_not_500(
        self, make_client: Callable[[Settings], Client], jwks_settings: Callable[..., Settings]
    ) -> None:
        settings = jwks_settings(auth_jwks_url="http://127.0.0.1:9/jwks.json", auth_jwks_timeout_seconds=1)
        async with make_client(settings) as client:
            await assert_rejected(client, RSA.sign(claims()))


class TestSettings:
    def test_fetch_timeout_is_at_most_5_seconds(self) -> None:
        with pytest.raises(ValidationError):
            Settings(auth_jwks_timeout_seconds=6)

    def test_symmetric_algorithms_are_refused_in_jwks_mode(
        self, jwks_settings: Callable[..., Settings], make_client: Callable[[Settings], Client]
    ) -> None:
        with pytest.raises(ValueError, match="asymmetric"):
            make_client(jwks_settings(auth_algorithms=("RS256", "HS256")))


NO_KEY_SET_YET = {
    "code": 986,
    "message": "Not ready: no key set was fetched yet from the identity provider (PETRECORDS_AUTH_JWKS_URL).",
}


class TestReadiness:
    """In identity-provider mode /readyz is 503/986 while no key set was ever fetched: an instance that can verify no
    token gets no requests from the load balancer."""

    async def test_not_ready_until_the_provider_answers(
        self, make_client: Callable[[Settings], Client], jwks_settings: Callable[..., Settings], provider: JwksServer
    ) -> None:
        provider.down = True
        async with make_client(jwks_settings(auth_jwks_refresh_cooldown_seconds=0)) as client:
            before = await client.get("/readyz")
            provider.down = False
            after = await client.get("/readyz")
            health = await client.get("/health")

        assert before.status_code == 503
        assert before.json() == NO_KEY_SET_YET
        assert after.status_code == 200, after.text
        assert health.status_code == 200

    async def test_ready_at_once_when_the_provider_answers(
        self, make_client: Callable[[Settings], Client], jwks_settings: Callable[..., Settings], provider: JwksServer
    ) -> None:
        async with make_client(jwks_settings()) as client:
            ready = await client.get("/readyz")
            again = await client.get("/readyz")
            fetches = provider.fetches
            response = await client.get("/v1/pets", headers=bearer(ED.sign(claims())))

        assert (ready.status_code, again.status_code) == (200, 200)
        assert fetches == 1
        assert response.status_code == 200
        assert provider.fetches == 1

    async def test_checks_fetch_at_most_once_per_cooldown(
        self, make_client: Callable[[Settings], Client], jwks_settings: Callable[..., Settings], provider: JwksServer
    ) -> None:
        provider.down = True
        async with make_client(jwks_settings()) as client:
            answers = [(await client.get("/readyz")).status_code for _ in range(10)]

        assert answers == [503] * 10
        assert provider.fetches == 1

    async def test_a_key_set_without_a_usable_key(
        self, make_client: Callable[[Settings], Client], jwks_settings: Callable[..., Settings], provider: JwksServer
    ) -> None:
        provider.keys = [ED]
        async with make_client(jwks_settings(auth_algorithms=("RS256",))) as client:
            response = await client.get("/readyz")

        assert response.status_code == 503
        assert response.json() == {
            "code": 986,
            "message": "Not ready: the identity provider's key set (PETRECORDS_AUTH_JWKS_URL) has no key for "
            "PETRECORDS_AUTH_ALGORITHMS.",
        }
