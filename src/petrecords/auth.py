"""Bearer tokens: who the caller is and whether they are the administrator."""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import logging
import math
import os
import re
import secrets
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import jwt
import msgspec
from jwt.exceptions import InvalidJTIError, InvalidSubjectError

from petrecords.config import MIN_SECRET_BYTES, ConfigurationError, Settings
from petrecords.errors import Unauthenticated
from petrecords.values import normalize_email

_log = logging.getLogger("petrecords.auth")

LOCAL_ALGORITHM = "HS256"


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
GROUP_NAME = re.compile(r"[A-Za-z0-9._:@-][A-Za-z0-9._:@/-]{0,99}")
"""A group's name: 1–100 characters of letters, digits and `. _ : @ - /`, compared exactly, case included. It does
not start with `/`, which a token may write before it (group_name)."""
GROUP_NAME_RULE = "1-100 characters of letters, digits and . _ : @ - /"
MAX_GROUPS = 100


def group_name(value: str) -> str | None:
    """The group `value` names, or None when it names none. One leading `/` is not part of the name: Keycloak
    writes a group as its full path (`/clinic-42`, `/clinics/north`), where other providers write `clinic-42`."""
    name = value[1:] if value.startswith("/") else value
    return name if GROUP_NAME.fullmatch(name) else None


def user_or_group(value: str) -> str | None:
    """The owner or grantee `value` names: a user by e-mail address (in lower case), or everyone whose token lists a
    group, as `group:NAME` (the name as `group_name` reads it); None when it names neither."""
    if value.startswith(GROUP_PREFIX):
        name = group_name(value.removeprefix(GROUP_PREFIX))
        return None if name is None else GROUP_PREFIX + name
    return normalize_email(value)


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
    names = [group_name(group) for group in groups]
    for group, name in zip(groups, names, strict=True):
        if name is None:
            raise ValueError(f"{group!r} is not a group name ({GROUP_NAME_RULE})")
    now = int(time.time())
    claims: dict[str, Any] = {
        settings.auth_user_claim: email,
        settings.auth_roles_claim: [settings.auth_admin_role] if admin else [],
        "iat": now,
        "exp": now + ttl_seconds,
    }
    if groups:
        claims[settings.auth_groups_claim] = list(dict.fromkeys(names))
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


