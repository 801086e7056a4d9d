"""The change feed: every change a caller may see, in commit order, a page at a time as JSON or live as
Server-Sent Events (`GET /v1/changes`)."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from petrecords import errors
from petrecords.auth import Caller
from petrecords.changes.change import NOT_HANDED_OUT, change_wire, decode_cursor, encode_cursor, viewer_of
from petrecords.changes.live import COMMITTED_AT_OPEN, ChangeHub
from petrecords.changes.streams import TICKET_SECONDS, StreamSlots, stream_deadline
from petrecords.config import Settings
from petrecords.endpoints import Answer, Call, Endpoint
from petrecords.errors import CursorExpired, ValidationFailed
from petrecords.openapi import PRIVATE, DocumentContext, api_errors, headers, json_response, parameter
from petrecords.resources.declaration import ResourceSet
from petrecords.resources.fields import EMAIL_SCHEMA, TIMESTAMP_SCHEMA, UUID_SCHEMA
from petrecords.resources.filters import SEVERAL, split_values
from petrecords.resources.listing import query_pairs
from petrecords.resources.schemas import page_schema
from petrecords.services import Services
from petrecords.store.base import Cursor, Store, Transaction
from petrecords.values import format_timestamp

MAX_LIMIT = 1000
DEFAULT_LIMIT = 100
FEED_PARAMETERS = ("after", "limit", "resource", "ticket")
"""What the feed reads; `ticket` opens a live stream instead of a token (routes.enter redeems it)."""


@dataclass(frozen=True)
class FeedRequest:
    after: Cursor | None
    limit: int
    resources: tuple[str, ...] | None


def parse_feed_query(pairs: Sequence[tuple[str, str]], resources: ResourceSet) -> FeedRequest:
    values: dict[str, list[str]] = {}
    for name, value in pairs:
        values.setdefault(name, []).append(value)
    errors: dict[str, list[str]] = {}
    for name, given in values.items():
        if name not in FEED_PARAMETERS:
            errors[name] = ["is not a parameter of this operation; expected one of " + ", ".join(FEED_PARAMETERS) + "."]
        elif name != "resource" and len(given) > 1:
            errors[name] = ["must be given once."]
    after: Cursor | None = None
    if "after" in values and "after" not in errors:
        try:
            after = decode_cursor("after", values["after"][0])
        except ValidationFailed as exc:
            errors.update(exc.errors)
    limit = DEFAULT_LIMIT
    if "limit" in values and "limit" not in errors:
        raw = values["limit"][0]
        if not (raw.isascii() and raw.isdigit() and 1 <= int(raw) <= MAX_LIMIT):
            errors["limit"] = [f"must be a whole number from 1 to {MAX_LIMIT}."]
        else:
            limit = int(raw)
    names: tuple[str, ...] | None = None
    if "resource" in values:
        known = [resource.name for resource in resources.resources]
        asked = split_values(values["resource"])
        if any(name not in known for name in asked):
            errors["resource"] = ["must be one or more of " + ", ".join(known) + " (comma-separated or repeated)."]
        else:
            names = tuple(dict.fromkeys(asked))
    if errors:
        raise ValidationFailed(errors, what="query")
    return FeedRequest(after=after, limit=limit, resources=names)


async def start_of(tx: Transaction, after: Cursor | None, *, name: str = "after") -> Cursor:
    """Where a read of the feed starts: after `after`, or at the oldest change kept; 410 when changes after
    `after` have been removed by retention; 400, naming the parameter, when `after` is no cursor this service
    hands out (a change's, or where the kept changes start), such as one ahead of the log's head."""
    purged = await tx.purged_through()
    if after is None:
        return purged
    if after < purged:
        raise CursorExpired()
    if after != purged and not await tx.is_a_change(after):
        if after < await tx.purged_through():  # removed by retention meanwhile
            raise CursorExpired()
        raise ValidationFailed.single(name, NOT_HANDED_OUT)
    return after


HELD_BACK_WAIT_SECONDS = 2.0
"""How long a page shorter than asked for waits for changes held back behind a write still in flight (which
takes milliseconds) before it is answered as it is."""
HELD_BACK_POLL_SECONDS = (0.002, 0.1)
"""The first pause before such a page is read again, and the longest: each pause doubles the one before."""


async def feed_page(*, store: Store, caller: Caller, request: FeedRequest) -> dict[str, Any]:
    """A page of the feed. Short only when no more changes have committed after it: a page that changes held
    back behind a write in flight would leave short is read again, each time in a new transaction (holding no
    connection in between), until they have come or HELD_BACK_WAIT_SECONDS have passed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + HELD_BACK_WAIT_SECONDS
    pause, longest = HELD_BACK_POLL_SECONDS
    reader = viewer_of(caller)
    while True:
        async with store.transaction(write=False) as tx:
            cursor = request.after if request.after is not None else await tx.purged_through()
            limit, resources = request.limit, request.resources
            items, whole = await tx.changes_page(cursor, limit=limit, reader=reader, resources=resources)
            # Looked at after the read, not before: on PostgreSQL each statement of a read has a snapshot of its
            # own, and changes that retention removed in between would be skipped without a word.
            if request.after is not None:
                await start_of(tx, request.after)
        if whole or len(items) == request.limit or loop.time() >= deadline:
            next_cursor = items[-1].cursor if items else cursor
            return {"items": [change_wire(change) for change in items], "nextCursor": encode_cursor(next_cursor)}
        await asyncio.sleep(pause)
        pause = min(pause * 2, longest)


# --- the endpoint ----------------------------------------------------------------------------------


class Feed:
    """`GET /v1/changes`: a page of the feed as JSON, or, to `Accept: text/event-stream`, the feed live; and
    `POST /v1/changes/tickets`, what opens a stream from a page that cannot send a token."""

    def __init__(self, services: Services, hub: ChangeHub, slots: StreamSlots) -> None:
        self.services = services
        self.hub = hub
        self.slots = slots

    async def changes(self, call: Call) -> Answer:
        request = parse_feed_query(query_pairs(call.query), self.services.resources)
        caller: Caller = call.caller
        sent_last_event_id = call.header(b"last-event-id")
        # Read (a malformed one is 400) even where it means nothing: a page of JSON.
        last_event_id = None if sent_last_event_id is None else decode_cursor("Last-Event-ID", sent_last_event_id)
        if not wants_event_stream(call.header(b"accept")):
            page = await feed_page(store=self.services.store, caller=caller, request=request)
            return Answer(200, msgspec.json.encode(page))
        # A transaction of its own, ended before a live stream starts: a stream holds no connection.
        async with self.services.store.transaction(write=False) as tx:
            already: frozenset[Cursor] = frozenset()
            if last_event_id is not None:
                start = await start_of(tx, last_event_id, name="Last-Event-ID")
            elif request.after is not None:
                start = await start_of(tx, request.after)
            else:
                # From now on: after the last change no write in flight can precede, but those committed
                # already (a transaction that began earlier is still writing).
                start = await tx.head_cursor()
                already = frozenset(await tx.committed_after(start, limit=COMMITTED_AT_OPEN))
        reader = viewer_of(caller)
        hub = self.hub
        deadline = stream_deadline(caller, leeway_seconds=self.services.settings.auth_leeway_seconds)
        slot = self.slots.take(caller.email)

        async def frames() -> AsyncIterator[bytes]:
            yield b"retry: 1000\n\n"
            async for change in hub.follow(start, reader=reader, resources=request.resources, already=already):
                if time.time() >= deadline:
                    # The token that opened the stream has expired: the caller must show a new one.
                    yield b": the token has expired\n\n"
                    return
                yield hub.frame(change)

        return Answer(200, media_type=EVENT_STREAM, headers={"X-Accel-Buffering": "no"}, stream=slot.around(frames()))

    async def new_ticket(self, call: Call) -> Answer:
        caller: Caller = call.caller
        ticket, expires_at = await self.services.tickets.issue(caller)
        return Answer(201, msgspec.json.encode({"ticket": ticket, "expiresAt": format_timestamp(expires_at)}))


EVENT_STREAM = "text/event-stream"


def wants_event_stream(accept: str | None) -> bool:
    return accept is not None and EVENT_STREAM in accept


def feed_endpoints(services: Services, hub: ChangeHub, slots: StreamSlots) -> list[Endpoint]:
    feed = Feed(services, hub, slots)
    return [
        Endpoint(
            "GET",
            "/v1/changes",
            "listChanges",
            CHANGES_TAG,
            "The changes the caller may see, in commit order: a page of JSON, or live as Server-Sent Events",
            feed.changes,
            functools.partial(_feed_document, services.resources),
            opens_with_ticket=True,
        ),
        Endpoint(
            "POST",
            "/v1/changes/tickets",
            "createChangeStreamTicket",
            CHANGES_TAG,
            "A ticket that opens one live change stream from a page that cannot send a token",
            feed.new_ticket,
            _ticket_document,
        ),
    ]


CHANGES_TAG = "changes"


def change_schemas(resources: ResourceSet, settings: Settings) -> dict[str, Any]:
    """The change, a page of a record's history, and a page of the feed."""
    return {
        "Change": {
            "type": "object",
            "description": "A committed write of a record: created, replaced (a replace, an update, or a write that "
            "follows another record, such as a vaccination following its pet to a new owner) or deleted; or a "
            "reminder that a vaccination is due-soon or overdue, which writes nothing (its version does not move, "
            "`by` is `system@petrecords.invalid`).",
            "required": ["cursor", "resource", "id", "action", "version", "at", "by", "record"],
            "additionalProperties": False,
            "properties": {
                "cursor": {
                    "type": "string",
                    "pattern": CURSOR_PATTERN,
                    "description": "Opaque: where the change stands in the feed (its commit order).",
                },
                "resource": {"type": "string", "enum": [resource.name for resource in resources.resources]},
                "id": {**UUID_SCHEMA, "description": "The record's id."},
                "action": {"type": "string", "enum": list(ACTIONS)},
                "version": {"type": "integer", "minimum": 1, "description": "The record's writes, counted from 1."},
                "at": {**TIMESTAMP_SCHEMA, "description": "When the write was made."},
                "by": {**EMAIL_SCHEMA, "description": "Who made the write."},
                "record": {
                    "description": "The record as it was after the write (for `deleted`, just before it), as its "
                    "GET shows it.",
                    "oneOf": [
                        {"$ref": f"#/components/schemas/{resource.schema_name}"} for resource in resources.resources
                    ],
                },
            },
        },
        "ChangeHistoryPage": page_schema("Change", settings),
        "ChangeStreamTicket": {
            "type": "object",
            "required": ["ticket", "expiresAt"],
            "additionalProperties": False,
            "properties": {
                "ticket": {"type": "string", "description": "Opens one live stream: `GET /v1/changes?ticket=…`."},
                "expiresAt": {**TIMESTAMP_SCHEMA, "description": "After this, the ticket opens nothing."},
            },
        },
        "ChangeFeedPage": {
            "type": "object",
            "required": ["items", "nextCursor"],
            "additionalProperties": False,
            "properties": {
                "items": {"type": "array", "maxItems": MAX_LIMIT, "items": {"$ref": "#/components/schemas/Change"}},
                "nextCursor": {
                    "type": "string",
                    "pattern": CURSOR_PATTERN,
                    "description": "Where the next page starts: send it as `after`.",
                },
            },
        },
    }


ACTIONS = ("created", "replaced", "deleted", "due-soon", "overdue")
"""A change's actions: the writes of a record, then the reminders of a dose (contract section 15)."""
CURSOR_PATTERN = "^[0-9a-f]{1,16}-[0-9a-f]{1,16}$"
_EVENT_FORMAT = (
    "Server-Sent Events, sent as the changes commit: `retry: 1000` first, then for each change `id:` its cursor, "
    "`event:` its action and `data:` the change as JSON (the Change schema) on one line, each event ending with an "
    "empty line; a comment line (`: keep-alive`) at least every 15 seconds while there is nothing to send. A client "
    "that reconnects with `Last-Event-ID` resumes after that change; without it (and without `after`) the stream "
    "starts with the changes committed after it opened."
)


def _feed_document(resources: ResourceSet, context: DocumentContext) -> dict[str, Any]:
    return {
        "description": "The changes the caller may see (an administrator: every change; anyone else: the changes of "
        "records they owned before or after the write, and every change of the shared catalogue), in the order "
        "their transactions committed. A page holds `limit` changes whenever at least that many visible changes "
        "follow the cursor; an empty page means the caller has every committed change they may see. A client that "
        "keeps calling with the last `nextCursor` receives every change exactly once, in commit order, whatever "
        "the number of instances and concurrent writers. With `Accept: text/event-stream` the same changes "
        "stream live.",
        "parameters": [
            parameter(
                "after",
                {"type": "string", "pattern": CURSOR_PATTERN},
                "A cursor this service handed out (a change's `cursor`, a page's `nextCursor`): start after it. "
                "Omitted: at the oldest change kept (a stream: with the changes committed after it opened). Older "
                "than what is kept: 410.",
            ),
            parameter(
                "limit",
                {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
                "Changes per page.",
            ),
            parameter(
                "resource",
                {
                    "type": "array",
                    "minItems": 1,
                    "items": {"type": "string", "enum": [resource.name for resource in resources.resources]},
                },
                f"Only the changes of these resources. {SEVERAL}",
                several=True,
            ),
            parameter(
                "ticket",
                {"type": "string", "minLength": 1, "maxLength": 200},
                "The live stream only, from a page whose EventSource cannot send a token: a ticket from "
                "`POST /v1/changes/tickets`, in place of the bearer token. It opens one stream, once, within "
                f"{TICKET_SECONDS} seconds, for the caller it was issued to; any use consumes it, and a ticket used "
                "twice, expired, altered, sent with a token or to the JSON page is 401.",
            ),
            parameter(
                "Accept",
                {"type": "string", "examples": ["application/json", EVENT_STREAM]},
                f"`{EVENT_STREAM}` for the live stream; anything else for a page of JSON.",
                where="header",
            ),
            parameter(
                "Last-Event-ID",
                {"type": "string", "pattern": CURSOR_PATTERN},
                "The live stream: resume after this cursor (EventSource sends it when it reconnects). Ignored by a "
                "page of JSON, but malformed it is 400 there too.",
                where="header",
            ),
        ],
        "responses": {
            "200": {
                "description": "A page of changes, or the live stream.",
                "headers": headers(*PRIVATE),
                "content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/ChangeFeedPage"}},
                    EVENT_STREAM: {
                        # Before OpenAPI 3.2, the schema of an event stream is that of each event.
                        "schema": {
                            "type": "object",
                            "description": _EVENT_FORMAT,
                            "properties": {
                                "id": {"type": "string", "pattern": CURSOR_PATTERN},
                                "event": {"type": "string", "enum": list(ACTIONS)},
                                "data": {
                                    "type": "string",
                                    "contentMediaType": "application/json",
                                    "contentSchema": {"$ref": "#/components/schemas/Change"},
                                },
                                "retry": {"type": "integer", "minimum": 0},
                            },
                            "dependentRequired": {"event": ["id", "data"]},
                        },
                        "example": {"id": "1f4-0", "event": "created", "data": '{"cursor":"1f4-0",...}'},
                    },
                },
            },
            **api_errors(
                errors.CursorExpired,
                descriptions={
                    errors.RateLimited: "Rate limit exceeded, or the caller already holds "
                    f"{context.settings.events_max_streams_per_caller} live streams in this instance (with "
                    "Retry-After)."
                },
            ),
        },
    }


def _ticket_document(context: DocumentContext) -> dict[str, Any]:
    return {
        "description": "A browser's EventSource cannot send an Authorization header: a page asks for a ticket with "
        f"its token, then opens `GET /v1/changes?ticket=…` with it. A ticket opens one stream, once, within "
        f"{TICKET_SECONDS} seconds; the stream sees what the ticket's caller may see, and ends when that caller's "
        "token expires. Tickets never appear in logs or metrics. No request body.",
        "responses": {
            "201": json_response("A new ticket.", "ChangeStreamTicket", *PRIVATE),
            **api_errors(),
        },
    }
