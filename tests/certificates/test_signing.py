"""Signed certificates (petrecords.certificates.signing): the compact JWS, the key set, the key from the settings or
made on first start, and the previous keys that stay in the key set."""

from __future__ import annotations

import json
import multiprocessing
import stat
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from pydantic import SecretStr

from petrecords.certificates.facts import encode_facts
from petrecords.certificates.signing import load_or_create_key, load_signer, thumbprint
from petrecords.config import ConfigurationError, Settings
from tests.certificates.support import facts_of, many_doses


def _settings(tmp_path: Path, **values: Any) -> Settings:
    return Settings(data_dir=tmp_path, _env_file=None, **values)  # type: ignore[call-arg]


def _pem(key: Any) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def _public_pem(key: Any) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


def verify_offline(jws: str, jwks: str) -> dict[str, Any]:
    """What the how-to shows: a certificate checked with PyJWT and the key set alone, nothing of this service."""
    keys = jwt.PyJWKSet.from_json(jwks)
    key = keys[jwt.get_unverified_header(jws)["kid"]]
    payload: dict[str, Any] = json.loads(jwt.api_jws.decode(jws, key=key, algorithms=["EdDSA", "ES256"]))
    return payload


class TestSigning:
    def test_a_certificate_verifies_offline_with_the_key_set(self, tmp_path: Path) -> None:
        signer = load_signer(_settings(tmp_path))
        payload = encode_facts(facts_of(doses=many_doses(50)))
        jws = signer.sign(payload)
        assert verify_offline(jws, signer.jwks_document.decode()) == json.loads(payload)
        header = jwt.get_unverified_header(jws)
        assert header == {"alg": "EdDSA", "kid": signer.current.kid, "typ": "JOSE", "cty": "json"}

    def test_an_altered_certificate_does_not_verify(self, tmp_path: Path) -> None:
        signer = load_signer(_settings(tmp_path))
        header, _payload, signature = signer.sign(b'{"pet":{"name":"Rex"}}').split(".")
        forged = jwt.utils.base64url_encode(b'{"pet":{"name":"Max"}}').decode()
        with pytest.raises(jwt.InvalidSignatureError):
            verify_offline(f"{header}.{forged}.{signature}", signer.jwks_document.decode())

    def test_the_key_set_holds_public_keys_only(self, tmp_path: Path) -> None:
        signer = load_signer(_settings(tmp_path))
        [key] = json.loads(signer.jwks_document)["keys"]
        assert set(key) == {"kty", "crv", "x", "kid", "alg", "use"}
        assert (key["kty"], key["crv"], key["alg"], key["use"]) == ("OKP", "Ed25519", "EdDSA", "sig")

    def test_es256_from_the_settings(self, tmp_path: Path) -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        signer = load_signer(_settings(tmp_path, signing_key=SecretStr(_pem(key))))
        jws = signer.sign(b"{}")
        assert jwt.get_unverified_header(jws)["alg"] == "ES256"
        assert verify_offline(jws, signer.jwks_document.decode()) == {}
        [published] = json.loads(signer.jwks_document)["keys"]
        assert set(published) == {"kty", "crv", "x", "y", "kid", "alg", "use"}
        assert not (tmp_path / "signing-key.pem").exists()

    @pytest.mark.parametrize(
        "key",
        [
            rsa.generate_private_key(public_exponent=65537, key_size=2048),
            ec.generate_private_key(ec.SECP384R1()),
        ],
        ids=["rsa", "p-384"],
    )
    def test_other_keys_are_refused_at_start(self, tmp_path: Path, key: Any) -> None:
        with pytest.raises(ConfigurationError, match=r"PETRECORDS_SIGNING_KEY: .*only Ed25519"):
            load_signer(_settings(tmp_path, signing_key=SecretStr(_pem(key))))

    def test_garbage_is_refused_without_echoing_it(self, tmp_path: Path) -> None:
        with pytest.raises(ConfigurationError, match="PETRECORDS_SIGNING_KEY: not an unencrypted PEM") as refused:
            load_signer(_settings(tmp_path, signing_key=SecretStr("very-secret-but-not-a-key")))
        assert "very-secret" not in str(refused.value)

    def test_thumbprint_of_rfc_8037(self) -> None:
        jwk = {"kty": "OKP", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}
        assert thumbprint(jwk) == "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"


class TestRotation:
    def test_previous_keys_stay_in_the_key_set_and_verify_what_they_signed(self, tmp_path: Path) -> None:
        old_ed, old_ec = ed25519.Ed25519PrivateKey.generate(), ec.generate_private_key(ec.SECP256R1())
        old_signed = load_signer(_settings(tmp_path / "a", signing_key=SecretStr(_pem(old_ed)))).sign(b'{"n":1}')
        kept = tmp_path / "previous.pem"
        kept.write_text(_public_pem(old_ec) + _pem(ed25519.Ed25519PrivateKey.generate()))
        signer = load_signer(
            _settings(tmp_path / "b", signing_previous_keys=f"{_pem(old_ed)},{kept}")  # type: ignore[arg-type]
        )
        kids = [key["kid"] for key in json.loads(signer.jwks_document)["keys"]]
        assert len(kids) == 4
        assert kids[0] == signer.current.kid
        assert verify_offline(old_signed, signer.jwks_document.decode()) == {"n": 1}
        assert jwt.get_unverified_header(signer.sign(b"{}"))["kid"] == signer.current.kid

    def test_an_unreadable_previous_key_names_its_entry(self, tmp_path: Path) -> None:
        with pytest.raises(ConfigurationError, match="PETRECORDS_SIGNING_PREVIOUS_KEYS entry 2: cannot read"):
            load_signer(
                _settings(tmp_path, signing_previous_keys=f"{_public_pem(ed25519.Ed25519PrivateKey.generate())},/nope")  # type: ignore[arg-type]
            )


def _first_start(path: str) -> str:
    return (
        load_or_create_key(Path(path))
        .public_key()
        .public_bytes(  # type: ignore[union-attr]
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        .hex()
    )


class TestGeneratedKey:
    def test_made_on_first_start_owner_only_and_kept(self, tmp_path: Path) -> None:
        first = load_signer(_settings(tmp_path / "data"))
        path = tmp_path / "data" / "signing-key.pem"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert load_signer(_settings(tmp_path / "data")).current.kid == first.current.kid
        assert [entry.name for entry in path.parent.iterdir()] == ["signing-key.pem"]

    def test_workers_starting_at_once_agree_on_one_key(self, tmp_path: Path) -> None:
        path = str(tmp_path / "data" / "signing-key.pem")
        with multiprocessing.get_context("spawn").Pool(4) as pool:
            keys = pool.map(_first_start, [path] * 8)
        assert len(set(keys)) == 1
        assert [entry.name for entry in (tmp_path / "data").iterdir()] == ["signing-key.pem"]

    def test_a_data_directory_that_cannot_be_written_is_one_line(self, tmp_path: Path) -> None:
        blocked = tmp_path / "file"
        blocked.write_text("")
        with pytest.raises(
            ConfigurationError, match=r"cannot (read|create) the certificate signing key .*signing-key\.pem"
        ):
            load_signer(_settings(blocked / "data"))
