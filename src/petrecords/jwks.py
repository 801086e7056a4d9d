"""Identity-provider tokens: verified against the provider's JWKS, with a pinned issuer and audience.

Only asymmetric algorithms are accepted, so a public key can never be used as an HMAC secret. Keys
come only from the configured JWKS URL; keys or URLs named by the token itself (`jwk`, `jku`, `x5u`)
are ignored. Fetched keys are cached for a lifespan; a token with an unknown `kid` triggers at most
one fetch per cooldown, and cached keys keep working while the provider is unreachable.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import jwt

from petrecords.auth import (
    Caller,
    CallerClaims,
    TokenRefused,
    algorithm_of,
    refusal_reasons,
    shown,
    unverified_header,
)
from petrecords.config import ASYMMETRIC_ALGORITHMS, Settings

logger = logging.getLogger("petrecords.jwks")

_MAX_JWKS_BYTES = 512 * 1024
_ALGORITHMS_OF_KEY_TYPE: dict[Any, tuple[str, ...]] = {
    "RSA": ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512"),
    "EC": ("ES256", "ES384"),
    "OKP": ("EdDSA",),
}


class JwksKeys:
    """The provider's signing keys by `kid`, fetched over HTTPS (or loopback HTTP) and cached."""

    def __init__(self, settings: Settings) -> None:
        if not settings.auth_jwks_url:
            raise ValueError("PETRECORDS_AUTH_JWKS_URL is required when PETRECORDS_AUTH_MODE=jwks")
        self._url = settings.auth_jwks_url
        self._lifespan = settings.auth_jwks_cache_seconds
        self._cooldown = settings.auth_jwks_refresh_cooldown_seconds
        self._timeout = settings.auth_jwks_timeout_seconds
        self._allowed = frozenset(settings.auth_algorithms)
        self._entries: dict[str | None, dict[str, Any]] = {}
        self._keys: dict[tuple[str | None, str], jwt.PyJWK] = {}
        self._fetched_at = float("-inf")
        self._attempted_at = float("-inf")
        self._lock = asyncio.Lock()
        self.fetches = 0
        self.version = 0
        """Grows whenever a fetched key set differs from the one before."""

    async def key_for(self, kid: str | None, algorithm: str) -> jwt.PyJWK:
        """The key `kid` for verifying with `algorithm`; TokenRefused when there is no such usable key."""
        if kid not in self._entries or time.monotonic() - self._fetched_at > self._lifespan:
            await self._refresh_when_allowed()
        cached = self._keys.get((kid, algorithm))
        if cached is not None:
            return cached
        entry = self._entries.get(kid)
        if entry is None:
            raise TokenRefused("kid", self._unknown(kid))
        if entry.get("alg", algorithm) != algorithm:
            raise TokenRefused(
                "algorithm", f"the token says {algorithm}, its key {shown(kid)} is for {shown(entry['alg'])}"
            )
        try:
            # Building the key for the token's algorithm also checks that the key's type fits it.
            key = jwt.PyJWK(entry, algorithm=algorithm)
        except jwt.PyJWTError:
            raise TokenRefused(
                "algorithm", f"the token says {algorithm}, which its key {shown(kid)} ({entry.get('kty')}) does not fit"
            ) from None
        self._keys[(kid, algorithm)] = key
        return key

    def _unknown(self, kid: str | None) -> str:
        named = "no kid" if kid is None else f"the kid {shown(kid)}"
        if self._fetched_at == float("-inf"):
            return f"no key set was fetched yet from {self._url}, to find {named} in"
        known = ", ".join(sorted(shown(known) for known in self._entries if known is not None)) or "none"
        return f"the key set of {self._url} has no key of {named} (its kids: {known})"

    async def unready(self) -> str | None:
        """Why no token can be verified yet: no key set with a usable key was ever fetched. Asking fetches one,
        at most once per cooldown, so that a load balancer's checks bring the instance in once the provider
        answers."""
        if not self._entries:
            await self._refresh_when_allowed()
        if self._fetched_at == float("-inf"):
            return "no key set was fetched yet from the identity provider (PETRECORDS_AUTH_JWKS_URL)"
        if not self._entries:
            return (
                "the identity provider's key set (PETRECORDS_AUTH_JWKS_URL) has no key for PETRECORDS_AUTH_ALGORITHMS"
            )
        return None

    async def _refresh_when_allowed(self) -> None:
        """Fetch the key set, unless a fetch was tried within the cooldown."""
        if time.monotonic() - self._attempted_at < self._cooldown:
            return
        async with self._lock:
            # Another request may have refreshed while this one waited for the lock.
            if time.monotonic() - self._attempted_at >= self._cooldown:
                await self._refresh()

    async def _refresh(self) -> None:
        import httpx  # here: only JWKS mode needs it, and importing it costs a tenth of a second

        self._attempted_at = time.monotonic()
        self.fetches += 1
        try:
            async with httpx.AsyncClient(timeout=self._timeout, follow_redirects=False) as client:
                response = await client.get(self._url, headers={"Accept": "application/json"})
            response.raise_for_status()
            if len(response.content) > _MAX_JWKS_BYTES:
                raise ValueError("the JWKS document is too large")
            entries = self._parse(response.json())
        except (httpx.HTTPError, ValueError, TypeError) as exc:
            # Keep the keys we have: a provider outage must not log everybody out.
            logger.warning("could not fetch the key set from %s: %s", self._url, _failure(exc))
            return
        if not entries:
            logger.warning("the key set of %s has no signing key for %s", self._url, ", ".join(sorted(self._allowed)))
        if entries != self._entries:
            self.version += 1
        self._entries = entries
        self._keys = {}
        self._fetched_at = time.monotonic()

    @property
    def checked_until(self) -> float:
        """Until when (`time.time()`) the key set is current: the last successful fetch and the cache's lifespan."""
        return time.time() + (self._fetched_at + self._lifespan - time.monotonic())

    def _parse(self, document: Any) -> dict[str | None, dict[str, Any]]:
        if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
            raise ValueError("not a JWK set")
        entries: dict[str | None, dict[str, Any]] = {}
        for entry in document["keys"]:
            if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
                continue
            # A shared secret ("oct") has no place in a public key set; nor has a key of no allowed algorithm.
            if not self._allowed.intersection(_ALGORITHMS_OF_KEY_TYPE.get(entry.get("kty"), ())):
                continue
            if "alg" in entry and entry["alg"] not in self._allowed:
                continue
            kid = entry.get("kid")
            entries[kid if isinstance(kid, str) else None] = entry
        return entries


