"""Signing deliveries the Standard Webhooks way, and checking a signature as a receiver does.

A delivery carries three headers: `webhook-id` (the change's stable id), `webhook-timestamp` (Unix seconds of the
attempt) and `webhook-signature`: `v1,` and the base64 HMAC-SHA256, keyed with the secret's decoded bytes, of
`{webhook-id}.{webhook-timestamp}.{body}`; while a secret is being replaced, one such signature for each secret,
space-separated, so that a receiver that knows either accepts the delivery. The specification:
https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md."""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import secrets
import time
from collections.abc import Mapping, Sequence

SECRET_PREFIX = "whsec_"  # noqa: S105 - what every secret starts with, not one
SECRET_BYTES = 32
TOLERANCE_SECONDS = 300
"""How far from the receiver's clock a delivery's timestamp may be, either way (the specification's libraries' five
minutes): an older delivery may be a replay."""

ID_HEADER = "webhook-id"
TIMESTAMP_HEADER = "webhook-timestamp"
SIGNATURE_HEADER = "webhook-signature"


class SignatureInvalid(Exception):
    """A delivery that does not prove it comes from the holder of the secret; the message says why."""


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode("ascii")


@functools.lru_cache(maxsize=1024)
def secret_key(secret: str) -> bytes:
    """The key a secret stands for: the bytes that the base64 after `whsec_` encodes (the prefix may be left out,
    as the specification's libraries allow). A ValueError when it is no such thing."""
    try:
        key = base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
    except ValueError:  # binascii.Error, or text that is not ASCII
        raise ValueError("a webhook secret is whsec_ followed by base64") from None
    if not key:
        raise ValueError("a webhook secret is whsec_ followed by base64")
    return key


def _signature(key: bytes, message_id: str, timestamp: int, body: bytes) -> str:
    digest = hmac.new(key, f"{message_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def signature(secret: str, *, message_id: str, timestamp: int, body: bytes) -> str:
    """`v1,` and the base64 HMAC-SHA256 of `{message_id}.{timestamp}.{body}`, keyed with the secret's bytes."""
    if "." in message_id:
        # The id ends where the first full stop is: one that held one could pass for another id and timestamp.
        raise ValueError("a webhook id must not contain a full stop")
    return _signature(secret_key(secret), message_id, timestamp, body)


def signed_headers(secrets: Sequence[str], *, message_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three headers of a delivery, signed with each of the secrets (the current one first)."""
    if not secrets:
        raise ValueError("a delivery is signed with at least one secret")
    signatures = " ".join(
        signature(secret, message_id=message_id, timestamp=timestamp, body=body) for secret in secrets
    )
    return {ID_HEADER: message_id, TIMESTAMP_HEADER: str(timestamp), SIGNATURE_HEADER: signatures}


def verify(
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    tolerance_seconds: float = TOLERANCE_SECONDS,
    now: float | None = None,
) -> None:
    """Check a delivery as its receiver does, with the body exactly as it arrived (before any JSON parsing): its
    timestamp within `tolerance_seconds` of now, and one of its signatures made with `secret`. Raises
    SignatureInvalid otherwise. `headers` may be any mapping with an `items()`, whatever the case of its names."""
    named = {name.lower(): value for name, value in headers.items()}
    message_id, timestamp, signatures = (
        named.get(name, "") for name in (ID_HEADER, TIMESTAMP_HEADER, SIGNATURE_HEADER)
    )
    if not (message_id and timestamp and signatures):
        raise SignatureInvalid("the webhook-id, webhook-timestamp and webhook-signature headers are required")
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12):
        raise SignatureInvalid("webhook-timestamp must be a number of seconds since 1970")
    if abs((time.time() if now is None else now) - int(timestamp)) > tolerance_seconds:
        raise SignatureInvalid("webhook-timestamp is too far from now: a replay, or a clock that is wrong")
    expected = _signature(secret_key(secret), message_id, int(timestamp), body).encode()
    # Compared in constant time, so that how long a refusal takes tells nothing about the right signature.
    if not any(hmac.compare_digest(expected, given.encode()) for given in signatures.split(" ")):
        raise SignatureInvalid("no signature in webhook-signature matches the body and the secret")
