"""HTTP layer of the pet resource: reads the request, calls one service function, shapes the answer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import msgspec
from litestar import Controller, HttpMethod, Request, Response, delete, get, post, put, route
from litestar.di import NamedDependency, Provide
from litestar.params import FromPath

from petrecords.auth import Caller
from petrecords.config import Settings
from petrecords.errors import IdempotencyKeyReused
from petrecords.http import ApiGate
from petrecords.pets import service
from petrecords.pets.rules import (
    EntityTags,
    PetTypes,
    canonical_json_hash,
    check_idempotency_key,
    decode_json,
    etag_for,
    parse_list_query,
    query_pairs,
    validate_pet_write,
)
from petrecords.schemas import PetWrite, pet_read
from petrecords.store.base import PetRow, Store, StoredResponse, Transaction
from petrecords.values import now_ms

JSON = "application/json"
_PURGE_EVERY = 100
# What OPTIONS answers on each path (after the token check, like every other method).
_ALLOW_COLLECTION = "GET, HEAD, OPTIONS, POST"
_ALLOW_RECORD = "DELETE, GET, HEAD, OPTIONS, PUT"


# Each handler takes one dependency, its transaction. Litestar resolves sibling dependencies in an
# anyio task group, which costs more than a primary-key lookup; so the caller comes from
# `request.user` (set by ApiGate) and the settings from the application's state.
PetRequest = Request[Caller, Any, Any]


def _store(request: Request[Any, Any, Any]) -> Store:
    store: Store = request.app.state.store
    return store


async def provide_read_tx(request: Request[Any, Any, Any]) -> AsyncIterator[Transaction]:
    async with _store(request).transaction(write=False) as tx:
        yield tx


async def provide_write_tx(request: Request[Any, Any, Any]) -> AsyncIterator[Transaction]:
    async with _store(request).transaction(write=True) as tx:
        yield tx


def _settings(request: PetRequest) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def _pet_types(request: PetRequest) -> PetTypes:
    pet_types: PetTypes = request.app.state.pet_types
    return pet_types


class PetBody(msgspec.Struct, frozen=True):
    data: PetWrite
    document: Any


async def _pet_body(request: PetRequest) -> PetBody:
    document = decode_json(await request.body())
    path_id = request.path_params.get("pet_id")
    return PetBody(data=validate_pet_write(document, pet_types=_pet_types(request), path_id=path_id), document=document)


def _entity_tags(request: Request[Any, Any, Any], header: str) -> EntityTags | None:
    value = request.headers.get(header)
    return None if value is None else EntityTags.parse(header, value)


def _pet_response(pet: PetRow, *, status: int = 200, headers: dict[str, str] | None = None) -> Response[bytes]:
    return Response(
        content=msgspec.json.encode(pet_read(pet)),
        status_code=status,
        media_type=JSON,
        headers={"ETag": etag_for(pet), **(headers or {})},
    )


class PetController(Controller):
    path = "/v1/pets"
    middleware = [ApiGate]  # noqa: RUF012 - Litestar reads this class attribute

    # Litestar 2 adds a controller's handlers one at a time, in the alphabetical order of their names; when the
    # first one of a path is not an OPTIONS handler, it makes its own, whose Allow lists only that first
    # handler's methods (litestar-org/litestar#4169). These names come first, so that ours are used.
    @route("/", http_method=HttpMethod.OPTIONS, sync_to_thread=False)
    def allowed_methods_of_collection(self) -> Response[bytes]:
        return Response(content=b"", status_code=204, headers={"Allow": _ALLOW_COLLECTION})

    @route("/{pet_id:str}", http_method=HttpMethod.OPTIONS, sync_to_thread=False)
    def allowed_methods_of_record(self) -> Response[bytes]:
        return Response(content=b"", status_code=204, headers={"Allow": _ALLOW_RECORD})

    @post("/", dependencies={"tx": Provide(provide_write_tx)})
    async def create_pet(self, request: PetRequest, tx: NamedDependency[Transaction]) -> Response[bytes]:
        caller, pet_body = request.user, await _pet_body(request)
        raw_key = request.headers.get("Idempotency-Key")
        key = None if raw_key is None else check_idempotency_key(raw_key)
        if key is None:
            pet = await service.create_pet(tx=tx, caller=caller, data=pet_body.data)
            return _pet_response(pet, status=201, headers={"Location": f"/v1/pets/{pet.id}"})

        request_hash = canonical_json_hash(pet_body.document)
        now = now_ms()
        stored = await tx.claim_idempotency_key(caller.email, key, now_ms=now)
        if stored is not None:
            if stored.request_hash != request_hash:
                raise IdempotencyKeyReused()
            headers = {"Idempotent-Replayed": "true"}
            headers.update(
                {name: value for name, value in (("Location", stored.location), ("ETag", stored.etag)) if value}
            )
            return Response(content=stored.body, status_code=stored.status, media_type=JSON, headers=headers)

        pet = await service.create_pet(tx=tx, caller=caller, data=pet_body.data)
        response = _pet_response(pet, status=201, headers={"Location": f"/v1/pets/{pet.id}"})
        await tx.save_idempotent_response(
            caller.email,
            key,
            StoredResponse(
                request_hash=request_hash,
                status=201,
                body=response.content,
                location=f"/v1/pets/{pet.id}",
                etag=etag_for(pet),
            ),
            expires_at_ms=now + _settings(request).idempotency_ttl_seconds * 1000,
        )
        if pet.id.int % _PURGE_EVERY == 0:
            await tx.purge_expired_idempotency_keys(now_ms=now, limit=1000)
        return response

    @get("/", dependencies={"tx": Provide(provide_read_tx)})
    async def list_pets(self, request: PetRequest, tx: NamedDependency[Transaction]) -> Response[bytes]:
        settings = _settings(request)
        list_request, owner_id = parse_list_query(
            query_pairs(request.scope["query_string"]),
            pet_types=_pet_types(request),
            default_page_size=settings.default_page_size,
            max_page_size=settings.max_page_size,
        )
        page = await service.list_pets(tx=tx, caller=request.user, request=list_request, owner_id=owner_id)
        return Response(content=msgspec.json.encode(page), media_type=JSON)

    @get("/{pet_id:str}", dependencies={"tx": Provide(provide_read_tx)})
    async def get_pet(
        self, request: PetRequest, tx: NamedDependency[Transaction], pet_id: FromPath[str]
    ) -> Response[bytes]:
        if_none_match = _entity_tags(request, "If-None-Match")
        pet = await service.load_visible_pet(tx=tx, caller=request.user, pet_id=pet_id)
        if if_none_match is not None and if_none_match.match_weak(etag_for(pet)):
            return Response(content=b"", status_code=304, headers={"ETag": etag_for(pet)})
        return _pet_response(pet)

    @put("/{pet_id:str}", dependencies={"tx": Provide(provide_write_tx)})
    async def replace_pet(
        self, request: PetRequest, tx: NamedDependency[Transaction], pet_id: FromPath[str]
    ) -> Response[bytes]:
        pet_body = await _pet_body(request)
        if_match = _entity_tags(request, "If-Match")
        pet = await service.replace_pet(
            tx=tx, caller=request.user, pet_id=pet_id, data=pet_body.data, if_match=if_match
        )
        return _pet_response(pet)

    @delete("/{pet_id:str}", status_code=200, dependencies={"tx": Provide(provide_write_tx)})
    async def delete_pet(
        self, request: PetRequest, tx: NamedDependency[Transaction], pet_id: FromPath[str]
    ) -> Response[bytes]:
        if_match = _entity_tags(request, "If-Match")
        pet = await service.delete_pet(tx=tx, caller=request.user, pet_id=pet_id, if_match=if_match)
        return _pet_response(pet)
