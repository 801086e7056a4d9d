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
from petrecords.config import Settings, configured_lists
from petrecords.pets import PETS
from petrecords.resources.fields import Context
from petrecords.resources.listing import parse_list_query
from petrecords.store.base import Condition, Operator, PageQuery, Store
from petrecords.store.pages import BLOCK
from petrecords.store.queries import list_statement
from petrecords.store.records import reader_of
from petrecords.store.sql import SqlTransaction
from tests.support import ALICE, BOB, PET_RECORDS, auth, pet_body, pet_row

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
    pets = []
    for index in range(ROWS):
        name = rng.choice(["rex", "Tom", "bella", "Max", "luna"]) + f" {rng.randrange(100)}"
        pet = pet_row(name, owner=ALICE if index % 50 else BOB, pet_type=rng.choice(TYPES))
        pet["created_at"] = 1_700_000_000_000 + index // 3  # ties, broken by id
        pet["modified_at"] = 1_700_000_000_000 + index
        pets.append(pet)
    async with opened.transaction(write=True) as tx:
        await tx.insert_many(PET_RECORDS, pets)
    yield opened
    await opened.close()


def _alice_query(settings: Settings, params: dict[str, str]) -> PageQuery:
    """The store query the service makes of Alice's list request with `params`."""
    request = parse_list_query(
        PETS,
        list(params.items()),
        context=Context.configured(configured_lists(settings), now_ms=0),
        default_page_size=settings.default_page_size,
        max_page_size=settings.max_page_size,
    )
    return PageQuery(
        conditions=(*request.conditions, Condition(("owner_id",), Operator.EQUAL, (ALICE,))),
        sort=request.sort,
        limit=request.page_size,
        offset=request.offset,
    )


async def _offset_page(store: Store, query: PageQuery) -> list[str]:
    async with store.transaction(write=False) as tx:
        assert isinstance(tx, SqlTransaction)
        rows = await tx.fetch(list_statement(PET_RECORDS, query))
        return [str(reader_of(PET_RECORDS).row(row)["id"]) for row in rows]


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
        doomed = [reader_of(PET_RECORDS).row(row) for row in await tx.fetch(list_statement(PET_RECORDS, first_rows))]
        for pet in doomed:
            await tx.delete(PET_RECORDS, pet)
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
        pet = pet_row(at_ms=1)
        renamed = {**pet, "name": "Max", "name_key": "max", "revision": 2}
        seen = [await version()]
        async with writer.transaction(write=True) as tx:
            await tx.insert(PET_RECORDS, pet)
        seen.append(await version())
        async with writer.transaction(write=True) as tx:
            await tx.update(PET_RECORDS, renamed, previous=pet)
        seen.append(await version())
        async with writer.transaction(write=True) as tx:
            await tx.delete(PET_RECORDS, renamed)
        seen.append(await version())
        assert len(set(seen)) == 4, seen
    finally:
        await writer.close()
        await reader.close()
