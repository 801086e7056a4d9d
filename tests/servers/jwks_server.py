"""A JWKS endpoint of the tests' own on 127.0.0.1, with keys of each asymmetric kind, and the access tokens of three
identity providers, shaped exactly as each issues them: Keycloak (a realm's default settings, with the groups
mapper), Auth0 (custom claims under a namespace) and Microsoft Entra ID (v2 tokens). The endpoint answers any path
(each provider publishes its keys at a path of its own), and, given a way to issue tokens, a POST to a path that ends
in `/token` as a provider's token endpoint answers a password grant."""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

ISSUER = "https://id.example.com/"
AUDIENCE = "pet-records"


@dataclass
class SigningKey:
    kid: str
    algorithm: str
    private: Any
    public_jwk: dict[str, Any]

    def sign(self, claims: dict[str, Any], **headers: Any) -> str:
        return jwt.encode(claims, self.private, algorithm=self.algorithm, headers={"kid": self.kid, **headers})


def rsa_key(kid: str) -> SigningKey:
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(RSAAlgorithm.to_jwk(private.public_key()))
    return SigningKey(kid, "RS256", private, {**jwk, "kid": kid, "use": "sig", "alg": "RS256"})


def ec_key(kid: str) -> SigningKey:
    private = ec.generate_private_key(ec.SECP256R1())
    jwk = json.loads(ECAlgorithm.to_jwk(private.public_key()))
    return SigningKey(kid, "ES256", private, {**jwk, "kid": kid, "use": "sig", "alg": "ES256"})


def ed_key(kid: str) -> SigningKey:
    private = ed25519.Ed25519PrivateKey.generate()
    jwk = json.loads(OKPAlgorithm.to_jwk(private.public_key()))
    return SigningKey(kid, "EdDSA", private, {**jwk, "kid": kid, "use": "sig"})


