"""A webhook's own endpoints beside those of every resource: `POST /v1/webhooks/{id}/secret`, which makes a new
secret, and `GET /v1/webhooks/{id}/deliveries`, the log of its attempts."""

from __future__ import annotations

from typing import Any

import msgspec

from petrecords import errors
from petrecords.endpoints import Answer, Call, Endpoint
from petrecords.errors import NotFound
from petrecords.openapi import PRIVATE, DocumentContext, api_errors, headers, parameter
from petrecords.resources import service
from petrecords.resources.declaration import Resource
from petrecords.resources.fields import UUID_SCHEMA
from petrecords.resources.idempotency import IdempotentPost, with_members
from petrecords.resources.listing import parse_paging, query_pairs
from petrecords.resources.openapi_operations import idempotency_key_parameter, if_match_parameter, paging_parameters
from petrecords.resources.requests import Body, EntityTags
from petrecords.resources.schemas import page_schema
from petrecords.resources.wire import show
from petrecords.services import Services
from petrecords.values import now_ms, parse_record_id
from petrecords.webhooks.log import DELIVERY_SCHEMA, KEPT_DAYS, attempts_page
from petrecords.webhooks.signing import new_secret

SECRET_SCHEMA: dict[str, Any] = {
    "type": "string",
    "pattern": "^whsec_[A-Za-z0-9+/]{43}=$",
    "description": "`whsec_` and the base64 of 32 random bytes: the key of the deliveries' signatures (Standard "
    "Webhooks). Shown only in the answer to the create and to a new secret: keep it.",
    "examples": ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw9nfc5M8I9pQ="],
}
ROTATION_OVERLAP_HOURS = 24
KEY_KEPT_AS = "webhooks/secret"
"""What an Idempotency-Key kept for a new secret was used for (a resource's create keeps the resource's name)."""


class WebhookHandlers:
    """The handlers of a webhook's own endpoints (a new secret, its deliveries), for one application."""

    def __init__(self, resource: Resource, services: Services) -> None:
        self.resource = resource
        self.services = services

    async def new_secret(self, call: Call) -> Answer:
        """A write, recorded as `replaced`: the webhook's new secret (for ROTATION_OVERLAP_HOURS the old one signs
        too: see prepare). A POST: its Idempotency-Key replays the answer, the same secret, rather than make
        another."""
        resource, caller, services = self.resource, call.caller, self.services
        record_id = call.params[resource.path_parameter]
        if_match_header = call.header(b"if-match")
        if_match = None if if_match_header is None else EntityTags.parse("If-Match", if_match_header)
        post = IdempotentPost.of(
            caller, call.header(b"idempotency-key"), request={"webhookId": record_id}, kept_as=KEY_KEPT_AS
        )
        secret = new_secret()
        async with services.store.transaction(write=True, caller=caller) as tx:
            if post is not None and (replayed := await post.replay(tx, services.sealer)) is not None:
                return replayed
            row = await service.replace_record(
                tx=tx,
                caller=caller,
                resource=resource,
                resources=services.resources,
                record_id=record_id,
                body=Body(values={"secret": secret}, sent=frozenset(), document={}),
                if_match=if_match,
                settings=services.settings,
            )
            record, shown = msgspec.json.encode(show(resource, row)), {"secret": secret}
            answer = Answer(200, with_members(record, shown), {"ETag": service.etag_of(resource, row)})
            if post is not None:
                await post.keep(tx, services.settings, services.sealer, answer, record=record, shown=shown)
        return answer

    async def deliveries(self, call: Call) -> Answer:
        settings, caller = self.services.settings, call.caller
        record_id = call.params[self.resource.path_parameter]
        page_index, page_size = parse_paging(
            query_pairs(call.query), default_page_size=settings.default_page_size, max_page_size=settings.max_page_size
        )
        parsed = parse_record_id(record_id)
        if parsed is None:
            raise NotFound()
        async with self.services.store.transaction(write=False, caller=caller) as tx:
            await service.load_seen(tx=tx, caller=caller, resource=self.resource, record_id=record_id)
            page = await attempts_page(tx, webhook_id=parsed, page_index=page_index, page_size=page_size, now=now_ms())
        return Answer(200, msgspec.json.encode(page))


def webhook_endpoints(resource: Resource, services: Services) -> list[Endpoint]:
    handlers = WebhookHandlers(resource, services)
    record = f"{resource.path}/{{{resource.path_parameter}}}"
    webhook_id = parameter(
        resource.path_parameter, UUID_SCHEMA, "Record id. A malformed id answers 404.", where="path", required=True
    )

    def new_secret_document(context: DocumentContext) -> dict[str, Any]:
        return {
            "description": "Makes a new secret and answers the webhook with it, once (no body is read). For "
            f"{ROTATION_OVERLAP_HOURS} hours deliveries carry a signature made with the old secret too, so that a "
            "receiver can move to the new one without missing a delivery. A write, recorded as `replaced`; it honours "
            "If-Match. Its owner and an administrator may make one; anyone else 404.",
            "parameters": [
                webhook_id,
                if_match_parameter(),
                idempotency_key_parameter(
                    context.settings, "new secret", "No body is read: the same key for another webhook is 422."
                ),
            ],
            "responses": {
                "200": {
                    "description": "The webhook as GET shows it, with its new `secret`.",
                    "headers": headers("ETag", *PRIVATE),
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/WebhookCreated"}}},
                },
                **api_errors(
                    errors.NotFound,
                    errors.PreconditionFailed,
                    errors.IdempotencyInProgress,
                    errors.IdempotencyKeyReused,
                ),
            },
        }

    def deliveries_document(context: DocumentContext) -> dict[str, Any]:
        page = page_schema("WebhookDelivery", context.settings)
        page["properties"]["items"] = {"type": "array", "items": DELIVERY_SCHEMA}
        return {
            "description": f"The webhook's delivery attempts of the last {KEPT_DAYS} days, newest first, a page at a "
            "time. Its owner and an administrator may read them; anyone else 404.",
            "parameters": [webhook_id, *paging_parameters(context)],
            "responses": {
                "200": {
                    "description": "A page of attempts.",
                    "headers": headers(*PRIVATE),
                    "content": {"application/json": {"schema": page}},
                },
                **api_errors(errors.NotFound),
            },
        }

    tag, noun = resource.name, resource.schema_name
    return [
        Endpoint(
            "POST",
            f"{record}/secret",
            f"rotate{noun}Secret",
            tag,
            "Make a new secret for a webhook",
            handlers.new_secret,
            new_secret_document,
        ),
        Endpoint(
            "GET",
            f"{record}/deliveries",
            f"list{noun}Deliveries",
            tag,
            "A webhook's delivery attempts, newest first",
            handlers.deliveries,
            deliveries_document,
        ),
    ]
