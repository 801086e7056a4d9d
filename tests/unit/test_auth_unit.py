"""Local tokens and the local signing secret (petrecords.auth), without HTTP."""

from __future__ import annotations

import inspect
import stat
import threading
import time
from pathlib import Path
from typing import Any

import jwt
import pytest

from petrecords.auth import (
    MIN_SECRET_BYTES,
    Caller,
    LocalTokenVerifier,
    issue_local_token,
    load_or_create_secret,
)
from petrecords.config import ConfigurationError, Settings
from petrecords.errors import Unauthenticated
from tests.support import SECRET


def _in_an_hour() -> int:
    """An `exp` well within the longest token lifetime the service accepts."""
    return int(time.time()) + 3600


async def _verify(verifier: LocalTokenVerifier, presented: str) -> Caller:
    result = verifier.verify(presented)
    # The verifier interface is asynchronous (an identity provider's keys may need fetching); accept either.
    caller: Caller = await result if inspect.isawaitable(result) else result
    return caller


def _settings(data_dir: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {"data_dir": data_dir, "auth_secret": None, "_env_file": None}
    values.update(overrides)
    return Settings(**values)


class TestLocalTokens:
    @pytest.mark.parametrize("admin", [False, True])
    async def test_round_trip(self, tmp_path: Path, admin: bool) -> None:
        settings = _settings(tmp_path, auth_secret=SECRET)
        secret = load_or_create_secret(settings)
        issued = issue_local_token(secret, user="Alice@Example.COM", admin=admin, ttl_seconds=60, settings=settings)
        caller = await _verify(LocalTokenVerifier(secret, settings), issued)
        assert (caller.email, caller.is_admin) == ("alice@example.com", admin)

    def test_token_carries_exp_iat_and_roles(self, tmp_path: Path) -> None:
        settings = _settings(tmp_path, auth_secret=SECRET)
        issued = issue_local_token(
            SECRET.encode(), user="bob@example.com", admin=True, ttl_seconds=120, settings=settings
        )
        assert jwt.get_unverified_header(issued)["alg"] == "HS256"
        claims = jwt.decode(issued, SECRET, algorithms=["HS256"])
        assert claims["sub"] == "bob@example.com"
        assert claims["roles"] == ["admin"]
        assert abs(claims["exp"] - (time.time() + 120)) <= 5
        assert claims["exp"] - claims["iat"] == 120

    async def test_configured_claims(self, tmp_path: Path) -> None:
        settings = _settings(
            tmp_path, auth_secret=SECRET, auth_user_claim="email", auth_roles_claim="groups", auth_admin_role="root"
        )
        secret = load_or_create_secret(settings)
        issued = issue_local_token(secret, user="carol@example.com", admin=True, ttl_seconds=60, settings=settings)
        claims = jwt.decode(issued, SECRET, algorithms=["HS256"])
        assert claims["email"] == "carol@example.com"
        assert claims["groups"] == ["root"]
        caller = await _verify(LocalTokenVerifier(secret, settings), issued)
        assert (caller.email, caller.is_admin) == ("carol@example.com", True)

    @pytest.mark.parametrize("user", ["alice", "", "alice@example", "Alice <alice@example.com>"])
    def test_user_must_be_an_email(self, tmp_path: Path, user: str) -> None:
        settings = _settings(tmp_path, auth_secret=SECRET)
        with pytest.raises(ValueError, match="e-mail"):
            issue_local_token(SECRET.encode(), user=user, admin=False, ttl_seconds=60, settings=settings)

    async def test_other_secret_is_refused(self, tmp_path: Path) -> None:
        settings = _settings(tmp_path, auth_secret=SECRET)
        other = b"another-secret-that-is-long-enough-0123456789"
        issued = issue_local_token(other, user="alice@example.com", admin=False, ttl_seconds=60, settings=settings)
        with pytest.raises(Unauthenticated) as caught:
            await _verify(LocalTokenVerifier(SECRET.encode(), settings), issued)
        assert caught.value.headers["WWW-Authenticate"] == 'Bearer error="invalid_token"'
        assert (caught.value.status, caught.value.code) == (401, 997)

    async def test_expired_beyond_the_leeway_is_refused(self, tmp_path: Path) -> None:
        settings = _settings(tmp_path, auth_secret=SECRET, auth_leeway_seconds=30)
        issued = issue_local_token(
            SECRET.encode(), user="alice@example.com", admin=False, ttl_seconds=-60, settings=settings
        )
        with pytest.raises(Unauthenticated, match="expired"):
            await _verify(LocalTokenVerifier(SECRET.encode(), settings), issued)

    async def test_expired_within_the_leeway_is_accepted(self, tmp_path: Path) -> None:
        settings = _settings(tmp_path, auth_secret=SECRET, auth_leeway_seconds=30)
        issued = issue_local_token(
            SECRET.encode(), user="alice@example.com", admin=False, ttl_seconds=-5, settings=settings
        )
        assert (await _verify(LocalTokenVerifier(SECRET.encode(), settings), issued)).email == "alice@example.com"

    @pytest.mark.parametrize(
        "claims",
        [
            {"sub": "alice@example.com"},  # no exp
            {"exp": _in_an_hour()},  # no sub
            {"sub": "alice", "exp": _in_an_hour()},
            {"sub": 5, "exp": _in_an_hour()},
            {"sub": "alice@example.com", "exp": _in_an_hour(), "roles": "admin"},
        ],
    )
    async def test_bad_claims_are_refused(self, tmp_path: Path, claims: dict[str, Any]) -> None:
        settings = _settings(tmp_path, auth_secret=SECRET)
        with pytest.raises(Unauthenticated):
            await _verify(LocalTokenVerifier(SECRET.encode(), settings), jwt.encode(claims, SECRET, algorithm="HS256"))

    @pytest.mark.parametrize("algorithm", ["HS384", "HS512"])
    async def test_algorithm_is_pinned(self, tmp_path: Path, algorithm: str) -> None:
        long_secret = "k" * 64  # long enough for every HMAC size, so PyJWT does not warn
        settings = _settings(tmp_path, auth_secret=long_secret)
        issued = jwt.encode({"sub": "alice@example.com", "exp": _in_an_hour()}, long_secret, algorithm=algorithm)
        verifier = LocalTokenVerifier(long_secret.encode(), settings)
        with pytest.raises(Unauthenticated):
            await _verify(verifier, issued)
        same = jwt.encode({"sub": "alice@example.com", "exp": _in_an_hour()}, long_secret, algorithm="HS256")
        assert (await _verify(verifier, same)).email == "alice@example.com"

    async def test_alg_none_is_refused(self, tmp_path: Path) -> None:
        settings = _settings(tmp_path, auth_secret=SECRET)
        unsigned = jwt.encode({"sub": "alice@example.com", "exp": _in_an_hour()}, None, algorithm="none")
        with pytest.raises(Unauthenticated):
            await _verify(LocalTokenVerifier(SECRET.encode(), settings), unsigned)

    async def test_critical_header_is_refused(self, tmp_path: Path) -> None:
        settings = _settings(tmp_path, auth_secret=SECRET)
        issued = jwt.encode(
            {"sub": "alice@example.com", "exp": _in_an_hour()},
            SECRET,
            algorithm="HS256",
            headers={"crit": ["exp"]},
        )
        with pytest.raises(Unauthenticated):
            await _verify(LocalTokenVerifier(SECRET.encode(), settings), issued)

    @pytest.mark.parametrize("garbage", ["", "x", "a.b.c", "eyJhbGciOiJIUzI1NiJ9..", "🔑"])
    async def test_garbage_is_refused(self, tmp_path: Path, garbage: str) -> None:
        settings = _settings(tmp_path, auth_secret=SECRET)
        with pytest.raises(Unauthenticated):
            await _verify(LocalTokenVerifier(SECRET.encode(), settings), garbage)


class TestLoadOrCreateSecret:
    def test_creates_an_owner_only_file_once(self, tmp_path: Path) -> None:
        data_dir = tmp_path / "data" / "nested"
        settings = _settings(data_dir)
        secret = load_or_create_secret(settings)
        path = settings.secret_file
        assert path.parent == data_dir
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert len(secret) >= MIN_SECRET_BYTES
        content = path.read_bytes()
        assert load_or_create_secret(settings) == secret
        assert load_or_create_secret(_settings(data_dir)) == secret
        assert path.read_bytes() == content
        assert stat.S_IMODE(path.stat().st_mode) == 0o600

    def test_each_data_directory_gets_its_own_random_secret(self, tmp_path: Path) -> None:
        assert load_or_create_secret(_settings(tmp_path / "a")) != load_or_create_secret(_settings(tmp_path / "b"))

    async def test_tokens_survive_a_restart(self, tmp_path: Path) -> None:
        first = _settings(tmp_path)
        issued = issue_local_token(
            load_or_create_secret(first), user="alice@example.com", admin=False, ttl_seconds=60, settings=first
        )
        later = _settings(tmp_path)
        assert (
            await _verify(LocalTokenVerifier(load_or_create_secret(later), later), issued)
        ).email == "alice@example.com"

    def test_concurrent_first_starts_agree(self, tmp_path: Path) -> None:
        settings = _settings(tmp_path)
        barrier = threading.Barrier(8)
        results: list[bytes] = []

        def start() -> None:
            barrier.wait()
            results.append(load_or_create_secret(settings))

        threads = [threading.Thread(target=start) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(results) == 8
        assert len(set(results)) == 1

    def test_configured_secret_is_used_and_no_file_written(self, tmp_path: Path) -> None:
        settings = _settings(tmp_path, auth_secret=SECRET)
        assert load_or_create_secret(settings) == SECRET.encode()
        assert not settings.secret_file.exists()

    @pytest.mark.parametrize("secret", ["short", "x" * (MIN_SECRET_BYTES - 1)])
    def test_too_short_configured_secret(self, tmp_path: Path, secret: str) -> None:
        with pytest.raises(ConfigurationError, match="PETRECORDS_AUTH_SECRET"):
            load_or_create_secret(_settings(tmp_path, auth_secret=secret))

    def test_secret_of_exactly_the_minimum_length(self, tmp_path: Path) -> None:
        secret = "s" * MIN_SECRET_BYTES
        assert load_or_create_secret(_settings(tmp_path, auth_secret=secret)) == secret.encode()
