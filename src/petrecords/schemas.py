"""Wire shapes of the pet resource (msgspec). The read shape is the only place that formats timestamps."""

from __future__ import annotations

import msgspec

from petrecords.store.base import PetRow
from petrecords.values import format_timestamp


class PetWrite(msgspec.Struct, kw_only=True, rename="camel"):
    """The body of create and replace, once validated."""

    name: str
    pet_type: str
    owner_id: str | None = None


class PetRead(msgspec.Struct, kw_only=True, rename="camel"):
    id: str
    created_at: str
    created_by: str
    modified_at: str
    modified_by: str
    owner_id: str
    name: str
    pet_type: str


class PetPage(msgspec.Struct, kw_only=True, rename="camel"):
    items: list[PetRead]
    page_index: int
    page_size: int
    total_pages: int
    total_count: int
    has_previous_page: bool
    has_next_page: bool


def pet_read(pet: PetRow) -> PetRead:
    return PetRead(
        id=str(pet.id),
        created_at=format_timestamp(pet.created_at),
        created_by=pet.created_by,
        modified_at=format_timestamp(pet.modified_at),
        modified_by=pet.modified_by,
        owner_id=pet.owner_id,
        name=pet.name,
        pet_type=pet.pet_type,
    )