class TokenRefused(Unauthenticated):
    """A bearer token that is not valid. Its sender is told no more than that; why is for the operator's log
    (RefusalLog): what a forged or stolen token lacks is no business of whoever sent it."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__("The bearer token is not valid.", token_sent=True)
        self.reason = reason
        """The kind of reason, one of REFUSAL_REASONS."""
        self.detail = detail
        """What was wrong, for the operator: what was expected and what the token had; never the token."""


REFUSAL_REASONS = (
    "malformed",
    "algorithm",
    "kid",
    "signature",
    "expired",
    "not_yet_valid",
    "issuer",
    "audience",
    "claim",
    "lifetime",
)
"""Why a token may be refused, as the log names it (docs/reference/tokens.md says what each means)."""


class TokenVerifier(Protocol):
    async def verify(self, token: str) -> Caller:
        """The caller the token names; raises TokenRefused when the token is not valid."""
        ...

    async def unready(self) -> str | None:
        """Why no token can be verified yet (for /readyz), or None when tokens can be."""
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


_MISSING: Any = object()


class Claim:
    """The claim a setting names: the claim of that whole name when the token has one (Auth0 namespaces its custom
    claims with dots: `https://clinic.example/roles`), else the path its dots make into nested objects
    (`realm_access.roles`, as Keycloak issues the realm's roles)."""

    def __init__(self, name: str, setting: str) -> None:
        self.name = name
        self.setting = setting
        self._path = tuple(name.split(".")) if "." in name else ()

    def find(self, claims: Mapping[str, Any]) -> Any:
        """The claim's value, or _MISSING."""
        value = claims.get(self.name, _MISSING)
        if value is _MISSING and self._path:
            value = claims
            for part in self._path:
                if not isinstance(value, dict) or part not in value:
                    return _MISSING
                value = value[part]
        return value

    def refused(self, what: str) -> TokenRefused:
        return TokenRefused("claim", f"{self.name!r} ({self.setting}) {what}")


class CallerClaims:
    """How a verified token names its caller: the settings both kinds of verifier share."""

    def __init__(self, settings: Settings) -> None:
        self.user = Claim(settings.auth_user_claim, "PETRECORDS_AUTH_USER_CLAIM")
        self.roles = Claim(settings.auth_roles_claim, "PETRECORDS_AUTH_ROLES_CLAIM")
        self.groups = Claim(settings.auth_groups_claim, "PETRECORDS_AUTH_GROUPS_CLAIM")
        self.admin_role = settings.auth_admin_role
        self.leeway = settings.auth_leeway_seconds
        self.max_lifetime = settings.auth_max_token_lifetime_seconds

    @staticmethod
    def required(*others: str) -> list[str]:
        """The claims the signature library checks are there; the caller's claim, which may be a path, is
        checked here."""
        return ["exp", *others]

    def caller(self, claims: dict[str, Any]) -> Caller:
        self._check_times(claims)
        subject = self.user.find(claims)
        if subject is _MISSING:
            raise self.user.refused(f"is missing{_email_claims(claims)}")
        email = normalize_email(subject) if isinstance(subject, str) else None
        if email is None:
            raise self.user.refused(f"is not an e-mail address{_email_claims(claims)}")
        roles = self.roles.find(claims)
        if roles is _MISSING:
            roles = []
        if not isinstance(roles, list) or not all(isinstance(role, str) for role in roles):
            raise self.roles.refused("is not a list of strings")
        return Caller(
            email=email, is_admin=self.admin_role in roles, expires_at=float(claims["exp"]), groups=self._groups(claims)
        )

    def _groups(self, claims: dict[str, Any]) -> tuple[str, ...]:
        listed = self.groups.find(claims)
        if listed is _MISSING:
            return ()
        if not isinstance(listed, list):
            raise self.groups.refused("is not a list")
        if len(listed) > MAX_GROUPS:
            raise self.groups.refused(f"lists {len(listed)} groups, more than {MAX_GROUPS}")
        names = []
        for value in listed:
            name = group_name(value) if isinstance(value, str) else None
            if name is None:
                raise self.groups.refused(f"lists {shown(value)}, which is not a group name ({GROUP_NAME_RULE})")
            names.append(name)
        return tuple(dict.fromkeys(names))

    def _check_times(self, claims: dict[str, Any]) -> None:
        """RFC 7519 makes `exp`, `nbf` and `iat` NumericDates: JSON numbers, which the signature library
        would also take from strings. A token may live at most `max_lifetime` seconds, counted from its
        `iat`, or from now when it has none: a stolen long-lived token is a standing credential."""
        for name in ("exp", "nbf", "iat"):
            value = claims.get(name)
            if name in claims and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise TokenRefused("claim", f"{name!r} is not a number (seconds since 1970)")
        # Without `iat`, the issuer's clock may run ahead of this one by the leeway.
        lifetime = claims["exp"] - claims["iat"] if "iat" in claims else claims["exp"] - time.time() - self.leeway
        if lifetime > self.max_lifetime:
            raise TokenRefused(
                "lifetime",
                f"it lives {lifetime:.0f} s, longer than PETRECORDS_AUTH_MAX_TOKEN_LIFETIME_SECONDS "
                f"({self.max_lifetime} s)",
            )


def _email_claims(claims: Mapping[str, Any]) -> str:
    """The token's claims that hold an e-mail address, as a hint for the operator who named another claim."""
    names = [name for name, value in claims.items() if isinstance(value, str) and normalize_email(value) is not None]
    return f"; claims that hold an e-mail address: {', '.join(sorted(names))}" if names else ""


SHOWN_CHARACTERS = 80


def shown(value: Any) -> str:
    """A value from a token, for a log line: as JSON, cut short (an unverified token holds whatever its sender
    made up)."""
    try:
        text = msgspec.json.encode(value).decode()
    except (TypeError, OverflowError):
        text = type(value).__name__
    return text if len(text) <= SHOWN_CHARACTERS else text[: SHOWN_CHARACTERS - 1] + "…"


def _unverified_claims(token: str) -> dict[str, Any]:
    """A refused token's claims, read without verifying anything, to say what it had."""
    try:
        return jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        return {}


def _instant(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 253402300800:
        return shown(value)
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(value))


def unverified_header(token: str) -> dict[str, Any]:
    header = jwt.get_unverified_header(token)
    if "crit" in header:
        # No extension is understood here, so a token that makes one critical is refused (RFC 7515 4.1.11).
        raise TokenRefused("malformed", f"critical extensions {shown(header['crit'])} are not understood")
    return header


def algorithm_of(header: Mapping[str, Any], allowed: Sequence[str]) -> str:
    """The token's algorithm, when it is one of `allowed` (pinned per mode)."""
    algorithm = header.get("alg")
    if not isinstance(algorithm, str) or algorithm not in allowed:
        raise TokenRefused("algorithm", f"{shown(algorithm)} is not allowed; allowed: {', '.join(allowed)}")
    return algorithm


@contextlib.contextmanager
def refusal_reasons(token: str, *, key: str, issuer: str | None = None, audience: str | None = None) -> Iterator[None]:
    """The signature library's refusals as TokenRefused, each naming its reason: for the signature, the `key` it
    was checked with; for an issuer or an audience, what was expected and what the token has."""
    try:
        yield
    except jwt.InvalidSignatureError:
        raise TokenRefused("signature", f"the signature does not verify with {key}") from None
    except jwt.ExpiredSignatureError:
        expires = _unverified_claims(token).get("exp")
        raise TokenRefused("expired", f"it expired at {_instant(expires)}") from None
    except jwt.ImmatureSignatureError as exc:
        name = "nbf" if "nbf" in str(exc) else "iat"
        found = _unverified_claims(token).get(name)
        raise TokenRefused("not_yet_valid", f"{name!r} is {_instant(found)}, still to come") from None
    except jwt.InvalidIssuerError:
        found = _unverified_claims(token).get("iss")
        raise TokenRefused("issuer", f"expected {shown(issuer)}, found {shown(found)}") from None
    except jwt.InvalidAudienceError:
        found = _unverified_claims(token).get("aud")
        raise TokenRefused("audience", f"expected {shown(audience)}, found {shown(found)}") from None
    except jwt.MissingRequiredClaimError as exc:
        raise TokenRefused("claim", f"{exc.claim!r} is missing") from None
    except (InvalidSubjectError, InvalidJTIError, jwt.InvalidIssuedAtError) as exc:
        raise TokenRefused("claim", str(exc)) from None
    except jwt.PyJWTError as exc:
        raise TokenRefused("malformed", str(exc) or type(exc).__name__) from None


def previous_secrets(settings: Settings) -> tuple[bytes, ...]:
    return tuple(secret.get_secret_value().encode() for secret in settings.auth_previous_secrets)


class LocalTokenVerifier:
    """HS256 tokens signed with the local secret, or with one of the previous secrets while a rotation runs. Only
    that algorithm is accepted."""

    # The secrets are read once, when the process starts.
    keys_version = 0
    keys_checked_until = math.inf

    def __init__(self, secret: bytes, settings: Settings) -> None:
        # The current secret first: nearly every token is signed with it.
        self._secrets = (secret, *previous_secrets(settings))
        self._claims = CallerClaims(settings)
        self._key = (
            "PETRECORDS_AUTH_SECRET or PETRECORDS_AUTH_PREVIOUS_SECRETS"
            if len(self._secrets) > 1
            else "the local secret (PETRECORDS_AUTH_SECRET or the data directory's)"
        )

    async def verify(self, token: str) -> Caller:
        with refusal_reasons(token, key=self._key):
            algorithm_of(unverified_header(token), (LOCAL_ALGORITHM,))
            claims = self._decode(token)
        return self._claims.caller(claims)

    def _decode(self, token: str) -> dict[str, Any]:
        last = len(self._secrets) - 1
        for number, secret in enumerate(self._secrets):
            try:
                return jwt.decode(
                    token,
                    secret,
                    algorithms=[LOCAL_ALGORITHM],
                    leeway=self._claims.leeway,
                    options={"require": self._claims.required(), "verify_aud": False},
                )
            except jwt.InvalidSignatureError:
                if number == last:
                    raise
        raise AssertionError("unreachable: there is always a current secret")

    async def unready(self) -> str | None:
        return None


class RefusalLog:
    """Why each token was refused, for the operator: one INFO line per refused token naming the reason, never the
    token.

    A flood of made-up tokens must not become a flood of lines: for each reason, a process writes at most `burst`
    lines at once and `per_minute` a minute beyond that (a token bucket per reason, so that the lines of a flood
    leave room for those of another reason). Past that, refusals are counted by reason, and the counts are told in
    one WARNING line `summary_seconds` after the first one that was held back.
    """

    def __init__(
        self,
        *,
        burst: int = 50,
        per_minute: int = 50,
        summary_seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._burst = burst
        self._per_minute = per_minute
        self._summary_seconds = summary_seconds
        self._clock = clock
        self._allowances: dict[str, tuple[float, float]] = {}
        """Each reason's lines still allowed, and when that was counted."""
        self._held: collections.Counter[str] = collections.Counter()
        self._summary: asyncio.TimerHandle | None = None

    def refused(self, refusal: TokenRefused, *, request_id: str) -> None:
        reason = refusal.reason
        now = self._clock()
        allowance, counted_at = self._allowances.get(reason, (float(self._burst), now))
        allowance = min(float(self._burst), allowance + (now - counted_at) * self._per_minute / 60)
        if allowance >= 1:
            self._allowances[reason] = (allowance - 1, now)
            fields = {"request_id": request_id, "reason": reason, "detail": refusal.detail}
            _log.info(
                "request %s: bearer token refused (%s): %s",
                request_id,
                reason,
                refusal.detail,
                extra={"fields": fields},
            )
            return
        self._allowances[reason] = (allowance, now)
        self._held[reason] += 1
        if self._summary is None:
            self._summary = asyncio.get_running_loop().call_later(self._summary_seconds, self.summarise)

    def summarise(self) -> None:
        """Tell the refusals held back since the last summary, if any."""
        self._summary = None
        held, self._held = self._held, collections.Counter()
        if not held:
            return
        counts = ", ".join(f"{reason} {count}" for reason, count in held.most_common())
        _log.warning(
            "%d more bearer tokens refused in %.0f s, not logged one by one (past %d lines of a reason, at most %d "
            "a minute): %s",
            sum(held.values()),
            self._summary_seconds,
            self._burst,
            self._per_minute,
            counts,
            extra={"fields": {"refused": dict(held)}},
        )


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

    async def unready(self) -> str | None:
        return await self._verifier.unready()

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
