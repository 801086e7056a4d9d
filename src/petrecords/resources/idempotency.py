"""A POST made safe to retry by its `Idempotency-Key` (contract section 3): in the POST's transaction the key is
claimed, and either the answer kept for it is replayed or the new answer is kept, its secret members sealed (see
sealing.py). A resource's create and a webhook's new secret are such POSTs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from petrecords.auth import Caller
from petrecords.config import Settings
from petrecords.endpoints import Answer
from petrecords.errors import IdempotencyKeyReused
from petrecords.resources.requests import canonical_json_hash, check_idempotency_key
from petrecords.sealing import Sealer, kept_parts
from petrecords.store.base import StoredResponse, Transaction
from petrecords.values import now_ms


def with_members(record: bytes, members: Mapping[str, Any]) -> bytes:
    """A record's JSON object with more members at its end."""
    return record[:-1] + b"," + msgspec.json.encode(members)[1:]


@dataclass(frozen=True)
class IdempotentPost:
    """One POST's key, the request it stands for, and what it was used for (`kept_as`: the same key for another
    kind of POST is another request, 422)."""

    caller: Caller
    key: str
    request_hash: str
    kept_as: str
    now: int

    @classmethod
    def of(cls, caller: Caller, raw_key: str | None, *, request: Any, kept_as: str) -> IdempotentPost | None:
        """None without a key; 400 for a malformed one."""
        if raw_key is None:
            return None
        key = check_idempotency_key(raw_key)
        return cls(caller, key, canonical_json_hash(request), kept_as, now_ms())

    @property
    def _sealed_for(self) -> bytes:
        """What a kept secret is bound to: the caller and the key of the POST that made it."""
        return msgspec.json.encode([self.caller.email, self.key])

    async def replay(self, tx: Transaction, sealer: Sealer | None) -> Answer | None:
        """The answer kept for this key, or None when the key is free and now held by `tx` (409 while another
        transaction holds it; 422 when it was used for another request)."""
        stored = await tx.claim_idempotency_key(self.caller.email, self.key, now_ms=self.now)
        if stored is None:
            return None
        if stored.request_hash != self.request_hash or stored.resource != self.kept_as:
            raise IdempotencyKeyReused()
        headers = {"Idempotent-Replayed": "true"}
        headers.update({name: value for name, value in (("Location", stored.location), ("ETag", stored.etag)) if value})
        return Answer(stored.status, self._replayed(stored.body, sealer), headers)

    def _replayed(self, kept: bytes, sealer: Sealer | None) -> bytes:
        record, sealed = kept_parts(kept)
        if sealed is None or sealer is None:
            return record
        secret = sealer.open(sealed, context=self._sealed_for)
        if secret is None:  # sealed with a signing key since replaced: no one can read it any longer
            return record
        return with_members(record, msgspec.json.decode(secret))

    async def keep(
        self,
        tx: Transaction,
        settings: Settings,
        sealer: Sealer | None,
        answer: Answer,
        *,
        record: bytes,
        shown: Mapping[str, Any],
    ) -> None:
        """Keep `answer` (whose body is `record` with the secret members `shown`) for this key. The secret is kept
        sealed, or, with no key to seal it, not kept: a replay then shows the record alone."""
        body_kept = record
        if shown and sealer is not None:
            body_kept = sealer.keep(record, msgspec.json.encode(shown), context=self._sealed_for)
        kept = StoredResponse(
            resource=self.kept_as,
            request_hash=self.request_hash,
            status=answer.status,
            body=body_kept,
            location=answer.headers.get("Location"),
            etag=answer.headers.get("ETag"),
        )
        expires_at_ms = self.now + settings.idempotency_ttl_seconds * 1000
        await tx.save_idempotent_response(self.caller.email, self.key, kept, expires_at_ms=expires_at_ms)
