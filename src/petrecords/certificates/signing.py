"""Signed certificates: the facts' JSON as a compact JWS (RFC 7515), and the key set that verifies it (RFC 7517).

The signing key is `PETRECORDS_SIGNING_KEY` (a PEM private key, Ed25519 for `EdDSA` or EC P-256 for `ES256`), or,
when that is unset, an Ed25519 key made on first start in the data directory (`signing-key.pem`, mode 0600) and
read from there on every later start. Each key is named by its RFC 7638 thumbprint (`kid`), which the JWS header
carries, so a verifier picks the key without trying each.

Rotation: the previous keys (`PETRECORDS_SIGNING_PREVIOUS_KEYS`: PEM keys, private or public, or paths of files of
them, comma-separated) sign nothing; their public keys stay in the key set until the last certificate they signed
has expired (a certificate lives at most 366 days), so that a copy kept offline still verifies.

The payload is the JSON answer itself, byte for byte, not a JWT: a verifier checks the signature, then the
certificate's own `expiresAt`. The header is `{"alg", "kid", "typ": "JOSE", "cty": "json"}`.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import msgspec
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from petrecords.config import ConfigurationError, Settings

PrivateKey = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey
PublicKey = ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey
ALGORITHMS = ("EdDSA", "ES256")
JWS_HEADER_TYPE = "JOSE"
_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----.+?-----END \1-----", re.S)


@dataclass(frozen=True)
class VerificationKey:
    """A public key of the key set, with its algorithm and RFC 7638 thumbprint."""

    public_key: PublicKey
    algorithm: str
    kid: str

    @classmethod
    def of(cls, key: PublicKey, *, origin: str) -> VerificationKey:
        algorithm = _algorithm_of(key, origin=origin)
        return cls(public_key=key, algorithm=algorithm, kid=thumbprint(_public_jwk(key)))

    def jwk(self) -> dict[str, str]:
        return {**_public_jwk(self.public_key), "kid": self.kid, "alg": self.algorithm, "use": "sig"}


class Signer:
    """Signs certificates with the current key; knows every key that verifies them."""

    def __init__(self, key: PrivateKey, *, previous: tuple[PublicKey, ...] = ()) -> None:
        self._key = key
        self.current = VerificationKey.of(key.public_key(), origin="PETRECORDS_SIGNING_KEY")
        keys = [self.current]
        for number, public in enumerate(previous, 1):
            verification = VerificationKey.of(public, origin=f"PETRECORDS_SIGNING_PREVIOUS_KEYS key {number}")
            if all(verification.kid != kept.kid for kept in keys):
                keys.append(verification)
        self.keys = tuple(keys)
        self._header = {"kid": self.current.kid, "typ": JWS_HEADER_TYPE, "cty": "json"}
        self.jwks_document = msgspec.json.encode({"keys": [kept.jwk() for kept in self.keys]})
        """The answer of `GET /.well-known/jwks.json`: public keys only, the current one first."""

    @property
    def secret(self) -> bytes:
        """The current key's private bytes (PKCS #8, DER): the secret every instance shares, from which others are
        derived (see sealing.py). Never shown."""
        return self._key.private_bytes(
            serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    def sign(self, payload: bytes) -> str:
        """The compact JWS of `payload` (the facts' JSON): header.payload.signature, base64url each."""
        return jwt.api_jws.encode(payload, self._key, algorithm=self.current.algorithm, headers=self._header)


def load_signer(settings: Settings) -> Signer:
    """The signer of these settings: the configured key or the data directory's (made on first start), and the
    previous keys. A key that cannot be used is a ConfigurationError naming the setting."""
    if settings.signing_key is not None:
        key = _private_key(settings.signing_key.get_secret_value().encode(), origin="PETRECORDS_SIGNING_KEY")
    else:
        key = load_or_create_key(settings.signing_key_file)
    previous = tuple(
        public
        for number, entry in enumerate(settings.signing_previous_keys, 1)
        for public in _previous_keys(entry, origin=f"PETRECORDS_SIGNING_PREVIOUS_KEYS entry {number}")
    )
    return Signer(key, previous=previous)


def load_or_create_key(path: Path) -> PrivateKey:
    """The key kept at `path`, made there first when there is none.

    A new key is written whole to a file of its own (mode 0600) and then linked to `path`, which fails when another
    process got there first: of several workers starting at once, one key wins, and no process ever reads a file
    that is still being written."""
    try:
        return _private_key(path.read_bytes(), origin=str(path.resolve()))
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise ConfigurationError(f"cannot read the certificate signing key {path.resolve()}: {exc.strerror}") from None
    pem = ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor, written = tempfile.mkstemp(dir=path.parent, prefix=".signing-key-")  # mode 0600
        try:
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(pem)
                handle.flush()
                os.fsync(handle.fileno())
            with contextlib.suppress(FileExistsError):  # another process made one first: theirs is the key
                os.link(written, path)
        finally:
            os.unlink(written)
        return _private_key(path.read_bytes(), origin=str(path.resolve()))
    except OSError as exc:
        raise ConfigurationError(
            f"PETRECORDS_DATA_DIR: cannot create the certificate signing key {path.resolve()}: {exc.strerror or exc}"
        ) from None


def _private_key(pem: bytes, *, origin: str) -> PrivateKey:
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise ConfigurationError(f"{origin}: not an unencrypted PEM private key ({_reason(exc)})") from None
    if not isinstance(key, ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey):
        raise ConfigurationError(f"{origin}: {_UNSUPPORTED}")
    _algorithm_of(key.public_key(), origin=origin)
    return key


def _previous_keys(entry: str, *, origin: str) -> list[PublicKey]:
    """The public keys of one entry of PETRECORDS_SIGNING_PREVIOUS_KEYS: a PEM key, or a file of PEM keys."""
    if entry.startswith("-----BEGIN"):
        text = entry
    else:
        try:
            text = Path(entry).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigurationError(
                f"{origin}: cannot read {entry}: {getattr(exc, 'strerror', None) or exc}"
            ) from None
    blocks = [match.group(0) for match in _PEM_BLOCK.finditer(text)]
    if not blocks:
        raise ConfigurationError(f"{origin}: holds no PEM key")
    return [_public_key(block.encode(), origin=origin) for block in blocks]


def _public_key(pem: bytes, *, origin: str) -> PublicKey:
    if b"PRIVATE KEY" in pem:
        return _private_key(pem, origin=origin).public_key()
    try:
        key = serialization.load_pem_public_key(pem)
    except (ValueError, TypeError) as exc:
        raise ConfigurationError(f"{origin}: not a PEM public or private key ({_reason(exc)})") from None
    if not isinstance(key, ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey):
        raise ConfigurationError(f"{origin}: {_UNSUPPORTED}")
    _algorithm_of(key, origin=origin)
    return key


_UNSUPPORTED = "only Ed25519 (EdDSA) and EC P-256 (ES256) keys sign certificates"


def _algorithm_of(key: PublicKey, *, origin: str) -> str:
    if isinstance(key, ed25519.Ed25519PublicKey):
        return "EdDSA"
    if isinstance(key.curve, ec.SECP256R1):
        return "ES256"
    raise ConfigurationError(f"{origin}: the EC key is on {key.curve.name}; {_UNSUPPORTED}")


def _reason(exc: Exception) -> str:
    # The library's message names what it could not read, never the key's bytes.
    return str(exc).split("\n")[0][:200] or type(exc).__name__


def _public_jwk(key: PublicKey) -> dict[str, str]:
    """The required members of a public key's JWK (RFC 8037 for Ed25519, RFC 7518 for P-256)."""
    if isinstance(key, ed25519.Ed25519PublicKey):
        raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return {"kty": "OKP", "crv": "Ed25519", "x": _base64url(raw)}
    numbers = key.public_numbers()
    return {
        "kty": "EC",
        "crv": "P-256",
        "x": _base64url(numbers.x.to_bytes(32, "big")),
        "y": _base64url(numbers.y.to_bytes(32, "big")),
    }


def thumbprint(jwk: dict[str, Any]) -> str:
    """The RFC 7638 thumbprint of a public JWK: SHA-256 of its required members, sorted, without white space."""
    required = {"OKP": ("crv", "kty", "x"), "EC": ("crv", "kty", "x", "y")}[jwk["kty"]]
    canonical = json.dumps({name: jwk[name] for name in required}, separators=(",", ":"), sort_keys=True)
    return _base64url(hashlib.sha256(canonical.encode()).digest())


def _base64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