class JwksTokenVerifier:
    def __init__(self, settings: Settings) -> None:
        if not settings.auth_issuer or not settings.auth_audience:
            raise ValueError("PETRECORDS_AUTH_ISSUER and PETRECORDS_AUTH_AUDIENCE are required in jwks mode")
        unsupported = set(settings.auth_algorithms) - ASYMMETRIC_ALGORITHMS
        if unsupported:
            raise ValueError(f"only asymmetric algorithms are allowed in jwks mode, not {sorted(unsupported)}")
        self.keys = JwksKeys(settings)
        self._issuer = settings.auth_issuer
        self._audience = settings.auth_audience
        self._algorithms = list(settings.auth_algorithms)
        self._claims = CallerClaims(settings)

    @property
    def keys_version(self) -> int:
        return self.keys.version

    @property
    def keys_checked_until(self) -> float:
        return self.keys.checked_until

    async def unready(self) -> str | None:
        return await self.keys.unready()

    async def verify(self, token: str) -> Caller:
        with refusal_reasons(token, key="the key its kid names", issuer=self._issuer, audience=self._audience):
            header = unverified_header(token)
            algorithm = algorithm_of(header, self._algorithms)
            kid = header.get("kid")
            key = await self.keys.key_for(kid if isinstance(kid, str) else None, algorithm)
            claims = jwt.decode(
                token,
                key.key,
                algorithms=[algorithm],
                audience=self._audience,
                issuer=self._issuer,
                leeway=self._claims.leeway,
                options={"require": self._claims.required("iss", "aud")},
            )
        return self._claims.caller(claims)


def _failure(exc: Exception) -> str:
    """Why a fetch failed, in a few words: the status of an answer, the kind of a failure to connect."""
    import httpx  # as in _refresh: only JWKS mode needs it

    if isinstance(exc, httpx.HTTPStatusError):
        return f"it answered {exc.response.status_code}"
    if isinstance(exc, httpx.TimeoutException):
        return "it did not answer in time (PETRECORDS_AUTH_JWKS_TIMEOUT_SECONDS)"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
