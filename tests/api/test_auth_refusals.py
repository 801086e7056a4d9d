"""Why a token was refused (contract section 5): never told to its sender, who gets `401`/`997` and the same
message whatever the reason, and always to the operator, in one INFO line per refused token naming the reason and
the request, never the token. A flood of made-up tokens costs the log a bounded number of lines and the identity
provider a bounded number of fetches."""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import jwt
import pytest
from litestar.testing import AsyncTestClient

from petrecords.app import create_app
from petrecords.config import Settings
from tests.conftest import test_settings as settings_of
from tests.servers.jwks_server import AUDIENCE, ISSUER, JwksServer, claims, ec_key, jwks_server, rsa_key
from tests.support import SECRET, assert_error, token, wipe

# Why a token was refused and what the log says: decided before any database is asked.
pytestmark = pytest.mark.only_on("sqlite")

Client = AsyncTestClient[Any]
REFUSED = "All connection attempts failed"
NOT_VALID = {"code": 997, "message": "The bearer token is not valid."}
RSA = rsa_key("rsa-1")
EC = ec_key("ec-1")


def bearer(presented: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {presented}"}


def refusal_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [line for line in caplog.records if line.name == "petrecords.auth" and line.levelno == logging.INFO]


@pytest.fixture
def logged(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="petrecords.auth")
    return caplog


async def refused(client: Client, presented: str, logged: pytest.LogCaptureFixture) -> dict[str, Any]:
    """Ask with the token: it must be refused as any invalid token is, and logged once with the request's id, naming
    the reason and never the token. The line's fields."""
    logged.clear()
    response = await client.get("/v1/pets", headers=bearer(presented))

    assert_error(response, 401, 997)
    assert response.json() == NOT_VALID
    assert response.headers["www-authenticate"] == 'Bearer error="invalid_token"'
    lines = refusal_lines(logged)
    assert len(lines) == 1, [line.getMessage() for line in lines]
    fields: dict[str, Any] = getattr(lines[0], "fields", {})
    assert fields["request_id"] == response.headers["x-request-id"]
    everything = " ".join(f"{record.getMessage()} {getattr(record, 'fields', '')}" for record in logged.records)
    assert not any(part in everything for part in presented.split(".") if len(part) > 8)
    return fields


class TestLocalTokens:
    @pytest.mark.parametrize(
        ("presented", "reason", "named"),
        [
            (token(exp=int(time.time()) - 120), "expired", "it expired at "),
            (token(secret="another-secret-of-another-service-0123456789"), "signature", "does not verify"),
            (token("not-an-email", email="alice@example.com"), "claim", "'sub' (PETRECORDS_AUTH_USER_CLAIM)"),
            (token(sub=None), "claim", "'sub' (PETRECORDS_AUTH_USER_CLAIM) is missing"),
            (token(roles="admin"), "claim", "'roles' (PETRECORDS_AUTH_ROLES_CLAIM) is not a list"),
            (token(groups=["/clinic 42"]), "claim", "'groups' (PETRECORDS_AUTH_GROUPS_CLAIM) lists \"/clinic 42\""),
            (token(ttl=86400 * 30), "lifetime", "PETRECORDS_AUTH_MAX_TOKEN_LIFETIME_SECONDS"),
            (jwt.encode({"sub": "alice@example.com", "exp": 2**40}, None, algorithm="none"), "algorithm", "none"),
            ("bm90IGEgaGVhZGVy.bm90IGEgcGF5bG9hZA.c2lnbmF0dXJl", "malformed", "header"),
        ],
        ids=["expired", "signature", "no e-mail", "no caller", "roles", "group", "lifetime", "alg none", "garbage"],
    )
    async def test_each_reason_is_logged_and_none_is_told(
        self, client: Client, logged: pytest.LogCaptureFixture, presented: str, reason: str, named: str
    ) -> None:
        fields = await refused(client, presented, logged)

        assert fields["reason"] == reason
        assert named in fields["detail"]

    async def test_a_valid_token_logs_nothing(self, client: Client, logged: pytest.LogCaptureFixture) -> None:
        response = await client.get("/v1/pets", headers=bearer(token()))

        assert response.status_code == 200
        assert refusal_lines(logged) == []

    async def test_a_flood_of_forged_tokens_costs_a_bounded_number_of_lines(
        self, make_client: Callable[[Settings], Client], make_settings: Callable[..., Settings], logged: Any
    ) -> None:
        async with make_client(make_settings()) as client:
            started = time.monotonic()
            for number in range(120):
                forged = token(secret=f"a-secret-made-up-by-an-attacker-{number:04d}")
                assert (await client.get("/v1/pets", headers=bearer(forged))).status_code == 401
            # The burst, and a line more for each 1.2 s the flood took; the rest are counted for the summary.
            assert 50 <= len(refusal_lines(logged)) <= 50 + math.ceil((time.monotonic() - started) / 1.2)
            # Another reason still has lines of its own.
            await refused(client, token(roles="admin"), logged)


@pytest.fixture(scope="module")
def provider() -> Iterator[JwksServer]:
    with jwks_server([RSA, EC]) as server:
        yield server


def idp_settings(provider: JwksServer) -> dict[str, Any]:
    return {
        "auth_mode": "jwks",
        "auth_jwks_url": provider.url,
        "auth_issuer": ISSUER,
        "auth_audience": AUDIENCE,
        "auth_user_claim": "email",
        "auth_secret": None,
    }


@pytest.fixture(scope="module")
async def idp_app(
    database_url: str, tmp_path_factory: pytest.TempPathFactory, provider: JwksServer
) -> AsyncIterator[Client]:
    settings = settings_of(database_url, tmp_path_factory.mktemp("data"), **idp_settings(provider))
    async with AsyncTestClient(app=create_app(settings)) as started:  # type: ignore[arg-type]
        yield started


@pytest.fixture
async def idp_client(database_url: str, idp_app: Client) -> Client:
    await wipe(database_url)
    return idp_app


def idp_claims(**overrides: Any) -> dict[str, Any]:
    return claims("subject-0001", email="alice@example.com", **overrides)


class TestProviderTokens:
    """The issue's cases: a wrong issuer (a trailing slash), Keycloak's default audience, a token without the e-mail
    claim, an HS256 token in identity-provider mode: each answered as any invalid token and logged with its reason."""

    async def test_an_issuer_with_a_trailing_slash_says_what_was_expected_and_found(
        self, idp_client: Client, logged: pytest.LogCaptureFixture
    ) -> None:
        fields = await refused(idp_client, RSA.sign(idp_claims(iss=ISSUER.rstrip("/"))), logged)

        assert fields["reason"] == "issuer"
        assert fields["detail"] == f'expected "{ISSUER}", found "{ISSUER.rstrip("/")}"'

    async def test_the_default_audience_of_keycloak(self, idp_client: Client, logged: pytest.LogCaptureFixture) -> None:
        fields = await refused(idp_client, RSA.sign(idp_claims(aud="account")), logged)

        assert (fields["reason"], fields["detail"]) == ("audience", f'expected "{AUDIENCE}", found "account"')

    async def test_a_list_of_audiences(self, idp_client: Client, logged: pytest.LogCaptureFixture) -> None:
        fields = await refused(idp_client, EC.sign(idp_claims(aud=["account", "broker"])), logged)

        assert fields["detail"] == f'expected "{AUDIENCE}", found ["account","broker"]'

    async def test_no_e_mail_claim(self, idp_client: Client, logged: pytest.LogCaptureFixture) -> None:
        fields = await refused(idp_client, RSA.sign(claims("subject-0001")), logged)

        assert (fields["reason"], fields["detail"]) == ("claim", "'email' (PETRECORDS_AUTH_USER_CLAIM) is missing")

    async def test_hs256_in_identity_provider_mode(self, idp_client: Client, logged: pytest.LogCaptureFixture) -> None:
        fields = await refused(idp_client, jwt.encode(idp_claims(), SECRET, headers={"kid": RSA.kid}), logged)

        assert (fields["reason"], fields["detail"]) == (
            "algorithm",
            '"HS256" is not allowed; allowed: RS256, ES256, EdDSA',
        )

    async def test_an_unknown_kid_names_the_known_ones(
        self, idp_client: Client, logged: pytest.LogCaptureFixture, provider: JwksServer
    ) -> None:
        fields = await refused(idp_client, rsa_key("rotated-away").sign(idp_claims()), logged)

        assert fields["reason"] == "kid"
        assert (
            fields["detail"]
            == f'the key set of {provider.url} has no key of the kid "rotated-away" (its kids: "ec-1", "rsa-1")'
        )

    async def test_a_key_that_does_not_fit_the_algorithm(
        self, idp_client: Client, logged: pytest.LogCaptureFixture
    ) -> None:
        forged = jwt.encode(idp_claims(), EC.private, algorithm="ES256", headers={"kid": RSA.kid})

        fields = await refused(idp_client, forged, logged)

        assert (fields["reason"], fields["detail"]) == (
            "algorithm",
            'the token says ES256, its key "rsa-1" is for "RS256"',
        )

    async def test_a_signature_by_another_key_of_the_same_kid(
        self, idp_client: Client, logged: pytest.LogCaptureFixture
    ) -> None:
        fields = await refused(idp_client, rsa_key(RSA.kid).sign(idp_claims()), logged)

        assert fields["reason"] == "signature"

    async def test_a_valid_token_of_the_provider(self, idp_client: Client) -> None:
        response = await idp_client.get("/v1/pets", headers=bearer(RSA.sign(idp_claims())))

        assert response.status_code == 200, response.text

    async def test_a_flood_of_made_up_kids_costs_one_fetch_and_a_bounded_log(
        self,
        make_client: Callable[[Settings], Client],
        make_settings: Callable[..., Settings],
        provider: JwksServer,
        logged: pytest.LogCaptureFixture,
    ) -> None:
        async with make_client(make_settings(**idp_settings(provider))) as client:
            assert (await client.get("/v1/pets", headers=bearer(RSA.sign(idp_claims())))).status_code == 200
            fetches = provider.fetches
            started = time.monotonic()
            forger = rsa_key("forger")
            for _ in range(80):
                forger.kid = uuid.uuid4().hex
                assert (await client.get("/v1/pets", headers=bearer(forger.sign(idp_claims())))).status_code == 401

        assert provider.fetches - fetches <= 1
        assert 50 <= len(refusal_lines(logged)) <= 50 + math.ceil((time.monotonic() - started) / 1.2)


class TestBeforeAnyKeySet:
    async def test_a_provider_that_never_answered_is_named(
        self, make_client: Callable[[Settings], Client], make_settings: Callable[..., Settings], logged: Any
    ) -> None:
        settings = make_settings(
            auth_mode="jwks",
            auth_jwks_url="http://127.0.0.1:9/jwks.json",
            auth_issuer=ISSUER,
            auth_audience=AUDIENCE,
            auth_jwks_timeout_seconds=1,
            auth_secret=None,
        )
        async with make_client(settings) as client:
            fields = await refused(client, RSA.sign(claims()), logged)

        assert fields["reason"] == "kid"
        assert (
            fields["detail"]
            == 'no key set was fetched yet from http://127.0.0.1:9/jwks.json, to find the kid "rsa-1" in'
        )
        warnings = [line.getMessage() for line in logged.records if line.levelno == logging.WARNING]
        assert warnings == ["could not fetch the key set from http://127.0.0.1:9/jwks.json: ConnectError: " + REFUSED]
