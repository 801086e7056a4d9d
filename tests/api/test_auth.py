"""Bearer tokens, callers and what they may see (contract section 5)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import jwt
import pytest
from litestar.testing import AsyncTestClient

from petrecords.config import Settings
from tests.support import ADMIN, ALICE, BOB, SECRET, auth, pet_body, token

Client = AsyncTestClient[Any]
MakeClient = Callable[[Settings], AsyncTestClient[Any]]
OTHER_SECRET = "another-secret-that-the-service-does-not-know-0123"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _claims(user: str = ALICE, **extra: Any) -> dict[str, Any]:
    now = int(time.time())
    return {"sub": user, "roles": [], "iat": now, "exp": now + 600, **extra}


def _unsigned_token(claims: dict[str, Any]) -> str:
    """`alg: none`, built by hand: header and payload, then an empty signature."""
    header = _b64url(json.dumps({"alg": "none", "typ": "JWT"}).encode())
    payload = _b64url(json.dumps(claims).encode())
    return f"{header}.{payload}."


def _hmac_token(claims: dict[str, Any], algorithm: str, secret: str = SECRET) -> str:
    """Signed by hand: PyJWT warns (an error here) about the test secret's length for SHA-384/512."""
    digest = {"HS256": hashlib.sha256, "HS384": hashlib.sha384, "HS512": hashlib.sha512}[algorithm]
    header = _b64url(json.dumps({"alg": algorithm, "typ": "JWT"}).encode())
    payload = _b64url(json.dumps(claims).encode())
    signature = hmac.new(secret.encode(), f"{header}.{payload}".encode(), digest).digest()
    return f"{header}.{payload}.{_b64url(signature)}"


