"""Deep pages: what a page seeks to from a remembered anchor is exactly what OFFSET gives.

Thousands of records are loaded through the store (HTTP would take too long), then pages around and
beyond the anchor blocks are fetched over HTTP and compared with the plain OFFSET query, before and
after writes by the service and by another instance.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

import msgspec
import pytest
from litestar.testing import AsyncTestClient

from petrecords.app import open_store
from petrecords.config import Settings
from petrecords.pets.rules import PetTypes, parse_list_query
from petrecords.store.base import PetPageQuery, PetRow, Store
from petrecords.store.pages import BLOCK
from petrecords.store.sql import SqlTransaction, list_statement, row_to_pet
from petrecords.values import new_record_id
from tests.support import ALICE, BOB, auth, pet_body

ROWS = 2 * BLOCK + 300
TYPES = ("Dog", "Cat", "Capybara", "Other")
QUERIES = [
    {},
    {"sort": "name"},
    {"sort": "petType,name"},
    {"sort": "-createdAt"},
    {"order": "desc"},
    {"petType": "Dog,Cat"},
]


@pytest.fixture
async def store(client: AsyncTestClient[Any], settings: Settings) -> AsyncIterator[Store]:
    """A second store on the client's (emptied) database, holding ROWS pets of Alice's and a few of Bob's."""
    opened = open_store(settings)
    rng = random.Random(7)
    pets = [
        PetRow(
            id=new_record_id(),
            created_at=1_700_000_000_000 + index // 3,  # ties, broken by id
            created_by=ALICE,
            modified_at=1_700_000_000_000 + index,
            modified_by=ALICE,
            owner_id=ALICE if index % 50 else BOB,
            name=rng.choice(["rex", "Tom", "bella", "Max", "luna"]) + f" {rng.randrange(100)}",
            pet_type=rng.choice(TYPES),
            revision=1,
        )
        for index in range(ROWS)
    ]
    async with opened.transaction(write=True) as tx:
        await tx.insert_pets(pets)
    yield opened
    await opened.close()


def _alice_query(settings: Settings, params: dict[str, str]) -> PetPageQuery:
    """The store query the service makes of Alice's list request with `params`."""
    request, _ = parse_list_query(
        list(params.items()),
        pet_types=PetTypes(settings.pet_types),
        default_page_size=settings.default_page_size,
        max_page_size=settings.max_page_size,
    )
    return PetPageQuery(
        filter=msgspec.structs.replace(request.filter, owner_id=ALICE),
        sort=request.sort,
        limit=request.page_size,
        offset=request.offset,
        pet_type_order=request.pet_type_order,
    )


async def _offset_page(store: Store, query: PetPageQuery) -> list[str]:
    async with store.transaction(write=False) as tx:
        assert isinstance(tx, SqlTransaction)
        return [str(row_to_pet(row).id) for row in await tx.fetch(list_statement(query))]


async def _assert_pages_match(client: AsyncTestClient[Any], store: Store, settings: Settings) -> None:
    page_size = 100
    for params in QUERIES:
        for first_row in (BLOCK - 1, BLOCK, BLOCK + 57, 2 * BLOCK - 100, 2 * BLOCK + 250, ROWS + 500):
            page = {**params, "pageSize": str(page_size), "pageIndex": str(first_row // page_size + 1)}
            response = await client.get(f"/v1/pets?{urlencode(page)}", headers=auth(ALICE))
            assert response.status_code == 200, response.text
            got = [item["id"] for item in response.json()["items"]]
            assert got == await _offset_page(store, _alice_query(settings, page)), page


async def test_deep_pages_equal_offset_pages(client: AsyncTestClient[Any], store: Store, settings: Settings) -> None:
    await _assert_pages_match(client, store, settings)
    # Again, now from the anchors the first pass left behind.
    await _assert_pages_match(client, store, settings)


async def test_deep_pages_follow_writes(client: AsyncTestClient[Any], store: Store, settings: Settings) -> None:
    await _assert_pages_match(client, store, settings)
    created = await client.post("/v1/pets", json=pet_body("aaa first"), headers=auth(ALICE))
    assert created.status_code == 201
    await _assert_pages_match(client, store, settings)
    # Deletes by another instance (its own store on the same database).
    async with store.transaction(write=True) as tx:
        assert isinstance(tx, SqlTransaction)
        first_rows = msgspec.structs.replace(_alice_query(settings, {}), limit=150)
        doomed = [row_to_pet(row) for row in await tx.fetch(list_statement(first_rows))]
        for pet in doomed:
            await tx.delete_pet(pet)
    await _assert_pages_match(client, store, settings)


async def test_every_kind_of_write_moves_the_data_version(
    client: AsyncTestClient[Any], settings: Settings, database_url: str
) -> None:
    """What tells every instance that its anchors are stale, including a replace that changes no count."""
    writer, reader = open_store(settings), open_store(settings)

    async def version() -> Any:
        async with reader.transaction(write=False) as tx:
            assert isinstance(tx, SqlTransaction)
            return await tx.data_version()

    try:
        pet = PetRow(
            id=new_record_id(),
            created_at=1,
            created_by=ALICE,
            modified_at=1,
            modified_by=ALICE,
            owner_id=ALICE,
            name="Rex",
            pet_type="Dog",
            revision=1,
        )
        renamed = msgspec.structs.replace(pet, name="Max", revision=2)
        seen = [await version()]
        async with writer.transaction(write=True) as tx:
            await tx.insert_pets([pet])
        seen.append(await version())
        async with writer.transaction(write=True) as tx:
            await tx.update_pet(renamed, previous=pet)
        seen.append(await version())
        async with writer.transaction(write=True) as tx:
            await tx.delete_pet(renamed)
        seen.append(await version())
        assert len(set(seen)) == 4, seen
    finally:
        await writer.close()
        await reader.close()
