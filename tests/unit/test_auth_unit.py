"""Local tokens and the local signing secret (petrecords.auth), without HTTP."""

from __future__ import annotations

import asyncio
import inspect
import logging
import stat
import string
import threading
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from petrecords.auth import (
    MIN_SECRET_BYTES,
    REFUSAL_REASONS,
    Caller,
    LocalTokenVerifier,
    RefusalLog,
    TokenRefused,
    find_secret,
    group_name,
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
        with pytest.raises(TokenRefused) as caught:
            await _verify(LocalTokenVerifier(SECRET.encode(), settings), issued)
        assert caught.value.reason == "expired"
        assert caught.value.message == "The bearer token is not valid."

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


def _refusal(verifier: LocalTokenVerifier, presented: str) -> TokenRefused:
    with pytest.raises(TokenRefused) as caught:
        asyncio.run(_verify(verifier, presented))
    return caught.value


class TestRefusalReasons:
    """Why a token was refused is kept for the operator's log (TokenRefused.reason and .detail), never told to its
    sender, and the detail never holds the token or a part of it."""

    @pytest.mark.parametrize(
        ("claims", "headers", "reason", "named"),
        [
            ({"exp": _in_an_hour() - 7200}, {}, "expired", "expired at 20"),
            ({"nbf": _in_an_hour()}, {}, "not_yet_valid", "'nbf'"),
            ({"sub": None}, {}, "claim", "'sub' (PETRECORDS_AUTH_USER_CLAIM) is missing"),
            ({"sub": "u-1", "email": "a@example.com"}, {}, "claim", "e-mail address: email"),
            ({"roles": "admin"}, {}, "claim", "'roles' (PETRECORDS_AUTH_ROLES_CLAIM) is not a list of strings"),
            ({"groups": ["has space"]}, {}, "claim", '"has space", which is not a group name'),
            ({"groups": ["g"] * 101}, {}, "claim", "lists 101 groups"),
            ({"iat": _in_an_hour() - 3600, "exp": _in_an_hour() + 86400 * 9}, {}, "lifetime", "longer than"),
            ({"exp": "soon"}, {}, "malformed", "exp"),
            ({}, {"crit": ["exp"]}, "malformed", "critical extension: exp"),
        ],
        ids=[
            "expired",
            "not yet valid",
            "no caller",
            "caller no e-mail",
            "roles",
            "group name",
            "too many groups",
            "lifetime",
            "exp no number",
            "crit",
        ],
    )
    def test_each_reason_is_named(
        self, tmp_path: Path, claims: dict[str, Any], headers: dict[str, Any], reason: str, named: str
    ) -> None:
        values = {"sub": "alice@example.com", "exp": _in_an_hour(), **claims}
        presented = jwt.encode(
            {name: value for name, value in values.items() if value is not None}, SECRET, headers=headers
        )

        refused = _refusal(LocalTokenVerifier(SECRET.encode(), _settings(tmp_path, auth_secret=SECRET)), presented)

        assert (refused.reason, refused.message) == (reason, "The bearer token is not valid.")
        assert named in refused.detail
        assert refused.reason in REFUSAL_REASONS
        assert not any(part and part in refused.detail for part in presented.split("."))

    @pytest.mark.parametrize(
        ("presented", "reason"),
        [
            ("Zm9vYmFy.YmF6cXV4.c2lnbmF0dXJl", "malformed"),
            (jwt.encode({"sub": "alice@example.com", "exp": _in_an_hour()}, None, algorithm="none"), "algorithm"),
            (jwt.encode({"sub": "alice@example.com", "exp": _in_an_hour()}, "o" * 40), "signature"),
        ],
        ids=["not a JWT", "alg none", "another secret"],
    )
    def test_a_token_that_cannot_be_trusted(self, tmp_path: Path, presented: str, reason: str) -> None:
        refused = _refusal(LocalTokenVerifier(SECRET.encode(), _settings(tmp_path, auth_secret=SECRET)), presented)

        assert refused.reason == reason
        assert not any(part and part in refused.detail for part in presented.split("."))


class TestClaimPaths:
    @pytest.mark.parametrize(
        ("roles_claim", "claims", "admin"),
        [
            ("realm_access.roles", {"realm_access": {"roles": ["offline_access", "admin"]}}, True),
            ("realm_access.roles", {"realm_access": {"roles": ["offline_access"]}}, False),
            ("realm_access.roles", {"realm_access": "admin"}, False),
            ("realm_access.roles", {}, False),
            ("https://clinic.example/roles", {"https://clinic.example/roles": ["admin"]}, True),
            ("https://clinic.example/roles", {"https://clinic": {"example/roles": ["admin"]}}, True),
            ("a.b", {"a.b": ["admin"], "a": {"b": []}}, True),
            ("a.b", {"a.b": [], "a": {"b": ["admin"]}}, False),
        ],
        ids=[
            "nested",
            "nested without the role",
            "through a string",
            "missing",
            "namespaced",
            "namespaced as a path",
            "whole name first",
            "whole name only",
        ],
    )
    async def test_a_roles_claim_by_name_or_path(
        self, tmp_path: Path, roles_claim: str, claims: dict[str, Any], admin: bool
    ) -> None:
        settings = _settings(tmp_path, auth_secret=SECRET, auth_roles_claim=roles_claim)
        presented = jwt.encode({"sub": "alice@example.com", "exp": _in_an_hour(), **claims}, SECRET)

        caller = await _verify(LocalTokenVerifier(SECRET.encode(), settings), presented)

        assert caller.is_admin is admin

    async def test_the_caller_and_groups_by_path(self, tmp_path: Path) -> None:
        settings = _settings(
            tmp_path, auth_secret=SECRET, auth_user_claim="profile.email", auth_groups_claim="org.groups"
        )
        claims = {"profile": {"email": "Vet@Clinic.example"}, "org": {"groups": ["/clinic-42", "/clinics/north"]}}
        presented = jwt.encode({"sub": "c0ffee", "exp": _in_an_hour(), **claims}, SECRET)

        caller = await _verify(LocalTokenVerifier(SECRET.encode(), settings), presented)

        assert (caller.email, caller.groups) == ("vet@clinic.example", ("clinic-42", "clinics/north"))

    def test_a_path_to_a_missing_caller_is_named(self, tmp_path: Path) -> None:
        settings = _settings(tmp_path, auth_secret=SECRET, auth_user_claim="profile.email")
        presented = jwt.encode({"sub": "c0ffee", "email": "a@example.com", "exp": _in_an_hour()}, SECRET)

        refused = _refusal(LocalTokenVerifier(SECRET.encode(), settings), presented)

        assert refused.detail == (
            "'profile.email' (PETRECORDS_AUTH_USER_CLAIM) is missing; claims that hold an e-mail address: email"
        )


GROUP_ALPHABET = string.ascii_letters + string.digits + "._:@-/"


class TestGroupNames:
    @given(st.text(alphabet=GROUP_ALPHABET, min_size=1, max_size=100).filter(lambda name: name[0] != "/"))
    def test_a_name_of_the_alphabet_with_or_without_one_leading_slash(self, name: str) -> None:
        assert group_name(name) == name
        assert group_name("/" + name) == name

    @given(st.text(min_size=1, max_size=100).filter(lambda name: not set(name) <= set(GROUP_ALPHABET)))
    def test_any_other_character_is_no_name(self, name: str) -> None:
        assert group_name(name) is None

    @pytest.mark.parametrize("value", ["", "/", "x" * 101, "/" + "x" * 101])
    def test_empty_or_too_long(self, value: str) -> None:
        assert group_name(value) is None

    def test_a_local_token_lists_the_names(self, tmp_path: Path) -> None:
        settings = _settings(tmp_path, auth_secret=SECRET)
        issued = issue_local_token(
            SECRET.encode(),
            user="vet@clinic.example",
            admin=False,
            ttl_seconds=60,
            settings=settings,
            groups=["/clinic-42", "clinics/north", "clinic-42"],
        )

        assert jwt.decode(issued, SECRET, algorithms=["HS256"])["groups"] == ["clinic-42", "clinics/north"]


OLD_SECRET = "the-secret-before-the-rotation-0123456789"
OLDER_SECRET = "the-secret-before-that-one-0123456789-abcd"


class TestPreviousSecrets:
    def _settings(self, tmp_path: Path, *previous: str) -> Settings:
        return _settings(tmp_path, auth_secret=SECRET, auth_previous_secrets=",".join(previous))

    @pytest.mark.parametrize("signed_with", [SECRET, OLD_SECRET, OLDER_SECRET])
    async def test_tokens_of_the_current_and_every_previous_secret_are_accepted(
        self, tmp_path: Path, signed_with: str
    ) -> None:
        settings = self._settings(tmp_path, OLD_SECRET, OLDER_SECRET)
        presented = jwt.encode({"sub": "alice@example.com", "exp": _in_an_hour()}, signed_with)

        caller = await _verify(LocalTokenVerifier(load_or_create_secret(settings), settings), presented)

        assert caller.email == "alice@example.com"

    def test_a_token_of_another_secret_is_refused_by_its_signature(self, tmp_path: Path) -> None:
        settings = self._settings(tmp_path, OLD_SECRET)
        presented = jwt.encode({"sub": "alice@example.com", "exp": _in_an_hour()}, "n" * 40)

        refused = _refusal(LocalTokenVerifier(load_or_create_secret(settings), settings), presented)

        assert refused.reason == "signature"
        assert "PETRECORDS_AUTH_PREVIOUS_SECRETS" in refused.detail

    def test_an_expired_token_of_a_previous_secret_is_refused_as_expired(self, tmp_path: Path) -> None:
        settings = self._settings(tmp_path, OLD_SECRET)
        presented = jwt.encode({"sub": "alice@example.com", "exp": _in_an_hour() - 7200}, OLD_SECRET)

        assert _refusal(LocalTokenVerifier(load_or_create_secret(settings), settings), presented).reason == "expired"

    def test_new_tokens_are_signed_with_the_current_secret(self, tmp_path: Path) -> None:
        settings = self._settings(tmp_path, OLD_SECRET)
        secret, where = find_secret(settings)

        issued = issue_local_token(secret, user="alice@example.com", admin=False, ttl_seconds=60, settings=settings)

        assert where == "PETRECORDS_AUTH_SECRET"
        assert jwt.decode(issued, SECRET, algorithms=["HS256"])["sub"] == "alice@example.com"

    def test_a_short_previous_secret_is_refused_at_start(self, tmp_path: Path) -> None:
        with pytest.raises(ValidationError, match="secret 2 of 2 is 5 bytes long"):
            self._settings(tmp_path, OLD_SECRET, "short")

    def test_previous_secrets_are_refused_with_an_identity_provider(self, tmp_path: Path) -> None:
        with pytest.raises(ValidationError, match="PETRECORDS_AUTH_PREVIOUS_SECRETS is for local tokens"):
            _settings(
                tmp_path,
                auth_mode="jwks",
                auth_jwks_url="https://id.example/jwks.json",
                auth_issuer="https://id.example/",
                auth_audience="pets",
                auth_previous_secrets=OLD_SECRET,
            )


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class TestRefusalLog:
    """One line per refused token, but a flood of them costs the log a bounded number of lines."""

    @staticmethod
    def _lines(caplog: pytest.LogCaptureFixture, level: int = logging.INFO) -> list[logging.LogRecord]:
        return [record for record in caplog.records if record.name == "petrecords.auth" and record.levelno == level]

    async def test_a_line_per_refusal_up_to_the_burst_of_each_reason(self, caplog: pytest.LogCaptureFixture) -> None:
        clock = _Clock()
        log = RefusalLog(burst=5, per_minute=60, clock=clock)
        caplog.set_level(logging.INFO, logger="petrecords.auth")

        for number in range(8):
            log.refused(TokenRefused("signature", f"made up {number}"), request_id=f"r{number}")
        log.refused(TokenRefused("issuer", "expected 'a', found 'b'"), request_id="other")

        lines = self._lines(caplog)
        assert [line.getMessage() for line in lines[:2]] == [
            "request r0: bearer token refused (signature): made up 0",
            "request r1: bearer token refused (signature): made up 1",
        ]
        assert len(lines) == 6
        assert getattr(lines[-1], "fields", None) == {
            "request_id": "other",
            "reason": "issuer",
            "detail": "expected 'a', found 'b'",
        }

    async def test_lines_come_back_at_the_rate(self, caplog: pytest.LogCaptureFixture) -> None:
        clock = _Clock()
        log = RefusalLog(burst=2, per_minute=60, clock=clock)
        caplog.set_level(logging.INFO, logger="petrecords.auth")
        for _ in range(4):
            log.refused(TokenRefused("kid", "unknown"), request_id="-")
        clock.now += 1.5  # one more line a second

        log.refused(TokenRefused("kid", "unknown"), request_id="-")
        log.refused(TokenRefused("kid", "unknown"), request_id="-")

        assert len(self._lines(caplog)) == 3

    async def test_what_was_held_back_is_told_in_one_line(self, caplog: pytest.LogCaptureFixture) -> None:
        log = RefusalLog(burst=1, per_minute=1, summary_seconds=0.05)
        caplog.set_level(logging.INFO, logger="petrecords.auth")
        for _ in range(300):
            log.refused(TokenRefused("signature", "forged"), request_id="-")
        for _ in range(20):
            log.refused(TokenRefused("malformed", "garbage"), request_id="-")

        await asyncio.sleep(0.2)

        assert len(self._lines(caplog)) == 2
        summaries = self._lines(caplog, logging.WARNING)
        assert len(summaries) == 1
        assert summaries[0].getMessage().startswith("318 more bearer tokens refused in 0 s, not logged one by one")
        assert summaries[0].getMessage().endswith(": signature 299, malformed 19")
