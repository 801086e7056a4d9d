"""The HTTP side of a resource: its routes, made from its declaration. Each handler reads the request, calls
one service function and shapes the answer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import msgspec
from litestar import HttpMethod, Litestar, Request, Response, Router, delete, get, post, put, route
from litestar.di import NamedDependency, Provide
from litestar.params import FromPath
from litestar.response import Stream

from petrecords.auth import Caller
from petrecords.config import Settings
from petrecords.errors import IdempotencyKeyReused
from petrecords.http import ApiGate, admit, read_json_body, send_service_error
from petrecords.resources import service
from petrecords.resources.declaration import Resource, ResourceSet
from petrecords.resources.feed import (
    COMMITTED_AT_OPEN,
    ChangeHub,
    decode_cursor,
    feed_page,
    history_page,
    parse_feed_query,
    start_of,
)
from petrecords.resources.fields import Context, PetTypes
from petrecords.resources.listing import parse_list_query, parse_paging, query_pairs
from petrecords.resources.requests import (
    Body,
    EntityTags,
    canonical_json_hash,
    check_idempotency_key,
    decode_json,
    read_body,
)
from petrecords.resources.service import etag_of
from petrecords.resources.wire import show
from petrecords.responses import answer_failure
from petrecords.store.base import Cursor, Row, Store, StoredResponse, Transaction
from petrecords.values import now_ms

JSON = "application/json"
_PURGE_EVERY = 100
# What OPTIONS answers on each path (after the token check, like every other method).
_ALLOW_COLLECTION = "GET, HEAD, OPTIONS, POST"
_ALLOW_RECORD = "DELETE, GET, HEAD, OPTIONS, PUT"
ALLOW_READ_ONLY = "GET, HEAD, OPTIONS"

# Each handler takes one dependency, its transaction. Litestar resolves sibling dependencies in an anyio task
# group, which costs more than a primary-key lookup; so the caller comes from `request.user` (set by ApiGate)
# and the settings from the application's state.
ApiRequest = Request[Caller, Any, Any]


def _store(request: Request[Any, Any, Any]) -> Store:
    store: Store = request.app.state.store
    return store


async def provide_read_tx(request: ApiRequest) -> AsyncIterator[Transaction]:
    # A conditional read compares the version a client holds with the current one: a replica's may be older
    # than one the client read elsewhere, and its 200 would take the client back. The primary answers those.
    caller = None if "if-none-match" in request.headers else request.user.email
    async with _store(request).transaction(write=False, caller=caller) as tx:
        yield tx


async def provide_write_tx(request: ApiRequest) -> AsyncIterator[Transaction]:
    async with _store(request).transaction(write=True, caller=request.user.email) as tx:
        yield tx


def _settings(request: ApiRequest) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def reading_context(request: ApiRequest) -> Context:
    pet_types: PetTypes = request.app.state.pet_types
    return Context(pet_types=pet_types, now_ms=now_ms())


def _entity_tags(request: ApiRequest, header: str) -> EntityTags | None:
    value = request.headers.get(header)
    return None if value is None else EntityTags.parse(header, value)


def record_response(
    resource: Resource, row: Row, *, status: int = 200, headers: dict[str, str] | None = None
) -> Response[bytes]:
    return Response(
        content=msgspec.json.encode(show(resource, row)),
        status_code=status,
        media_type=JSON,
        headers={"ETag": etag_of(resource, row), **(headers or {})},
    )


class Lookup(NamedTuple):
    """The answer to a GET of one record: its ETag, and its body (None: not modified, 304)."""

    etag: str
    body: bytes | None


async def look_up(
    *, store: Store, caller: Caller, resource: Resource, record_id: str, if_none_match: str | None
) -> Lookup:
    tags = None if if_none_match is None else EntityTags.parse("If-None-Match", if_none_match)
    # As provide_read_tx: a conditional read is the primary's.
    reader = None if if_none_match is not None else caller.email
    row = await service.read_visible(store=store, caller=caller, resource=resource, record_id=record_id, reader=reader)
    etag = etag_of(resource, row)
    if tags is not None and tags.match_weak(etag):
        return Lookup(etag, None)
    return Lookup(etag, msgspec.json.encode(show(resource, row)))


@dataclass(frozen=True)
class Answer:
    """A JSON answer: its status, body and headers but the content type."""

    status: int
    body: bytes
    headers: dict[str, str]


async def create_answer(
    *,
    tx: Transaction,
    caller: Caller,
    resource: Resource,
    resources: ResourceSet,
    body: Body,
    raw_key: str | None,
    settings: Settings,
) -> Answer:
    """The answer to `POST /v1/{resource}` with a valid body: the record created, or the answer kept for its
    `Idempotency-Key`."""
    key = None if raw_key is None else check_idempotency_key(raw_key)
    now = request_hash = None
    if key is not None:
        request_hash = canonical_json_hash(body.document)
        now = now_ms()
        stored = await tx.claim_idempotency_key(caller.email, key, now_ms=now)
        if stored is not None:
            if stored.request_hash != request_hash or stored.resource != resource.name:
                raise IdempotencyKeyReused()
            headers = {"Idempotent-Replayed": "true"}
            headers.update(
                {name: value for name, value in (("Location", stored.location), ("ETag", stored.etag)) if value}
            )
            return Answer(stored.status, stored.body, headers)

    row, record = await service.create_record(tx=tx, caller=caller, resource=resource, resources=resources, body=body)
    location = f"{resource.path}/{row['id']}"
    etag = etag_of(resource, row)
    answer = Answer(201, record, {"ETag": etag, "Location": location})
    if key is None or request_hash is None or now is None:
        return answer
    kept = StoredResponse(
        resource=resource.name, request_hash=request_hash, status=201, body=answer.body, location=location, etag=etag
    )
    expires_at_ms = now + settings.idempotency_ttl_seconds * 1000
    await tx.save_idempotent_response(caller.email, key, kept, expires_at_ms=expires_at_ms)
    if row["id"].int % _PURGE_EVERY == 0:
        await tx.purge_expired_idempotency_keys(now_ms=now, limit=1000)
    return answer


class DirectRoutes:
    """`GET /v1/{resource}/{id}` and `POST /v1/{resource}`, the requests clients send most, answered without the
    framework's routing, dependency injection and response machinery, which cost more than a lookup or the
    Python side of a create. They are the same requests as through the framework: the same gate (`admit`,
    `read_json_body`), the same work (`look_up`, `create_answer`), the same failure answers (`answer_failure`);
    anything else goes on to the framework, whose routes answer alike. So does a request with an `Origin` when
    CORS is configured: the framework adds the CORS headers."""

    def __init__(self, app: Litestar, resources: ResourceSet) -> None:
        self.app = app
        self._resources = resources
        self._by_prefix = {f"{resource.path}/": resource for resource in resources.resources}
        self._by_path = {resource.path: resource for resource in resources.resources}
        self._templates = {resource.name: f"{resource.path}/{{record_id}}" for resource in resources.resources}
        # The gate's collaborators are fixed when the app is made; the store is opened by the lifespan.
        self._verifier = app.state.verifier
        self._limiter = app.state.rate_limiter
        self._cors = app.cors_config is not None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and not scope["query_string"] and not (self._cors and _has_origin(scope)):
            path: str = scope["path"]
            method = scope["method"]
            if method == "GET":
                resource = self._by_prefix.get(path[:-_ID_LENGTH]) if len(path) > _ID_LENGTH else None
                if resource is not None:
                    await self._look_up(resource, path[-_ID_LENGTH:], scope, send)
                    return
            elif method == "POST" and (resource := self._by_path.get(path)) is not None:
                await self._create(resource, scope, receive, send)
                return
        await self.app(scope, receive, send)

    async def _look_up(self, resource: Resource, record_id: str, scope: Any, send: Any) -> None:
        scope["path_template"] = self._templates[resource.name]
        try:
            scope["user"] = caller = await admit(scope, verifier=self._verifier, limiter=self._limiter)
            lookup = await look_up(
                store=self.app.state.store,
                caller=caller,
                resource=resource,
                record_id=record_id,
                if_none_match=_header_text(scope, b"if-none-match"),
            )
        except Exception as exc:
            await send_service_error(send, answer_failure(exc, scope.setdefault("state", {})))
            return
        etag = (b"etag", lookup.etag.encode())
        if lookup.body is None:
            await send({"type": "http.response.start", "status": 304, "headers": [etag]})
            await send({"type": "http.response.body", "body": b""})
            return
        await _send_json(send, 200, lookup.body, [etag])

    async def _create(self, resource: Resource, scope: Any, receive: Any, send: Any) -> None:
        state = self.app.state
        settings: Settings = state.settings
        scope["path_template"] = resource.path
        try:
            scope["user"] = caller = await admit(scope, verifier=self._verifier, limiter=self._limiter)
            raw = await read_json_body(
                scope, receive, limit=settings.max_body_bytes, timeout_seconds=settings.body_timeout_seconds
            )
            context = Context(pet_types=state.pet_types, now_ms=now_ms())
            body = read_body(resource, decode_json(raw), context=context, path_id=None)
            store: Store = state.store
            # Answered once the transaction has ended: a 201 is sent only for a create that committed.
            async with store.transaction(write=True, caller=caller.email) as tx:
                answer = await create_answer(
                    tx=tx,
                    caller=caller,
                    resource=resource,
                    resources=self._resources,
                    body=body,
                    raw_key=_header_text(scope, b"idempotency-key"),
                    settings=settings,
                )
        except Exception as exc:
            await send_service_error(send, answer_failure(exc, scope.setdefault("state", {})))
            return
        headers = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in answer.headers.items()]
        await _send_json(send, answer.status, answer.body, headers)


def _header_text(scope: Any, name: bytes) -> str | None:
    """The first value of a request header, as the framework's `request.headers.get` reads it."""
    return next((value.decode("latin-1") for key, value in scope["headers"] if key == name), None)


