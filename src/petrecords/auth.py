"""Bearer tokens: who the caller is and whether they are the administrator."""

from __future__ import annotations

import base64
import contextlib
import math
import os
import re
import secrets
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import jwt
import msgspec

from petrecords.config import ConfigurationError, Settings
from petrecords.errors import Unauthenticated
from petrecords.values import normalize_email

LOCAL_ALGORITHM = "HS256"
MIN_SECRET_BYTES = 32


class Caller(msgspec.Struct, frozen=True):
    email: str
    is_admin: bool
    expires_at: float = math.inf
    """When the token that names the caller expires (its `exp`, seconds since 1970)."""
    groups: tuple[str, ...] = ()
    """The groups the token lists (a clinic, say): a share to `group:NAME` grants to each of their members."""

    @property
    def grantees(self) -> tuple[str, ...]:
        """Every grantee a share may name to grant to this caller: the caller, and each of their groups."""
        return (self.email, *(GROUP_PREFIX + group for group in self.groups))


GROUP_PREFIX = "group:"
GROUP_NAME = re.compile(r"[A-Za-z0-9._:@-]{1,100}")
"""A group's name: 1–100 characters of letters, digits and `. _ : @ -`, compared exactly, case included."""
MAX_GROUPS = 100


def load_or_create_secret(settings: Settings) -> bytes:
    """The local signing secret: from the settings, else from the data directory, created on first use.

    Creation is atomic (O_EXCL), so concurrent first starts agree on one secret.
    """
    if settings.auth_secret is not None:
        return _configured_secret(settings)
    path = settings.secret_file
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _read_secret_file(path)
    except OSError as exc:
        raise ConfigurationError(
            f"PETRECORDS_DATA_DIR: cannot create the signing secret {path.resolve()}: {exc.strerror or exc}"
        ) from None
    with os.fdopen(fd, "w") as handle:
        handle.write(base64.urlsafe_b64encode(secrets.token_bytes(48)).decode() + "\n")
    return _read_secret_file(path)


def find_secret(settings: Settings) -> tuple[bytes, str]:
    """The secret that a server with these settings signs with, without ever creating one, and where it was
    found (for the operator, who must give every instance and every token the same one)."""
    if settings.auth_secret is not None:
        return _configured_secret(settings), "PETRECORDS_AUTH_SECRET"
    path = settings.secret_file.resolve()
    if not path.exists():
        raise ConfigurationError(
            f"no signing secret: PETRECORDS_AUTH_SECRET is unset and {path} does not exist; start the server once "
            "with this PETRECORDS_DATA_DIR, run this command where the server runs, or set PETRECORDS_AUTH_SECRET"
        )
    return _read_secret_file(path), str(path)


def _configured_secret(settings: Settings) -> bytes:
    if settings.auth_secret is None:
        raise ConfigurationError("PETRECORDS_AUTH_SECRET is unset")
    secret = settings.auth_secret.get_secret_value().encode()
    if len(secret) < MIN_SECRET_BYTES:
        raise ConfigurationError(
            f"PETRECORDS_AUTH_SECRET must be at least {MIN_SECRET_BYTES} bytes long (it is {len(secret)})"
        )
    return secret


def _read_secret_file(path: Path) -> bytes:
    for _ in range(50):
        try:
            secret = path.read_text().strip().encode()
        except OSError as exc:
            raise ConfigurationError(
                f"cannot read the signing secret {path.resolve()}: {exc.strerror or exc}"
            ) from None
        if secret:
            return secret
        time.sleep(0.01)  # another process created the file and is still writing it
    raise ConfigurationError(f"the signing secret {path.resolve()} is empty")


def issue_local_token(
    secret: bytes, *, user: str, admin: bool, ttl_seconds: int, settings: Settings, groups: Sequence[str] = ()
) -> str:
    email = normalize_email(user)
    if email is None:
        raise ValueError(f"{user!r} is not an e-mail address")
    for group in groups:
        if not GROUP_NAME.fullmatch(group):
            raise ValueError(f"{group!r} is not a group name (1-100 characters of letters, digits and . _ : @ -)")
    now = int(time.time())
    claims: dict[str, Any] = {
        settings.auth_user_claim: email,
        settings.auth_roles_claim: [settings.auth_admin_role] if admin else [],
        "iat": now,
        "exp": now + ttl_seconds,
    }
    if groups:
        claims[settings.auth_groups_claim] = list(dict.fromkeys(groups))
    return jwt.encode(claims, secret, algorithm=LOCAL_ALGORITHM)


def bearer_token(authorizations: list[str]) -> str:
    """The token of the request's Authorization headers. Several of them are refused: a proxy or an audit
    log that reads another one than this service would see another caller."""
    if len(authorizations) > 1:
        raise Unauthenticated("Send exactly one Authorization header.", token_sent=True)
    authorization = authorizations[0] if authorizations else None
    if not authorization:
        raise Unauthenticated(token_sent=False)
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token:
        raise Unauthenticated("The Authorization header must be 'Bearer <token>'.", token_sent=True)
    return token


class TokenVerifier(Protocol):
    async def verify(self, token: str) -> Caller:
        """The caller the token names; raises Unauthenticated when the token is not valid."""
        ...


class KeyedTokenVerifier(TokenVerifier, Protocol):
    """A verifier that says when the keys it verifies with change: what VerifiedTokenCache wraps."""

    @property
    def keys_version(self) -> int:
        """Changes whenever the set of keys that tokens are verified with changes."""
        ...

    @property
    def keys_checked_until(self) -> float:
        """Until when (`time.time()`) the keys are known to be current: after it, a verification looks again."""
        ...