def _bearer(value: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {value}"}


def _assert_invalid_token(response: Any) -> None:
    assert response.status_code == 401
    assert response.json() == {"code": 997, "message": response.json()["message"]}
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith("Bearer")
    assert 'error="invalid_token"' in challenge


class TestMissingToken:
    async def test_no_authorization_header_is_401_with_plain_challenge(self, client: Client) -> None:
        response = await client.get("/v1/pets")

        assert response.status_code == 401
        assert response.json() == {"code": 997, "message": response.json()["message"]}
        assert response.headers["www-authenticate"] == "Bearer"

    @pytest.mark.parametrize(
        ("method", "path"),
        [
            ("POST", "/v1/pets"),
            ("GET", "/v1/pets/018f2a4e-1b2c-7d3e-8f40-5a6b7c8d9e0f"),
            ("PUT", "/v1/pets/018f2a4e-1b2c-7d3e-8f40-5a6b7c8d9e0f"),
            ("DELETE", "/v1/pets/018f2a4e-1b2c-7d3e-8f40-5a6b7c8d9e0f"),
        ],
    )
    async def test_every_pet_operation_needs_a_token(self, client: Client, method: str, path: str) -> None:
        body = pet_body() if method in {"POST", "PUT"} else None

        response = await client.request(method, path, json=body)

        assert response.status_code == 401
        assert response.json()["code"] == 997
        assert "error=" not in response.headers["www-authenticate"]


class TestValidToken:
    @pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER"])
    async def test_scheme_is_case_insensitive(self, client: Client, scheme: str) -> None:
        response = await client.get("/v1/pets", headers={"Authorization": f"{scheme} {token()}"})

        assert response.status_code == 200

    async def test_token_from_the_support_helper_is_accepted(self, client: Client) -> None:
        response = await client.get("/v1/pets", headers=auth())

        assert response.status_code == 200
        assert "www-authenticate" not in response.headers


class TestInvalidToken:
    @pytest.mark.parametrize("value", ["Bearer", "Bearer ", "Token abc"])
    async def test_authorization_without_a_bearer_token_is_401(self, client: Client, value: str) -> None:
        response = await client.get("/v1/pets", headers={"Authorization": value})

        assert response.status_code == 401
        assert response.json() == {"code": 997, "message": response.json()["message"]}
        assert response.headers["www-authenticate"].startswith("Bearer")

    async def test_wrong_scheme_is_401(self, client: Client) -> None:
        basic = base64.b64encode(f"{ALICE}:password".encode()).decode()

        response = await client.get("/v1/pets", headers={"Authorization": f"Basic {basic}"})

        _assert_invalid_token(response)

    @pytest.mark.parametrize("garbage", ["garbage", "a.b.c", "....", "eyJhbGciOiJIUzI1NiJ9.e30"])
    async def test_garbage_is_401(self, client: Client, garbage: str) -> None:
        response = await client.get("/v1/pets", headers=_bearer(garbage))

        _assert_invalid_token(response)

    async def test_alg_none_is_401(self, client: Client) -> None:
        response = await client.get("/v1/pets", headers=_bearer(_unsigned_token(_claims())))

        _assert_invalid_token(response)

    async def test_alg_none_with_admin_role_is_401(self, client: Client) -> None:
        response = await client.get("/v1/pets", headers=_bearer(_unsigned_token(_claims(ADMIN, roles=["admin"]))))

        _assert_invalid_token(response)

    async def test_signature_with_another_secret_is_401(self, client: Client) -> None:
        response = await client.get("/v1/pets", headers=_bearer(token(secret=OTHER_SECRET)))

        _assert_invalid_token(response)

    async def test_tampered_payload_is_401(self, client: Client) -> None:
        header, _, signature = token().split(".")
        forged = _b64url(json.dumps(_claims(ADMIN, roles=["admin"])).encode())

        response = await client.get("/v1/pets", headers=_bearer(f"{header}.{forged}.{signature}"))

        _assert_invalid_token(response)

    async def test_hand_signed_hs256_is_accepted(self, client: Client) -> None:
        # The control for the test below: the hand-made signature itself is right.
        response = await client.get("/v1/pets", headers=_bearer(_hmac_token(_claims(), "HS256")))

        assert response.status_code == 200

    @pytest.mark.parametrize("algorithm", ["HS384", "HS512"])
    async def test_other_hmac_algorithm_with_the_right_secret_is_401(self, client: Client, algorithm: str) -> None:
        forged = _hmac_token(_claims(), algorithm)

        response = await client.get("/v1/pets", headers=_bearer(forged))

        _assert_invalid_token(response)

    async def test_expired_beyond_the_leeway_is_401(self, client: Client) -> None:
        expired = token(exp=int(time.time()) - 120)

        response = await client.get("/v1/pets", headers=_bearer(expired))

        _assert_invalid_token(response)

    async def test_expired_within_the_leeway_is_accepted(self, client: Client) -> None:
        just_expired = token(exp=int(time.time()) - 5)

        response = await client.get("/v1/pets", headers=_bearer(just_expired))

        assert response.status_code == 200

    async def test_missing_exp_is_401(self, client: Client) -> None:
        response = await client.get("/v1/pets", headers=_bearer(token(exp=None)))

        _assert_invalid_token(response)

    async def test_missing_sub_is_401(self, client: Client) -> None:
        response = await client.get("/v1/pets", headers=_bearer(token(sub=None)))

        _assert_invalid_token(response)

    @pytest.mark.parametrize("subject", ["alice", "alice@", "@example.com", "alice example@example.com", ""])
    async def test_sub_that_is_not_an_email_is_401(self, client: Client, subject: str) -> None:
        response = await client.get("/v1/pets", headers=_bearer(token(subject)))

        _assert_invalid_token(response)

    @pytest.mark.parametrize("subject", [42, ["alice@example.com"], {"email": "alice@example.com"}])
    async def test_sub_that_is_not_a_string_is_401(self, client: Client, subject: Any) -> None:
        response = await client.get("/v1/pets", headers=_bearer(token(sub=subject)))

        _assert_invalid_token(response)

    @pytest.mark.parametrize("roles", ["admin", {"admin": True}, 1])
    async def test_roles_that_are_not_a_list_is_401(self, client: Client, roles: Any) -> None:
        response = await client.get("/v1/pets", headers=_bearer(token(roles=roles)))

        _assert_invalid_token(response)

    async def test_not_yet_valid_beyond_the_leeway_is_401(self, client: Client) -> None:
        response = await client.get("/v1/pets", headers=_bearer(token(nbf=int(time.time()) + 120)))

        _assert_invalid_token(response)

    async def test_crit_header_is_401(self, client: Client) -> None:
        critical = jwt.encode(_claims(), SECRET, algorithm="HS256", headers={"crit": ["exp"]})

        response = await client.get("/v1/pets", headers=_bearer(critical))

        _assert_invalid_token(response)

    async def test_invalid_token_never_writes(self, client: Client) -> None:
        response = await client.post("/v1/pets", json=pet_body(), headers=_bearer(token(secret=OTHER_SECRET)))
        listed = await client.get("/v1/pets", headers=auth(ADMIN, admin=True))

        _assert_invalid_token(response)
        assert listed.json()["totalCount"] == 0


class _ConnectionCounter:
    """A listener on 127.0.0.1 that counts who connects to it (and answers nothing useful)."""

    def __init__(self) -> None:
        self.connections = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> _ConnectionCounter:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/keys"

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        writer.close()


class TestKeysNamedByTheToken:
    """`jku`, `x5u` and `jwk` headers are never fetched or trusted (contract section 5).

    The service verifies every token with its local secret only. So a token that names a key elsewhere
    but is signed with the local secret is ACCEPTED (the header is inert), and one signed with the key it
    names is REJECTED. Either way nothing is fetched from the named location.
    """

    @pytest.mark.parametrize("header", ["jku", "x5u"])
    async def test_url_header_with_the_right_secret_is_accepted_without_fetching(
        self, client: Client, header: str
    ) -> None:
        async with _ConnectionCounter() as listener:
            signed = jwt.encode(_claims(), SECRET, algorithm="HS256", headers={header: listener.url})

            response = await client.get("/v1/pets", headers=_bearer(signed))
            await asyncio.sleep(0)

        assert response.status_code == 200
        assert listener.connections == 0

    @pytest.mark.parametrize("header", ["jku", "x5u"])
    async def test_url_header_with_a_foreign_key_is_401_without_fetching(self, client: Client, header: str) -> None:
        async with _ConnectionCounter() as listener:
            signed = jwt.encode(_claims(), OTHER_SECRET, algorithm="HS256", headers={header: listener.url})

            response = await client.get("/v1/pets", headers=_bearer(signed))
            await asyncio.sleep(0)

        _assert_invalid_token(response)
        assert listener.connections == 0

    async def test_embedded_jwk_is_not_trusted(self, client: Client) -> None:
        attacker_key = {"kty": "oct", "k": _b64url(OTHER_SECRET.encode())}
        signed = jwt.encode(
            _claims(ADMIN, roles=["admin"]), OTHER_SECRET, algorithm="HS256", headers={"jwk": attacker_key}
        )

        response = await client.get("/v1/pets", headers=_bearer(signed))

        _assert_invalid_token(response)

    async def test_embedded_jwk_with_the_right_secret_is_accepted(self, client: Client) -> None:
        unrelated_key = {"kty": "oct", "k": _b64url(OTHER_SECRET.encode())}
        signed = jwt.encode(_claims(), SECRET, algorithm="HS256", headers={"jwk": unrelated_key})

        response = await client.get("/v1/pets", headers=_bearer(signed))

        assert response.status_code == 200


class TestCallerIdentity:
    async def test_caller_is_case_folded(self, client: Client) -> None:
        created = await client.post("/v1/pets", json=pet_body(), headers=auth("Alice@Example.COM"))

        fetched = await client.get(created.headers["location"], headers=auth(ALICE))

        assert created.status_code == 201
        pet = created.json()
        assert pet["ownerId"] == pet["createdBy"] == pet["modifiedBy"] == ALICE
        assert fetched.status_code == 200

    async def test_mixed_case_caller_sees_lower_case_records(self, client: Client) -> None:
        created = await client.post("/v1/pets", json=pet_body(), headers=auth(ALICE))

        fetched = await client.get(created.headers["location"], headers=auth("ALICE@EXAMPLE.COM"))
        listed = await client.get("/v1/pets", headers=auth("aLiCe@eXaMpLe.CoM"))

        assert fetched.status_code == 200
        assert [pet["id"] for pet in listed.json()["items"]] == [created.json()["id"]]

    async def test_mixed_case_caller_may_name_itself_as_owner(self, client: Client) -> None:
        response = await client.post("/v1/pets", json=pet_body(ownerId="ALICE@example.com"), headers=auth(ALICE))

        assert response.status_code == 201
        assert response.json()["ownerId"] == ALICE

    async def test_admin_role_comes_from_the_roles_claim(self, client: Client) -> None:
        created = await client.post("/v1/pets", json=pet_body(), headers=auth(ALICE))

        as_admin = await client.get(created.headers["location"], headers=auth(ADMIN, admin=True))
        as_plain_user = await client.get(created.headers["location"], headers=auth(ADMIN))

        assert as_admin.status_code == 200
        assert as_plain_user.status_code == 404

    async def test_other_roles_do_not_make_an_admin(self, client: Client) -> None:
        headers = _bearer(token(ADMIN, roles=["user", "administrator", "superuser"]))

        response = await client.post("/v1/pets", json=pet_body(ownerId=BOB), headers=headers)

        assert response.status_code == 403
        assert response.json()["code"] == 997

    async def test_configured_claims_name_the_caller_and_roles(
        self, make_client: MakeClient, make_settings: Callable[..., Settings]
    ) -> None:
        settings = make_settings(auth_user_claim="email", auth_roles_claim="groups")
        idp_token = token("subject-0001", email="Carol@Example.com", groups=["admin"])
        async with make_client(settings) as client:
            response = await client.post("/v1/pets", json=pet_body(ownerId=BOB), headers=_bearer(idp_token))

        assert response.status_code == 201
        assert response.json()["createdBy"] == "carol@example.com"
        assert response.json()["ownerId"] == BOB

    async def test_configured_roles_claim_replaces_roles(
        self, make_client: MakeClient, make_settings: Callable[..., Settings]
    ) -> None:
        settings = make_settings(auth_user_claim="email", auth_roles_claim="groups")
        not_admin = token("subject-0001", email=ALICE, roles=["admin"], groups=[])
        async with make_client(settings) as client:
            response = await client.post("/v1/pets", json=pet_body(ownerId=BOB), headers=_bearer(not_admin))

        assert response.status_code == 403
        assert response.json()["code"] == 997

    async def test_configured_user_claim_is_required(
        self, make_client: MakeClient, make_settings: Callable[..., Settings]
    ) -> None:
        settings = make_settings(auth_user_claim="email", auth_roles_claim="groups")
        async with make_client(settings) as client:
            response = await client.get("/v1/pets", headers=_bearer(token(ALICE)))

        _assert_invalid_token(response)


class TestIsolation:
    @pytest.fixture
    async def alices_pet(self, client: Client) -> dict[str, Any]:
        created = await client.post("/v1/pets", json=pet_body("Alice's cat", "Cat"), headers=auth(ALICE))
        assert created.status_code == 201
        pet: dict[str, Any] = created.json()
        return pet

    async def _missing(self, client: Client, method: str) -> Any:
        body = pet_body("Stolen", "Dog") if method == "PUT" else None
        return await client.request(method, f"/v1/pets/{uuid.uuid4()}", json=body, headers=auth(BOB))

    @pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
    async def test_other_users_record_answers_as_missing(
        self, client: Client, alices_pet: dict[str, Any], method: str
    ) -> None:
        body = pet_body("Stolen", "Dog") if method == "PUT" else None

        response = await client.request(method, f"/v1/pets/{alices_pet['id']}", json=body, headers=auth(BOB))
        missing = await self._missing(client, method)

        assert response.status_code == 404
        assert missing.status_code == 404
        assert response.json() == {"code": 995, "message": response.json()["message"]}
        assert response.content == missing.content
        assert "etag" not in response.headers

    async def test_other_users_write_attempts_change_nothing(self, client: Client, alices_pet: dict[str, Any]) -> None:
        path = f"/v1/pets/{alices_pet['id']}"

        await client.put(path, json=pet_body("Stolen", "Dog"), headers=auth(BOB))
        await client.put(path, json=pet_body("Stolen", "Dog", ownerId=BOB), headers=auth(BOB))
        await client.delete(path, headers=auth(BOB))
        await client.delete(path, headers={**auth(BOB), "If-Match": "*"})
        fetched = await client.get(path, headers=auth(ALICE))

        assert fetched.status_code == 200
        assert fetched.json() == alices_pet

    async def test_other_users_record_is_not_listed(self, client: Client, alices_pet: dict[str, Any]) -> None:
        own = await client.post("/v1/pets", json=pet_body("Bob's dog"), headers=auth(BOB))

        listed = await client.get("/v1/pets", headers=auth(BOB))
        by_id = await client.get("/v1/pets", params={"ids": alices_pet["id"]}, headers=auth(BOB))
        by_owner = await client.get("/v1/pets", params={"ownerId": ALICE}, headers=auth(BOB))

        assert [pet["id"] for pet in listed.json()["items"]] == [own.json()["id"]]
        assert listed.json()["totalCount"] == 1
        assert by_id.json()["items"] == []
        assert by_id.json()["totalCount"] == 0
        assert by_owner.json()["items"] == []
        assert by_owner.json()["totalCount"] == 0

    async def test_admin_sees_and_lists_everyones_records(self, client: Client, alices_pet: dict[str, Any]) -> None:
        own = await client.post("/v1/pets", json=pet_body("Bob's dog"), headers=auth(BOB))

        listed = await client.get("/v1/pets", headers=auth(ADMIN, admin=True))
        fetched = await client.get(f"/v1/pets/{alices_pet['id']}", headers=auth(ADMIN, admin=True))

        assert {pet["id"] for pet in listed.json()["items"]} == {alices_pet["id"], own.json()["id"]}
        assert fetched.json() == alices_pet


OLD_SECRET = "the-secret-before-the-rotation-0123456789abc"


class TestPreviousSecrets:
    """PETRECORDS_AUTH_PREVIOUS_SECRETS: rotating the local secret logs no one out."""

    @pytest.fixture
    async def rotated(self, make_client: MakeClient, make_settings: Callable[..., Settings]) -> Any:
        async with make_client(make_settings(auth_previous_secrets=OLD_SECRET)) as client:
            yield client

    async def test_a_token_of_the_previous_secret_is_the_same_caller(self, rotated: Client) -> None:
        created = await rotated.post("/v1/pets", json=pet_body(), headers=_bearer(token(secret=OLD_SECRET)))

        fetched = await rotated.get(created.headers["location"], headers=_bearer(token()))

        assert created.status_code == 201, created.text
        assert fetched.status_code == 200

    async def test_a_token_of_no_secret_of_the_service_is_401(self, rotated: Client) -> None:
        response = await rotated.get("/v1/pets", headers=_bearer(token(secret=OTHER_SECRET)))

        _assert_invalid_token(response)

    async def test_without_the_setting_the_previous_secret_is_refused(self, client: Client) -> None:
        response = await client.get("/v1/pets", headers=_bearer(token(secret=OLD_SECRET)))

        _assert_invalid_token(response)


class TestClaimsAsProvidersIssueThem:
    """Claim settings name a claim, or a path into nested objects (contract section 5)."""

    @pytest.mark.parametrize(
        ("roles_claim", "claims"),
        [
            ("realm_access.roles", {"realm_access": {"roles": ["offline_access", "admin"]}}),
            ("https://clinic.example/roles", {"https://clinic.example/roles": ["admin"]}),
        ],
        ids=["Keycloak's realm roles", "a namespaced claim"],
    )
    async def test_the_admin_role_by_path_or_by_whole_name(
        self, make_client: MakeClient, make_settings: Callable[..., Settings], roles_claim: str, claims: Any
    ) -> None:
        async with make_client(make_settings(auth_roles_claim=roles_claim)) as client:
            as_admin = await client.post("/v1/pets", json=pet_body(ownerId=BOB), headers=_bearer(token(**claims)))
            as_owner = await client.post(
                "/v1/pets", json=pet_body(ownerId=BOB), headers=_bearer(token(roles=["admin"]))
            )

        assert as_admin.status_code == 201, as_admin.text
        assert as_owner.status_code == 403

    @pytest.mark.parametrize(
        ("groups", "grantee"),
        [
            (["/clinic-42"], "group:clinic-42"),
            (["/clinics/north"], "group:clinics/north"),
            (["clinics/north"], "group:/clinics/north"),
        ],
        ids=["Keycloak's full path", "a subgroup", "a grantee written as a path"],
    )
    async def test_a_group_as_keycloak_writes_it(self, client: Client, groups: list[str], grantee: str) -> None:
        created = await client.post("/v1/pets", json=pet_body(), headers=auth())
        shared = await client.post(
            "/v1/pet-shares",
            json={"petId": created.json()["id"], "grantee": grantee, "access": "read"},
            headers=auth(),
        )

        fetched = await client.get(created.headers["location"], headers=_bearer(token(BOB, groups=groups)))
        elsewhere = await client.get(created.headers["location"], headers=_bearer(token(BOB, groups=["/clinics"])))

        assert shared.status_code == 201, shared.text
        assert shared.json()["grantee"] == "group:" + grantee.removeprefix("group:").removeprefix("/")
        assert fetched.status_code == 200
        assert elsewhere.status_code == 404

    @pytest.mark.parametrize("groups", [["//"], ["/"], ["clinic 42"], ["/" + "x" * 101]])
    async def test_what_is_still_no_group_name(self, client: Client, groups: list[str]) -> None:
        response = await client.get("/v1/pets", headers=_bearer(token(groups=groups)))

        _assert_invalid_token(response)
