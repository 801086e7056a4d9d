"""The tokens of certificate links: made at random, kept as a hash, compared in constant time, never logged.

A link is `/public/certificates/{token}`, the token 32 random bytes in URL-safe base64 (43 characters, 256 bits).
The database keeps only the SHA-256 of the token: a copy of the database (a backup, a leak, an export) opens no
link, and an export imported elsewhere keeps every link working, since the token hashes alike there. With 256 random
bits a plain hash is enough; a slow, salted one would only slow the lookup, which must stay one indexed read.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

PUBLIC_PREFIX = "/public/certificates/"
"""The path of every link, before its token."""
TOKEN_BYTES = 32
TOKEN_LENGTH = 43
"""The length of a token in characters: 32 bytes in base64 without padding."""
_TOKEN = re.compile(r"[A-Za-z0-9_-]{43}")
REDACTED = "…"
"""What the access log shows in place of a token."""


def new_token() -> str:
    """A new link token: 256 bits from the operating system's random source."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def link_of(token: str) -> str:
    return PUBLIC_PREFIX + token


def digest_of(token: str) -> str:
    """What the database keeps of a token, and looks it up by: its SHA-256, 64 hexadecimal digits."""
    return hashlib.sha256(token.encode("ascii")).hexdigest()


def well_formed(token: str) -> bool:
    """Whether `token` could be one this service made: anything else is unknown (404) without a database read."""
    return _TOKEN.fullmatch(token) is not None


def matches(digest: str, kept_digest: str) -> bool:
    """Whether a token's digest (digest_of) is the one kept, in time that does not depend on where they differ.

    The lookup by digest already found the record; this check after it keeps a database whose index compares
    loosely (a collation, a prefix) from ever opening a link with another token."""
    return hmac.compare_digest(digest.encode(), kept_digest.encode())


def redact_path(path: str) -> str:
    """A request path as the access log may show it: whatever follows `/public/certificates/` replaced by `…`.

    Matched whatever the letter case and the repeated slashes, as a client may send them: a mistyped link is
    answered 404, and must not leave its token in the log either."""
    lowered = path.lower()
    start = lowered.find("/certificates/")
    while start >= 0:
        if lowered[:start].rstrip("/").endswith("/public"):
            return path[: start + len("/certificates/")] + REDACTED
        start = lowered.find("/certificates/", start + 1)
    return path