class CallerClaims:
    """How a verified token names its caller: the settings both kinds of verifier share."""

    def __init__(self, settings: Settings) -> None:
        self.user_claim = settings.auth_user_claim
        self.roles_claim = settings.auth_roles_claim
        self.groups_claim = settings.auth_groups_claim
        self.admin_role = settings.auth_admin_role
        self.leeway = settings.auth_leeway_seconds
        self.max_lifetime = settings.auth_max_token_lifetime_seconds

    def required(self, *others: str) -> list[str]:
        return ["exp", self.user_claim, *others]

    def caller(self, claims: dict[str, Any]) -> Caller:
        self._check_times(claims)
        subject = claims.get(self.user_claim)
        email = normalize_email(subject) if isinstance(subject, str) else None
        if email is None:
            raise Unauthenticated(f"The token's '{self.user_claim}' claim must be an e-mail address.", token_sent=True)
        roles = claims.get(self.roles_claim, [])
        if not isinstance(roles, list) or not all(isinstance(role, str) for role in roles):
            raise Unauthenticated(f"The token's '{self.roles_claim}' claim must be a list of strings.", token_sent=True)
        groups = claims.get(self.groups_claim, [])
        if (
            not isinstance(groups, list)
            or len(groups) > MAX_GROUPS
            or not all(isinstance(group, str) and GROUP_NAME.fullmatch(group) for group in groups)
        ):
            raise Unauthenticated(
                f"The token's '{self.groups_claim}' claim must be a list of group names (1-100 characters of letters, "
                f"digits and . _ : @ -), at most {MAX_GROUPS}.",
                token_sent=True,
            )
        return Caller(
            email=email,
            is_admin=self.admin_role in roles,
            expires_at=float(claims["exp"]),
            groups=tuple(dict.fromkeys(groups)),
        )

    def _check_times(self, claims: dict[str, Any]) -> None:
        """RFC 7519 makes `exp`, `nbf` and `iat` NumericDates: JSON numbers, which the signature library
        would also take from strings. A token may live at most `max_lifetime` seconds, counted from its
        `iat`, or from now when it has none: a stolen long-lived token is a standing credential."""
        for name in ("exp", "nbf", "iat"):
            value = claims.get(name)
            if name in claims and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise Unauthenticated(
                    f"The token's '{name}' claim must be a number (seconds since 1970).", token_sent=True
                )
        # Without `iat`, the issuer's clock may run ahead of this one by the leeway.
        lifetime = claims["exp"] - claims["iat"] if "iat" in claims else claims["exp"] - time.time() - self.leeway
        if lifetime > self.max_lifetime:
            raise Unauthenticated(
                f"The bearer token's lifetime exceeds the allowed maximum of {self.max_lifetime} seconds.",
                token_sent=True,
            )


def unverified_header(token: str) -> dict[str, Any]:
    header = jwt.get_unverified_header(token)
    if "crit" in header:
        # No extension is understood here, so a token that makes one critical is refused (RFC 7515 4.1.11).
        raise jwt.InvalidTokenError("unsupported critical header")
    return header


@contextlib.contextmanager
def invalid_token_is_unauthenticated() -> Iterator[None]:
    try:
        yield
    except jwt.ExpiredSignatureError:
        raise Unauthenticated("The bearer token has expired.", token_sent=True) from None
    except jwt.PyJWTError:
        raise Unauthenticated("The bearer token is not valid.", token_sent=True) from None


class LocalTokenVerifier:
    """HS256 tokens signed with the local secret. Only that algorithm is accepted."""

    # The secret is read once, when the process starts.
    keys_version = 0
    keys_checked_until = math.inf

    def __init__(self, secret: bytes, settings: Settings) -> None:
        self._secret = secret
        self._claims = CallerClaims(settings)

    async def verify(self, token: str) -> Caller:
        with invalid_token_is_unauthenticated():
            unverified_header(token)
            claims = jwt.decode(
                token,
                self._secret,
                algorithms=[LOCAL_ALGORITHM],
                leeway=self._claims.leeway,
                options={"require": self._claims.required(), "verify_aud": False},
            )
        return self._claims.caller(claims)


class VerifiedTokenCache:
    """Remembers the caller of each token that verified, until the token's own expiry or until the keys it was
    verified with may have changed, whichever comes first.

    Checking a signature costs more than the rest of a typical request, and a client sends the same
    token many times. Only tokens that passed every check are kept, so a flood of bad tokens neither
    fills the cache nor skips a check; the oldest entries go first when it is full. When the verifier's
    keys change (a JWKS fetched anew that differs), every kept token is forgotten: one signed by a key that
    left the set is refused from then on. Past the time the keys are known to be current (the JWKS cache's
    lifespan), a kept token is verified again, which fetches the keys again.
    """

    def __init__(self, verifier: KeyedTokenVerifier, *, max_entries: int = 10_000) -> None:
        self._verifier = verifier
        self._max_entries = max_entries
        self._entries: dict[str, tuple[Caller, float]] = {}
        self._keys_version = verifier.keys_version

    def _keys_unchanged(self) -> None:
        """Forget every kept token if the keys changed since they were verified."""
        version = self._verifier.keys_version
        if version != self._keys_version:
            self._entries.clear()
            self._keys_version = version

    async def verify(self, token: str) -> Caller:
        self._keys_unchanged()
        entry = self._entries.get(token)
        if entry is not None:
            if time.time() < entry[1]:
                return entry[0]
            del self._entries[token]
        caller = await self._verifier.verify(token)
        self._keys_unchanged()
        expires_at = jwt.decode(token, options={"verify_signature": False}).get("exp")
        if isinstance(expires_at, int | float):
            if len(self._entries) >= self._max_entries:
                del self._entries[next(iter(self._entries))]
            self._entries[token] = (caller, min(float(expires_at), self._verifier.keys_checked_until))
        return caller
