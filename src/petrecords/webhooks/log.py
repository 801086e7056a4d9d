"""The deliveries log: each attempt to deliver a change to a webhook, what came of it, kept 30 days
(`GET /v1/webhooks/{id}/deliveries`)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from petrecords.changes.change import encode_cursor
from petrecords.store.base import Change, Collection, Condition, Operator, PageQuery, Row, SortKey, Transaction
from petrecords.tables import Text, metadata
from petrecords.values import format_timestamp, new_record_id
from petrecords.webhooks.delivery import Attempt

KEPT_DAYS = 30
DAY_MS = 86_400_000

webhook_deliveries = sa.Table(
    "webhook_deliveries",
    metadata,
    sa.Column("id", sa.Uuid(), primary_key=True),
    # No foreign key: the attempts of a deleted webhook, which no one may read any more, go with the others' in time.
    sa.Column("webhook_id", sa.Uuid(), nullable=False),
    sa.Column("change_cursor", Text, nullable=False),
    sa.Column("type", Text, nullable=False, comment="{resource}.{action}"),
    sa.Column("attempted_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
    sa.Column("duration_ms", sa.Integer(), nullable=False),
    sa.Column("status_code", sa.Integer(), nullable=True),
    sa.Column("outcome", Text, nullable=False, comment="succeeded or failed"),
    sa.Column("error", Text, nullable=True, comment="why it failed, in a few words; never the receiver's answer"),
    sa.Index(None, "webhook_id", "attempted_at", "id"),
    sa.Index(None, "attempted_at", "id"),
)
DELIVERIES = Collection(name="webhook-deliveries", table=webhook_deliveries)
_NEWEST_FIRST = (SortKey("attempted_at", descending=True), SortKey("id", descending=True))


async def keep_attempts(
    tx: Transaction, *, webhook_id: uuid.UUID, attempts: Sequence[tuple[Change, Attempt, int]]
) -> None:
    """Log attempts, each (the change, what came of it, when it began), in one statement."""
    if not attempts:
        return
    rows = [
        {
            "id": new_record_id(),
            "webhook_id": webhook_id,
            "change_cursor": encode_cursor(change.cursor),
            "type": f"{change.resource}.{change.action}",
            "attempted_at": at,
            "duration_ms": attempt.duration_ms,
            "status_code": attempt.status_code,
            "outcome": attempt.outcome,
            "error": attempt.error,
        }
        for change, attempt, at in attempts
    ]
    await tx.insert_many(DELIVERIES, rows)


def _wire(row: Row) -> dict[str, Any]:
    return {
        "id": str(row["id"]),
        "webhookId": str(row["webhook_id"]),
        "changeCursor": row["change_cursor"],
        "type": row["type"],
        "attemptedAt": format_timestamp(row["attempted_at"]),
        "durationMs": row["duration_ms"],
        "statusCode": row["status_code"],
        "outcome": row["outcome"],
        "error": row["error"],
    }


async def attempts_page(
    tx: Transaction, *, webhook_id: uuid.UUID, page_index: int, page_size: int, now: int
) -> dict[str, Any]:
    """A page of a webhook's attempts of the last KEPT_DAYS days, newest first, as the paginated list body."""
    conditions = (
        Condition(("webhook_id",), Operator.EQUAL, (webhook_id,)),
        Condition(("attempted_at",), Operator.AT_LEAST, (now - KEPT_DAYS * DAY_MS,)),
    )
    total = await tx.count(DELIVERIES, conditions)
    offset = (page_index - 1) * page_size
    rows = (
        await tx.list(DELIVERIES, PageQuery(conditions=conditions, sort=_NEWEST_FIRST, limit=page_size, offset=offset))
        if offset < total
        else []
    )
    total_pages = -(-total // page_size)
    return {
        "items": [_wire(row) for row in rows],
        "pageIndex": page_index,
        "pageSize": page_size,
        "totalPages": total_pages,
        "totalCount": total,
        "hasPreviousPage": page_index > 1,
        "hasNextPage": page_index < total_pages,
    }


async def purge_attempts(tx: Transaction, *, now: int, limit: int) -> int:
    """Remove up to `limit` of the attempts older than KEPT_DAYS days; how many were removed."""
    query = PageQuery(
        conditions=(Condition(("attempted_at",), Operator.BELOW, (now - KEPT_DAYS * DAY_MS,)),),
        sort=(SortKey("attempted_at"), SortKey("id")),
        limit=limit,
        offset=0,
    )
    old = await tx.list(DELIVERIES, query)
    for row in old:
        await tx.delete(DELIVERIES, row)
    return len(old)


DELIVERY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": [
        "id",
        "webhookId",
        "changeCursor",
        "type",
        "attemptedAt",
        "durationMs",
        "statusCode",
        "outcome",
        "error",
    ],
    "additionalProperties": False,
    "properties": {
        "id": {"type": "string", "format": "uuid"},
        "webhookId": {"type": "string", "format": "uuid"},
        "changeCursor": {"type": "string", "description": "The cursor of the change delivered."},
        "type": {"type": "string", "description": "`{resource}.{action}`, as the delivery's body says."},
        "attemptedAt": {"type": "string", "format": "date-time"},
        "durationMs": {"type": "integer", "minimum": 0},
        "statusCode": {"oneOf": [{"type": "integer"}, {"type": "null"}], "description": "The receiver's status."},
        "outcome": {"type": "string", "enum": ["succeeded", "failed"]},
        "error": {
            "oneOf": [{"type": "string"}, {"type": "null"}],
            "description": "Why it failed, in a few words (never the receiver's answer); null when it succeeded.",
        },
    },
}
