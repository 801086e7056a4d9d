"""The endpoints of a resource, made from its declaration: list, create, get, replace, update, delete and
history. Each handler reads the request, calls one service function and shapes the answer.

Each endpoint's OpenAPI operation is made in openapi_operations.py; the operational endpoints (health, metrics)
are petrecords.ops."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import msgspec

from petrecords.auth import Caller
from petrecords.endpoints import JSON, MERGE_PATCH, Answer, Call, Endpoint
from petrecords.errors import DatabaseUnavailable, ValidationFailed
from petrecords.resources import openapi_operations, service
from petrecords.resources.declaration import Resource, Values
from petrecords.resources.history import history_page
from petrecords.resources.idempotency import IdempotentPost, with_members
from petrecords.resources.listing import list_records, parse_list_query, parse_paging, query_pairs
from petrecords.resources.requests import (
    Body,
    EntityTags,
    decode_json,
    read_body,
    read_patch,
)
from petrecords.resources.service import etag_of
from petrecords.resources.wire import show
from petrecords.services import Services
from petrecords.store.base import Row, Transaction

_PURGE_EVERY = 100
_UPDATE_ATTEMPTS = 5
"""How often an update (or a deletion) starts again when a concurrent replace moved the record's references
meanwhile."""


def record_answer(resource: Resource, row: Row, *, status: int = 200) -> Answer:
    return Answer(status, msgspec.json.encode(show(resource, row)), {"ETag": etag_of(resource, row)})


def _entity_tags(call: Call, header: bytes, name: str) -> EntityTags | None:
    value = call.header(header)
    return None if value is None else EntityTags.parse(name, value)


def _caller(call: Call) -> Caller:
    caller: Caller = call.caller
    return caller


class ResourceHandlers:
    """The handlers of one resource's endpoints, for one application."""

    def __init__(self, resource: Resource, services: Services) -> None:
        self.resource = resource
        self.services = services
        self.record_parameter = resource.path_parameter

    def _record_id(self, call: Call) -> str:
        return call.params[self.record_parameter]

    async def list_records(self, call: Call) -> Answer:
        settings = self.services.settings
        request = parse_list_query(
            self.resource,
            query_pairs(call.query),
            context=self.services.context(),
            default_page_size=settings.default_page_size,
            max_page_size=settings.max_page_size,
        )
        caller = _caller(call)
        async with self.services.store.transaction(write=False, caller=caller) as tx:
            page = await list_records(tx=tx, caller=caller, resource=self.resource, request=request)
        return Answer(200, msgspec.json.encode(page.wire()))

    async def get_record(self, call: Call) -> Answer:
        caller = _caller(call)
        if_none_match = call.header(b"if-none-match")
        tags = None if if_none_match is None else EntityTags.parse("If-None-Match", if_none_match)
        # A conditional read compares the version a client holds with the current one: a replica's may be older
        # than one the client read elsewhere, and its 200 would take the client back. The primary answers those.
        row = await service.read_visible(
            store=self.services.store,
            caller=caller,
            resource=self.resource,
            record_id=self._record_id(call),
            reader=None if if_none_match is not None else caller,
        )
        etag = etag_of(self.resource, row)
        if tags is not None and tags.match_weak(etag):
            return Answer(304, b"", {"ETag": etag}, media_type=None)
        return Answer(200, msgspec.json.encode(show(self.resource, row)), {"ETag": etag})

    async def _screen(self, values: dict[str, Any]) -> None:
        """The resource's rules that look outside the database, before the transaction (see Resource.screen)."""
        screen = self.resource.screen
        if screen is not None:
            errors = await screen(values, self.services.settings)
            if errors:
                raise ValidationFailed(errors, what="request body")

    async def create(self, call: Call) -> Answer:
        body = read_body(self.resource, decode_json(call.body), context=self.services.context())
        await self._screen(body.values)
        caller = _caller(call)
        # Answered once the transaction has ended: a 201 is sent only for a create that committed.
        async with self.services.store.transaction(write=True, caller=caller) as tx:
            return await self._create_in(tx, caller, body, call.header(b"idempotency-key"))

    async def _create_in(self, tx: Transaction, caller: Caller, body: Body, raw_key: str | None) -> Answer:
        """The record created, or the answer kept for its `Idempotency-Key`."""
        resource, services = self.resource, self.services
        post = IdempotentPost.of(caller, raw_key, request=body.document, kept_as=resource.name)
        if post is not None and (replayed := await post.replay(tx, services.sealer)) is not None:
            return replayed
        revealed: Values = {}
        shown: Mapping[str, Any] = {}
        if resource.revealed is not None:
            revealed, shown = resource.revealed.make()
        row, record = await service.create_record(
            tx=tx,
            caller=caller,
            resource=resource,
            resources=services.resources,
            body=body,
            settings=services.settings,
            revealed=revealed,
        )
        # The secret is shown here and in a replay of this answer alone: the change log keeps `record` without it.
        answer = Answer(
            201,
            with_members(record, shown) if shown else record,
            {"ETag": etag_of(resource, row), "Location": f"{resource.path}/{row['id']}"},
        )
        if post is not None:
            await post.keep(tx, services.settings, services.sealer, answer, record=record, shown=shown)
            if row["id"].int % _PURGE_EVERY == 0:
                await tx.purge_expired_idempotency_keys(now_ms=post.now, limit=1000)
        return answer

    async def replace(self, call: Call) -> Answer:
        record_id = self._record_id(call)
        body = read_body(self.resource, decode_json(call.body), context=self.services.context(), path_id=record_id)
        await self._screen(body.values)
        if_match = _entity_tags(call, b"if-match", "If-Match")
        caller = _caller(call)
        async with self.services.store.transaction(write=True, caller=caller) as tx:
            row = await service.replace_record(
                tx=tx,
                caller=caller,
                resource=self.resource,
                resources=self.services.resources,
                record_id=record_id,
                body=body,
                if_match=if_match,
                settings=self.services.settings,
            )
        return record_answer(self.resource, row)

    async def update(self, call: Call) -> Answer:
        record_id = self._record_id(call)
        context = self.services.context()
        patch = read_patch(self.resource, decode_json(call.body), context=context, path_id=record_id)
        await self._screen(patch.values)
        if_match = _entity_tags(call, b"if-match", "If-Match")
        caller = _caller(call)

        async def update(tx: Transaction) -> Row:
            return await service.update_record(
                tx=tx,
                caller=caller,
                resource=self.resource,
                resources=self.services.resources,
                record_id=record_id,
                patch=patch,
                context=context,
                if_match=if_match,
                settings=self.services.settings,
            )

        return record_answer(self.resource, await self._until_references_hold(caller, update, "updated"))

    async def delete(self, call: Call) -> Answer:
        if_match = _entity_tags(call, b"if-match", "If-Match")
        caller = _caller(call)
        record_id = self._record_id(call)

        async def delete(tx: Transaction) -> Row:
            return await service.delete_record(
                tx=tx,
                caller=caller,
                resource=self.resource,
                resources=self.services.resources,
                record_id=record_id,
                if_match=if_match,
            )

        return record_answer(self.resource, await self._until_references_hold(caller, delete, "deleted"))

    async def _until_references_hold(
        self, caller: Caller, write: Callable[[Transaction], Awaitable[Row]], done: str
    ) -> Row:
        """`write` in a transaction of its own, again while the records it references move under it (up to
        _UPDATE_ATTEMPTS times); `done`: what the record was being, for the answer when it never settles."""
        for attempt in range(_UPDATE_ATTEMPTS):
            try:
                async with self.services.store.transaction(write=True, caller=caller) as tx:
                    return await write(tx)
            except service.ReferencesMoved:
                if attempt == _UPDATE_ATTEMPTS - 1:
                    raise DatabaseUnavailable(
                        f"The record kept changing while it was being {done}. Retry later.", cause="contention"
                    ) from None
        raise AssertionError("unreachable")

    async def history(self, call: Call) -> Answer:
        settings = self.services.settings
        page_index, page_size = parse_paging(
            query_pairs(call.query),
            default_page_size=settings.default_page_size,
            max_page_size=settings.max_page_size,
        )
        caller = _caller(call)
        async with self.services.store.transaction(write=False, caller=caller) as tx:
            page = await history_page(
                tx=tx,
                caller=caller,
                resource=self.resource,
                record_id=self._record_id(call),
                page_index=page_index,
                page_size=page_size,
            )
        return Answer(200, msgspec.json.encode(page))


