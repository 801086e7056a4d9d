"""Secrets kept for a while, sealed: what the idempotency store keeps of a create's answer that shows a secret
(a certificate's link, a webhook's signing secret).

Contract section 3 answers a repeated create with the original body, and sections 16 and 17 let that replay show
the secret again. The kept answer lives in the database for `PETRECORDS_IDEMPOTENCY_TTL_SECONDS` (a day by
default): kept in clear, a copy of the database (a backup, a leak) would open every link and sign as every webhook
made in that time. So the secret members are kept apart from the record's JSON, sealed with AES-256-GCM under a key
derived (HKDF-SHA256) from the certificate signing key, the one secret every instance of a deployment shares, bound
to the caller and the Idempotency-Key (a sealed value moved to another key's row does not open).

A kept answer is `record JSON` + `SEPARATOR` + nonce + ciphertext; compact JSON holds no raw line feed, so the
separator cannot occur in the record. A replay after the signing key has changed cannot open the seal: it is
answered with the record alone, without the secret (which no one can read any longer, by design).
"""

from __future__ import annotations

import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

SEPARATOR = b"\nsealed:"
_NONCE_BYTES = 12
_INFO = b"petrecords: secrets of idempotent replays"


class Sealer:
    """Seals and opens kept secrets with the key derived from `secret` (the signing key's private bytes)."""

    def __init__(self, secret: bytes) -> None:
        key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(secret)
        self._aead = AESGCM(key)

    def seal(self, plain: bytes, *, context: bytes) -> bytes:
        nonce = os.urandom(_NONCE_BYTES)
        return nonce + self._aead.encrypt(nonce, plain, context)

    def open(self, sealed: bytes, *, context: bytes) -> bytes | None:
        """The plain bytes, or None when the seal was not made with this key and context."""
        try:
            return self._aead.decrypt(sealed[:_NONCE_BYTES], sealed[_NONCE_BYTES:], context)
        except (InvalidTag, ValueError):
            return None

    def keep(self, record: bytes, secret: bytes, *, context: bytes) -> bytes:
        """What the idempotency store keeps of an answer: the record in clear, its secret members sealed."""
        return record + SEPARATOR + self.seal(secret, context=context)


def kept_parts(kept: bytes) -> tuple[bytes, bytes | None]:
    """A kept answer's record and sealed secret (None: an answer kept whole, with no secret)."""
    record, separator, sealed = kept.partition(SEPARATOR)
    return (record, sealed) if separator else (kept, None)
