"""A JWKS endpoint of the tests' own on 127.0.0.1, with keys of each asymmetric kind."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
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

    def document(self) -> bytes:
        return json.dumps({"keys": [key.public_jwk for key in self.keys]}).encode()


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
            body = state.document()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state = JwksServer(url=f"http://127.0.0.1:{server.server_address[1]}/jwks.json", keys=keys)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
