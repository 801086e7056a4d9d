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

from petrecords.auth import Caller, CallerClaims, invalid_token_is_unauthenticated, unverified_header
from petrecords.config import ASYMMETRIC_ALGORITHMS, Settings

logger = logging.getLogger("petrecords.jwks")

_MAX_JWKS_BYTES = 512 * 1024


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

    async def key_for(self, kid: str | None, algorithm: str) -> jwt.PyJWK | None:
        """The key `kid` for verifying with `algorithm`, or None when there is no such usable key."""
        now = time.monotonic()
        stale = now - self._fetched_at > self._lifespan
        if (kid not in self._entries or stale) and now - self._attempted_at >= self._cooldown:
            async with self._lock:
                # Another request may have refreshed while this one waited for the lock.
                if time.monotonic() - self._attempted_at >= self._cooldown:
                    await self._refresh()
        cached = self._keys.get((kid, algorithm))
        if cached is not None:
            return cached
        entry = self._entries.get(kid)
        if entry is None or entry.get("alg", algorithm) != algorithm:
            return None
        try:
            # Building the key for the token's algorithm also checks that the key's type fits it.
            key = jwt.PyJWK(entry, algorithm=algorithm)
        except jwt.PyJWTError:
            return None
        self._keys[(kid, algorithm)] = key
        return key

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
            logger.warning("could not refresh the JWKS from %s: %s", self._url, type(exc).__name__)
            return
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
            if entry.get("kty") not in ("RSA", "EC", "OKP"):
                continue  # a shared secret ("oct") has no place in a public key set
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

    async def verify(self, token: str) -> Caller:
        with invalid_token_is_unauthenticated():
            header = unverified_header(token)
            algorithm = header.get("alg")
            if not isinstance(algorithm, str) or algorithm not in self._algorithms:
                raise jwt.InvalidAlgorithmError("algorithm not allowed")
            kid = header.get("kid")
            key = await self.keys.key_for(kid if isinstance(kid, str) else None, algorithm)
            if key is None:
                raise jwt.InvalidKeyError("unknown signing key")
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