def claims(user: str = "alice@example.com", **overrides: Any) -> dict[str, Any]:
    now = int(time.time())
    values: dict[str, Any] = {"sub": user, "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 300, "roles": []}
    values.update(overrides)
    return {name: value for name, value in values.items() if value is not None}


@dataclass
class JwksServer:
    url: str
    keys: list[SigningKey]
    fetches: int = 0
    down: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    others: list[dict[str, Any]] = field(default_factory=list)
    """Entries the set publishes besides the signing keys (Keycloak's encryption key)."""
    without_alg: bool = False
    """Publish the keys without `alg`, as Entra ID does."""
    issue: Callable[[dict[str, str]], str] | None = None
    """The token endpoint's: the access token for a password grant's form, or a KeyError for an unknown user."""

    @property
    def base(self) -> str:
        """http://127.0.0.1:PORT, under which every path answers the key set."""
        return self.url.removesuffix("/jwks.json")

    def document(self) -> bytes:
        entries = [
            {name: value for name, value in key.public_jwk.items() if not (self.without_alg and name == "alg")}
            for key in self.keys
        ]
        return json.dumps({"keys": [*entries, *self.others]}).encode()


@contextmanager
def jwks_server(keys: list[SigningKey]) -> Iterator[JwksServer]:
    state: JwksServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with state.lock:
                state.fetches += 1
            if state.down:
                self.send_response(503)
                self.end_headers()
                return
            self._json(200, state.document())

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
            if state.issue is None or not self.path.endswith("/token"):
                self._json(404, b'{"error":"not_found"}')
                return
            try:
                token = state.issue(form)
            except KeyError:
                self._json(401, b'{"error":"invalid_grant"}')
                return
            self._json(200, json.dumps({"access_token": token, "token_type": "Bearer", "expires_in": 300}).encode())

        def _json(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state = JwksServer(url=f"http://127.0.0.1:{server.server_address[1]}/jwks.json", keys=keys)
    # shutdown() waits for the loop to look again: at the default half second, that was most of each test of a
    # provider (79 of them).
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


# --- the providers ---------------------------------------------------------------------------------


@dataclass
class Person:
    """Someone the providers know: their e-mail address, a username, their roles and their groups."""

    email: str
    username: str
    roles: Sequence[str] = ()
    groups: Sequence[str] = ()
    """As Keycloak names them (full paths); Entra ID lists object ids instead (Entra.group_ids)."""


KEYCLOAK_ENCRYPTION_KEY = {**rsa_key("enc-1").public_jwk, "use": "enc", "alg": "RSA-OAEP"}


class Keycloak:
    """A realm of Keycloak at the server's base URL: its issuer, where it publishes its keys, and its access tokens
    with the realm's default settings (`aud` "account", the realm's roles under `realm_access`) and the groups
    mapper on, full paths included."""

    def __init__(self, server: JwksServer, *, realm: str = "clinic", client: str = "pet-records-web") -> None:
        self.server = server
        self.realm = realm
        self.client = client
        # Keycloak publishes an encryption key beside the signing keys: never one to verify with.
        server.others = [KEYCLOAK_ENCRYPTION_KEY]

    @property
    def issuer(self) -> str:
        return f"{self.server.base}/realms/{self.realm}"

    @property
    def jwks_url(self) -> str:
        return f"{self.issuer}/protocol/openid-connect/certs"

    def claims(self, person: Person, *, audience: str | list[str] = "account", lifetime: int = 300) -> dict[str, Any]:
        now = int(time.time())
        return {
            "exp": now + lifetime,
            "iat": now,
            "auth_time": now - 5,
            "jti": str(uuid.uuid4()),
            "iss": self.issuer,
            "aud": audience,
            "sub": str(uuid.uuid5(uuid.NAMESPACE_DNS, person.username)),
            "typ": "Bearer",
            "azp": self.client,
            "sid": str(uuid.uuid4()),
            "acr": "1",
            "allowed-origins": ["https://app.clinic.example"],
            "realm_access": {
                "roles": ["offline_access", f"default-roles-{self.realm}", "uma_authorization", *person.roles]
            },
            "resource_access": {"account": {"roles": ["manage-account", "manage-account-links", "view-profile"]}},
            "scope": "openid profile email",
            "email_verified": True,
            "name": person.username.title(),
            "groups": list(person.groups),
            "preferred_username": person.username,
            "given_name": person.username.title(),
            "family_name": "Example",
            "email": person.email,
        }

    def token(self, key: SigningKey, person: Person, **options: Any) -> str:
        return key.sign(self.claims(person, **options))


class Auth0:
    """An Auth0 tenant at the server's base URL (its issuer ends with a slash): access tokens for an API, `aud` a list
    of the API and the tenant's userinfo, `sub` of its user store, and the e-mail address, roles and groups added by
    an Action as claims under a namespace (Auth0 puts no other custom claims in a token)."""

    NAMESPACE = "https://clinic.example/"

    def __init__(self, server: JwksServer, *, api: str = "https://pets.clinic.example") -> None:
        self.server = server
        self.api = api

    @property
    def issuer(self) -> str:
        return f"{self.server.base}/"

    @property
    def jwks_url(self) -> str:
        return f"{self.server.base}/.well-known/jwks.json"

    def claims(self, person: Person, *, lifetime: int = 86400) -> dict[str, Any]:
        now = int(time.time())
        return {
            f"{self.NAMESPACE}email": person.email,
            f"{self.NAMESPACE}roles": list(person.roles),
            f"{self.NAMESPACE}groups": list(person.groups),
            "iss": self.issuer,
            "sub": f"auth0|{uuid.uuid5(uuid.NAMESPACE_DNS, person.username).hex[:24]}",
            "aud": [self.api, f"{self.issuer}userinfo"],
            "iat": now,
            "exp": now + lifetime,  # Auth0's default for an API: a day
            "scope": "openid profile email",
            "azp": "Xk2wq0Q8hM9bWJ7s3kP1cXf2aV5nR6tY",
        }

    def token(self, key: SigningKey, person: Person, **options: Any) -> str:
        return key.sign(self.claims(person, **options))


class Entra:
    """A Microsoft Entra ID tenant at the server's base URL (login.microsoftonline.com): v2 access tokens for an
    application's API, `aud` its client id, app roles in `roles`, groups as object ids, the optional `email` claim,
    and keys published without `alg`."""

    TENANT = "72f988bf-86f1-41af-91ab-2d7cd011db47"
    CLIENT_ID = "6e74172b-be56-4843-9ff4-e66a39bb12e3"

    def __init__(self, server: JwksServer) -> None:
        self.server = server
        server.without_alg = True

    @property
    def issuer(self) -> str:
        return f"{self.server.base}/{self.TENANT}/v2.0"

    @property
    def jwks_url(self) -> str:
        return f"{self.server.base}/{self.TENANT}/discovery/v2.0/keys"

    @staticmethod
    def group_ids(person: Person) -> list[str]:
        return [str(uuid.uuid5(uuid.NAMESPACE_URL, group)) for group in person.groups]

    def claims(self, person: Person, *, email: bool = True, lifetime: int = 4478) -> dict[str, Any]:
        now = int(time.time())
        claims: dict[str, Any] = {
            "aud": self.CLIENT_ID,
            "iss": self.issuer,
            "iat": now,
            "nbf": now,
            "exp": now + lifetime,
            "aio": "AWQAm/8YAAAAdhm3kbQHmh1vBvBdRT3+oLJk1yVq0yXjXm8cXy1V2Yc=",
            "azp": "04b07795-8ddb-461a-bbee-02f9e1bf7b46",
            "azpacr": "0",
            "groups": self.group_ids(person),
            "name": person.username.title(),
            "oid": str(uuid.uuid5(uuid.NAMESPACE_OID, person.username)),
            "preferred_username": person.email,
            "rh": "0.AXEAv4j5cvGGr0GRqy180BHbRysXdG5WvkNIn_TmajmbEuNxAAA.",
            "roles": list(person.roles),
            "scp": "access_as_user",
            "sub": "AAAAAAAAAAAAAAAAAAAAAIkzqFVrSaSaFHy782bbtaQ",
            "tid": self.TENANT,
            "uti": "fqiBqXLPj0eQa82S-IYFAA",
            "ver": "2.0",
        }
        if email:
            claims["email"] = person.email
        return claims

    def token(self, key: SigningKey, person: Person, **options: Any) -> str:
        return key.sign(self.claims(person, **options))


# --- the providers of the how-to pages -------------------------------------------------------------

HOW_TO_PASSWORDS = {"OLGA_PASSWORD": "olga-s-password", "VERA_PASSWORD": "vera-s-password"}
"""What the pages ask the reader to have: the passwords of two users, Olga (who owns a dog) and Vera (a vet of
clinic 42)."""
OLGA = Person("olga@example.com", "olga")


@contextmanager
def _page_provider(
    key: SigningKey,
    shape_of: Callable[[JwksServer], Any],
    vera: Person,
    *,
    by_email: bool = False,
    token_options: dict[str, Any] | None = None,
    **expected: str,
) -> Iterator[Any]:
    """A provider of a how-to page, signing with `key`: its token endpoint answers a password grant of Olga or Vera
    (by username, or by e-mail address) whose form has each `expected` value."""
    users = {person.email if by_email else person.username: person for person in (OLGA, vera)}
    passwords = {"olga": HOW_TO_PASSWORDS["OLGA_PASSWORD"], "vera": HOW_TO_PASSWORDS["VERA_PASSWORD"]}
    with jwks_server([key]) as server:
        shape = shape_of(server)

        def issue(form: dict[str, str]) -> str:
            person = users[form.get("username", "")]
            if form.get("grant_type") != "password" or form.get("password") != passwords[person.username]:
                raise KeyError("invalid_grant")
            if any(value not in form.get(name, "") for name, value in expected.items()):
                raise KeyError("invalid_client")
            token: str = shape.token(key, person, **(token_options or {}))
            return token

        server.issue = issue
        yield shape


@contextmanager
def keycloak_of_the_how_to() -> Iterator[dict[str, str]]:
    """docs/how-to/keycloak.md's realm: KEYCLOAK_URL and the users' passwords."""
    key = ec_key("how-to")
    key.public_jwk["alg"] = key.algorithm
    vera = Person("vera@clinic.example", "vera", groups=("/clinic-42",))
    with _page_provider(
        key,
        lambda server: Keycloak(server, client="pet-records-cli"),
        vera,
        token_options={"audience": ["pet-records", "account"]},
        client_id="pet-records-cli",
    ) as keycloak:
        yield {"KEYCLOAK_URL": keycloak.server.base, **HOW_TO_PASSWORDS}


AUTH0_CLIENT_ID = "Xk2wq0Q8hM9bWJ7s3kP1cXf2aV5nR6tY"


@contextmanager
def auth0_of_the_how_to() -> Iterator[dict[str, str]]:
    """docs/how-to/auth0.md's tenant: AUTH0_URL, the client's id and the users' passwords."""
    vera = Person("vera@clinic.example", "vera", groups=("clinic-42",))
    with _page_provider(
        rsa_key("how-to"), Auth0, vera, client_id=AUTH0_CLIENT_ID, audience="https://pets.clinic.example"
    ) as auth0:
        yield {"AUTH0_URL": auth0.server.base, "AUTH0_CLIENT_ID": AUTH0_CLIENT_ID, **HOW_TO_PASSWORDS}


ENTRA_CLI_CLIENT_ID = "1b730954-1685-4b74-9bfd-dac224a7b894"


@contextmanager
def entra_of_the_how_to() -> Iterator[dict[str, str]]:
    """docs/how-to/entra-id.md's tenant: where it logs in, the tenant, the API's and the command line's client ids,
    the clinic's group and the users' passwords."""
    vera = Person("vera@clinic.example", "vera", groups=("clinic-42",))
    with _page_provider(
        rsa_key("how-to"),
        Entra,
        vera,
        by_email=True,
        client_id=ENTRA_CLI_CLIENT_ID,
        scope=f"api://{Entra.CLIENT_ID}/",
    ) as entra:
        (clinic,) = entra.group_ids(vera)
        yield {
            "ENTRA_LOGIN": entra.server.base,
            "TENANT_ID": entra.TENANT,
            "API_CLIENT_ID": entra.CLIENT_ID,
            "CLI_CLIENT_ID": ENTRA_CLI_CLIENT_ID,
            "CLINIC_GROUP_ID": clinic,
            **HOW_TO_PASSWORDS,
        }