def _has_origin(scope: Any) -> bool:
    return any(key == b"origin" for key, _ in scope["headers"])


async def _send_json(send: Any, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    # Content-Length too, although the HTTP server would set it: the answer to HEAD, whose body the edge leaves
    # out, says the length of GET's.
    headers += [_JSON_CONTENT_TYPE, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


_JSON_CONTENT_TYPE = (b"content-type", b"application/json")
_ID_LENGTH = 36
"""A record id's length in canonical form: what follows the collection's path in a lookup."""


def routes_of(resource: Resource, resources: ResourceSet) -> Router:
    """`/v1/{name}` and `/v1/{name}/{id}` of one resource."""

    async def body_of(request: ApiRequest, path_id: str | None = None) -> Body:
        document = decode_json(await request.body())
        return read_body(resource, document, context=reading_context(request), path_id=path_id)

    # Litestar makes its own OPTIONS handler for a path whose first handler is not one, and its Allow lists
    # only that first handler's methods (litestar-org/litestar#4169): these come first, so that ours are used.
    @route("/", http_method=HttpMethod.OPTIONS, sync_to_thread=False, name=f"{resource.name}:options")
    def allowed_methods_of_collection() -> Response[bytes]:
        return Response(content=b"", status_code=204, headers={"Allow": _ALLOW_COLLECTION})

    @route(
        "/{record_id:str}", http_method=HttpMethod.OPTIONS, sync_to_thread=False, name=f"{resource.name}:options-record"
    )
    def allowed_methods_of_record() -> Response[bytes]:
        return Response(content=b"", status_code=204, headers={"Allow": _ALLOW_RECORD})

    @route(
        "/{record_id:str}/history",
        http_method=HttpMethod.OPTIONS,
        sync_to_thread=False,
        name=f"{resource.name}:options-history",
    )
    def allowed_methods_of_history() -> Response[bytes]:
        return Response(content=b"", status_code=204, headers={"Allow": ALLOW_READ_ONLY})

    @post("/", dependencies={"tx": Provide(provide_write_tx)}, name=f"{resource.name}:create")
    async def create(request: ApiRequest, tx: NamedDependency[Transaction]) -> Response[bytes]:
        answer = await create_answer(
            tx=tx,
            caller=request.user,
            resource=resource,
            resources=resources,
            body=await body_of(request),
            raw_key=request.headers.get("Idempotency-Key"),
            settings=_settings(request),
        )
        return Response(content=answer.body, status_code=answer.status, media_type=JSON, headers=answer.headers)

    @get("/", dependencies={"tx": Provide(provide_read_tx)}, name=f"{resource.name}:list")
    async def list_records(request: ApiRequest, tx: NamedDependency[Transaction]) -> Response[bytes]:
        settings = _settings(request)
        list_request = parse_list_query(
            resource,
            query_pairs(request.scope["query_string"]),
            context=reading_context(request),
            default_page_size=settings.default_page_size,
            max_page_size=settings.max_page_size,
        )
        page = await service.list_records(tx=tx, caller=request.user, resource=resource, request=list_request)
        return Response(content=msgspec.json.encode(page.wire()), media_type=JSON)

    @get("/{record_id:str}", name=f"{resource.name}:get")
    async def get_record(request: ApiRequest, record_id: FromPath[str]) -> Response[bytes]:
        lookup = await look_up(
            store=_store(request),
            caller=request.user,
            resource=resource,
            record_id=record_id,
            if_none_match=request.headers.get("If-None-Match"),
        )
        headers = {"ETag": lookup.etag}
        if lookup.body is None:
            return Response(content=b"", status_code=304, headers=headers)
        return Response(content=lookup.body, status_code=200, media_type=JSON, headers=headers)

    @put("/{record_id:str}", dependencies={"tx": Provide(provide_write_tx)}, name=f"{resource.name}:replace")
    async def replace(
        request: ApiRequest, tx: NamedDependency[Transaction], record_id: FromPath[str]
    ) -> Response[bytes]:
        body = await body_of(request, record_id)
        row = await service.replace_record(
            tx=tx,
            caller=request.user,
            resource=resource,
            resources=resources,
            record_id=record_id,
            body=body,
            if_match=_entity_tags(request, "If-Match"),
        )
        return record_response(resource, row)

    @delete(
        "/{record_id:str}",
        status_code=200,
        dependencies={"tx": Provide(provide_write_tx)},
        name=f"{resource.name}:delete",
    )
    async def delete_one(
        request: ApiRequest, tx: NamedDependency[Transaction], record_id: FromPath[str]
    ) -> Response[bytes]:
        if_match = _entity_tags(request, "If-Match")
        row = await service.delete_record(
            tx=tx, caller=request.user, resource=resource, resources=resources, record_id=record_id, if_match=if_match
        )
        return record_response(resource, row)

    @get("/{record_id:str}/history", dependencies={"tx": Provide(provide_read_tx)}, name=f"{resource.name}:history")
    async def history(
        request: ApiRequest, tx: NamedDependency[Transaction], record_id: FromPath[str]
    ) -> Response[bytes]:
        settings = _settings(request)
        page_index, page_size = parse_paging(
            query_pairs(request.scope["query_string"]),
            default_page_size=settings.default_page_size,
            max_page_size=settings.max_page_size,
        )
        page = await history_page(
            tx=tx,
            caller=request.user,
            resource=resource,
            record_id=record_id,
            page_index=page_index,
            page_size=page_size,
        )
        return Response(content=msgspec.json.encode(page), media_type=JSON)

    return Router(
        path=resource.path,
        route_handlers=[
            allowed_methods_of_collection,
            allowed_methods_of_record,
            allowed_methods_of_history,
            history,
            create,
            list_records,
            get_record,
            replace,
            delete_one,
        ],
        middleware=[ApiGate],
    )


def feed_routes(resources: ResourceSet) -> Router:
    """`/v1/changes`: the change feed, as pages of JSON or, to `Accept: text/event-stream`, live."""

    @route("/", http_method=HttpMethod.OPTIONS, sync_to_thread=False, name="changes:options")
    def allowed_methods_of_changes() -> Response[bytes]:
        return Response(content=b"", status_code=204, headers={"Allow": ALLOW_READ_ONLY})

    @get("/", name="changes:list")
    async def changes(request: ApiRequest) -> Response[bytes] | Stream:
        feed = parse_feed_query(query_pairs(request.scope["query_string"]), resources)
        caller = request.user
        reader = None if caller.is_admin else caller.email
        if "text/event-stream" not in request.headers.get("accept", ""):
            page = await feed_page(store=_store(request), caller=caller, request=feed)
            return Response(content=msgspec.json.encode(page), media_type=JSON)
        # A transaction of its own, ended before a live stream starts: a stream holds no connection.
        async with _store(request).transaction(write=False) as tx:
            last_event_id = request.headers.get("Last-Event-ID")
            already: frozenset[Cursor] = frozenset()
            if last_event_id is not None:
                start = await start_of(tx, decode_cursor("Last-Event-ID", last_event_id), name="Last-Event-ID")
            elif feed.after is not None:
                start = await start_of(tx, feed.after)
            else:
                # From now on: after the last change no write in flight can precede, but those committed
                # already (a transaction that began earlier is still writing).
                start = await tx.head_cursor()
                already = frozenset(await tx.committed_after(start, limit=COMMITTED_AT_OPEN))
        hub: ChangeHub = request.app.state.change_hub

        async def frames() -> AsyncIterator[bytes]:
            yield b"retry: 1000\n\n"
            async for change in hub.follow(start, reader=reader, resources=feed.resources, already=already):
                yield hub.frame(change)

        return Stream(frames(), media_type="text/event-stream", headers={"X-Accel-Buffering": "no"})

    return Router(path="/v1/changes", route_handlers=[allowed_methods_of_changes, changes], middleware=[ApiGate])
