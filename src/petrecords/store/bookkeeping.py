"""Idempotency keys, stream tickets and leases: the bookkeeping of requests and duties, beside the records."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa

from petrecords.store.base import StoredResponse
from petrecords.store.changelog import DROP_LAPSED_LEASE, SELECT_LAPSED_LEASES
from petrecords.store.records import values_of
from petrecords.store.runner import Runner
from petrecords.tables import idempotency_keys, stream_tickets

_IDEMPOTENCY_KEY_IS = (idempotency_keys.c.caller == sa.bindparam("caller")) & (
    idempotency_keys.c.key == sa.bindparam("key")
)
SELECT_IDEMPOTENT_RESPONSE = sa.select(
    idempotency_keys.c.resource,
    idempotency_keys.c.request_hash,
    idempotency_keys.c.status,
    idempotency_keys.c.body,
    idempotency_keys.c.location,
    idempotency_keys.c.etag,
    idempotency_keys.c.expires_at,
).where(_IDEMPOTENCY_KEY_IS)
_EXPIRED_IDEMPOTENCY_KEYS = (
    sa.select(idempotency_keys.c.caller, idempotency_keys.c.key)
    .where(idempotency_keys.c.expires_at <= sa.bindparam("now_ms"))
    .limit(sa.bindparam("limit"))
)
PURGE_EXPIRED_IDEMPOTENCY_KEYS = sa.delete(idempotency_keys).where(
    sa.tuple_(idempotency_keys.c.caller, idempotency_keys.c.key).in_(_EXPIRED_IDEMPOTENCY_KEYS)
)

INSERT_TICKET = sa.insert(stream_tickets).values(values_of(stream_tickets))
# Taken and gone in one statement: of two that send the same ticket at once, one gets it.
TAKE_TICKET = (
    sa.delete(stream_tickets)
    .where(stream_tickets.c.ticket_hash == sa.bindparam("ticket_hash"))
    .returning(stream_tickets.c.caller, stream_tickets.c.expires_at)
)
PURGE_EXPIRED_TICKETS = sa.delete(stream_tickets).where(
    stream_tickets.c.ticket_hash.in_(
        sa.select(stream_tickets.c.ticket_hash)
        .where(stream_tickets.c.expires_at <= sa.bindparam("now_ms"))
        .limit(sa.bindparam("limit"))
    )
)


def idempotency_upsert(insert: Callable[[sa.Table], Any]) -> sa.Insert:
    """Keep a response for a key, over an expired one kept before, with the dialect's INSERT … ON CONFLICT."""
    statement = insert(idempotency_keys).values(values_of(idempotency_keys))
    upsert: sa.Insert = statement.on_conflict_do_update(
        index_elements=[idempotency_keys.c.caller, idempotency_keys.c.key],
        set_={column.name: statement.excluded[column.name] for column in idempotency_keys.c if not column.primary_key},
    )
    return upsert


class SqlBookkeeping(Runner):
    """Idempotency keys, tickets and leases; a part of SqlTransaction."""

    idempotency_insert: sa.Insert
    """The dialect's `idempotency_upsert`."""
    state_upserts: tuple[sa.Insert, sa.Insert]

    async def take_lease(self, name: str, *, holder: str, now_ms: int, until_ms: int) -> bool:
        values = {"name": name, "holder": holder, "until": until_ms, "now": now_ms}
        return bool(await self.fetch((self.state_upserts[1], values)))

    async def lapsed_leases(self, prefix: str, *, after: str, now_ms: int, limit: int) -> Sequence[str]:
        pattern = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        values = {"pattern": pattern, "after": after, "now": now_ms, "limit": limit}
        return [row[0] for row in await self.fetch((SELECT_LAPSED_LEASES, values))]

    async def drop_lease(self, name: str, *, now_ms: int) -> bool:
        return bool(await self.fetch((DROP_LAPSED_LEASE, {"name": name, "now": now_ms})))

    async def _hold_idempotency_key(self, caller: str, key: str) -> None:
        """Make concurrent holders of the same key exclusive; the default relies on a single writer."""

    async def claim_idempotency_key(self, caller: str, key: str, *, now_ms: int) -> StoredResponse | None:
        await self._hold_idempotency_key(caller, key)
        held = {"caller": caller, "key": key}
        rows = await self.fetch((SELECT_IDEMPOTENT_RESPONSE, held))
        if not rows:
            return None
        resource, request_hash, status, body, location, etag, expires_at = rows[0]
        if expires_at <= now_ms:
            # Free again, and replaced when the new response is kept. Not deleted here: that would be a write
            # before the request has taken the locks of what it writes (see Transaction.lock).
            return None
        return StoredResponse(
            resource=resource, request_hash=request_hash, status=status, body=bytes(body), location=location, etag=etag
        )

    async def save_idempotent_response(
        self, caller: str, key: str, response: StoredResponse, *, expires_at_ms: int
    ) -> None:
        await self.execute(
            self.idempotency_insert,
            {
                "caller": caller,
                "key": key,
                "resource": response.resource,
                "request_hash": response.request_hash,
                "status": response.status,
                "body": response.body,
                "location": response.location,
                "etag": response.etag,
                "expires_at": expires_at_ms,
            },
        )

    async def purge_expired_idempotency_keys(self, *, now_ms: int, limit: int) -> None:
        await self.execute(PURGE_EXPIRED_IDEMPOTENCY_KEYS, {"now_ms": now_ms, "limit": limit})

    async def keep_ticket(self, ticket_hash: str, caller: bytes, *, expires_at_ms: int) -> None:
        await self.execute(INSERT_TICKET, {"ticket_hash": ticket_hash, "caller": caller, "expires_at": expires_at_ms})

    async def take_ticket(self, ticket_hash: str, *, now_ms: int) -> bytes | None:
        rows = await self.fetch((TAKE_TICKET, {"ticket_hash": ticket_hash}))
        if not rows:
            return None
        caller, expires_at = rows[0]
        return bytes(caller) if expires_at > now_ms else None

    async def purge_expired_tickets(self, *, now_ms: int, limit: int) -> None:
        await self.execute(PURGE_EXPIRED_TICKETS, {"now_ms": now_ms, "limit": limit})
