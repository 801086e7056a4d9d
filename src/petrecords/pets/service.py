"""Service functions of the pet resource. They read and write through a transaction and never commit."""

from __future__ import annotations

import math

import msgspec

from petrecords.auth import Caller
from petrecords.errors import Forbidden, NotFound, PreconditionFailed
from petrecords.pets.rules import EntityTags, ListRequest, etag_for
from petrecords.schemas import PetPage, PetWrite, pet_read
from petrecords.store.base import PetPageQuery, PetRow, Transaction
from petrecords.values import new_record_id, now_ms, parse_record_id


async def load_visible_pet(*, tx: Transaction, caller: Caller, pet_id: str, for_update: bool = False) -> PetRow:
    """The record the caller may see. Someone else's record is as absent as one that does not exist."""
    record_id = parse_record_id(pet_id)
    pet = None if record_id is None else await tx.get_pet(record_id, for_update=for_update)
    if pet is None or not (caller.is_admin or pet.owner_id == caller.email):
        raise NotFound()
    return pet


def _owner_for(caller: Caller, requested: str | None, *, default: str) -> str:
    owner = requested or default
    if owner != caller.email and not caller.is_admin and requested is not None:
        raise Forbidden("Only an administrator may set ownerId to another user.")
    return owner


def _check_if_match(if_match: EntityTags | None, pet: PetRow) -> None:
    if if_match is not None and not if_match.match_strong(etag_for(pet)):
        raise PreconditionFailed()


async def create_pet(*, tx: Transaction, caller: Caller, data: PetWrite) -> PetRow:
    owner = _owner_for(caller, data.owner_id, default=caller.email)
    timestamp = now_ms()
    pet = PetRow(
        id=new_record_id(),
        created_at=timestamp,
        created_by=caller.email,
        modified_at=timestamp,
        modified_by=caller.email,
        owner_id=owner,
        name=data.name,
        pet_type=data.pet_type,
        revision=1,
    )
    await tx.insert_pets([pet])
    return pet


async def replace_pet(
    *, tx: Transaction, caller: Caller, pet_id: str, data: PetWrite, if_match: EntityTags | None
) -> PetRow:
    current = await load_visible_pet(tx=tx, caller=caller, pet_id=pet_id, for_update=True)
    owner = _owner_for(caller, data.owner_id, default=current.owner_id)
    _check_if_match(if_match, current)
    replaced = msgspec.structs.replace(
        current,
        name=data.name,
        pet_type=data.pet_type,
        owner_id=owner,
        # Never earlier than the last write, even when another instance's clock runs ahead.
        modified_at=max(now_ms(), current.modified_at),
        modified_by=caller.email,
        revision=current.revision + 1,
    )
    await tx.update_pet(replaced, previous=current)
    return replaced


async def delete_pet(*, tx: Transaction, caller: Caller, pet_id: str, if_match: EntityTags | None) -> PetRow:
    current = await load_visible_pet(tx=tx, caller=caller, pet_id=pet_id, for_update=True)
    _check_if_match(if_match, current)
    await tx.delete_pet(current)
    return current


async def list_pets(*, tx: Transaction, caller: Caller, request: ListRequest, owner_id: str | None) -> PetPage:
    pet_filter = request.filter
    visible = True
    if owner_id is not None:
        pet_filter = msgspec.structs.replace(pet_filter, owner_id=owner_id)
        visible = caller.is_admin or owner_id == caller.email
    elif not caller.is_admin:
        pet_filter = msgspec.structs.replace(pet_filter, owner_id=caller.email)

    total = await tx.count_pets(pet_filter) if visible else 0
    items: list[PetRow] = []
    if request.offset < total:
        query = PetPageQuery(
            filter=pet_filter,
            sort=request.sort,
            limit=request.page_size,
            offset=request.offset,
            pet_type_order=request.pet_type_order,
        )
        items = list(await tx.list_pets(query))
    total_pages = math.ceil(total / request.page_size)
    return PetPage(
        items=[pet_read(pet) for pet in items],
        page_index=request.page_index,
        page_size=request.page_size,
        total_pages=total_pages,
        total_count=total,
        has_previous_page=request.page_index > 1,
        has_next_page=request.page_index < total_pages,
    )