def resource_endpoints(resource: Resource, services: Services) -> list[Endpoint]:
    """`/v1/{name}`, `/v1/{name}/{id}` and `/v1/{name}/{id}/history` of one resource."""
    handlers = ResourceHandlers(resource, services)
    collection = resource.path
    record = f"{collection}/{{{resource.path_parameter}}}"
    noun, title, tag = resource.schema_name, resource.title, resource.name
    resources = services.resources

    def documented(function: openapi_operations.OperationDocument) -> openapi_operations.Document:
        return functools.partial(function, resource, resources)

    return [
        Endpoint(
            "GET",
            collection,
            f"list{resource.plural}",
            tag,
            f"List {title} records, a page at a time",
            handlers.list_records,
            documented(openapi_operations.list_operation),
            direct=True,
            aliases=(f"{collection}/",),
        ),
        Endpoint(
            "POST",
            collection,
            f"create{noun}",
            tag,
            f"Create a {title} record",
            handlers.create,
            documented(openapi_operations.create_operation),
            body_media_types=(JSON,),
            direct=True,
            aliases=(f"{collection}/",),
        ),
        Endpoint(
            "GET",
            record,
            f"get{noun}",
            tag,
            f"Get a {title} record",
            handlers.get_record,
            documented(openapi_operations.get_operation),
            direct=True,
        ),
        Endpoint(
            "PUT",
            record,
            f"replace{noun}",
            tag,
            f"Replace a {title} record",
            handlers.replace,
            documented(openapi_operations.replace_operation),
            body_media_types=(JSON,),
            direct=True,
        ),
        Endpoint(
            "PATCH",
            record,
            f"update{noun}",
            tag,
            f"Update a {title} record with a JSON Merge Patch",
            handlers.update,
            documented(openapi_operations.update_operation),
            body_media_types=(MERGE_PATCH, JSON),
            direct=True,
        ),
        Endpoint(
            "DELETE",
            record,
            f"delete{noun}",
            tag,
            f"Delete a {title} record",
            handlers.delete,
            documented(openapi_operations.delete_operation),
            direct=True,
        ),
        Endpoint(
            "GET",
            f"{record}/history",
            f"get{noun}History",
            tag,
            f"A {title} record's changes, oldest first",
            handlers.history,
            documented(openapi_operations.history_operation),
            direct=True,
        ),
        *(() if resource.more_endpoints is None else resource.more_endpoints(resource, services)),
    ]
