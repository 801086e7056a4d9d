"""What a live hub reads from the change log when no administrator streams (`changes_seen_by`), on both
databases, after real writes: exactly the changes in its range that one of the callers it reads for may see;
and streams opened together wait for its first poll rather than each reading the log; a poll that finds no new
change reads no range of it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from petrecords.app import open_store
from petrecords.changes import live
from petrecords.changes.change import sees
from petrecords.changes.live import ChangeHub
from petrecords.config import Settings
from petrecords.store.base import Viewer
from tests.api.test_changes_feed import settled
from tests.support import ALICE, BOB, admin, auth, create, create_vaccine

CY = "cy@example.com"
NO_ONE = Viewer(email="", grantees=())
"""Who sees the shared catalogue's changes only."""


def _viewer(email: str) -> Viewer:
    return Viewer(email=email, grantees=(email,))


async def test_a_poll_for_some_callers_reads_their_changes_and_the_shared_ones_in_its_range(
    client: AsyncTestClient[Any], settings: Settings
) -> None:
    alices = await create(client, ALICE, name="Rex", petType="Dog")
    await create(client, BOB, name="Tom", petType="Cat")
    await create_vaccine(client, name="Rabies", petType="Dog")
    transfer = {"name": "Rex", "petType": "Dog", "ownerId": BOB}
    await client.put(alices.headers["location"], json=transfer, headers=admin())
    await create(client, CY, name="Coco", petType="Dog")
    await create(client, BOB, name="Max", petType="Dog")
    await client.delete(alices.headers["location"], headers=auth(BOB))
    await settled(client, 7)
    store = open_store(settings)
    try:
        async with store.transaction(write=False) as tx:
            log = list(await tx.changes_after((0, 0), limit=100, reader=None, resources=None))
            assert len(log) == 7
            for readers in ([], [ALICE], [BOB], [CY], [ALICE, CY], [ALICE, BOB, CY], ["nobody@example.com"]):
                for first, last in ((0, 6), (0, 3), (2, 5), (6, 6)):
                    after = log[first - 1].cursor if first else (0, 0)
                    through = log[last].cursor
                    expected = [
                        change
                        for change in log[first : last + 1]
                        if sees(NO_ONE, change) or any(sees(_viewer(reader), change) for reader in readers)
                    ]
                    got = await tx.changes_seen_by(after, through=through, readers=readers, limit=100)
                    assert list(got) == expected, (readers, first, last)
            # Its limit: the first changes of the range, in order.
            got = await tx.changes_seen_by((0, 0), through=log[-1].cursor, readers=[BOB], limit=2)
            assert list(got) == [change for change in log if sees(_viewer(BOB), change)][:2]
    finally:
        await store.close()


async def test_streams_opened_together_wait_for_the_first_poll_rather_than_each_reading_the_log(
    client: AsyncTestClient[Any], settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(settings)
    hub = ChangeHub(lambda: store, keep_alive_seconds=30)
    streams = []
    try:
        async with store.transaction(write=False) as tx:
            transaction_type, head = type(tx), await tx.head_cursor()
        reads = 0
        read_the_log = transaction_type.changes_after

        async def counted(*args: Any, **kwargs: Any) -> Any:
            nonlocal reads
            reads += 1
            return await read_the_log(*args, **kwargs)

        monkeypatch.setattr(transaction_type, "changes_after", counted)
        streams = [hub.follow(head, reader=_viewer(ALICE), resources=None) for _ in range(50)]
        firsts = [asyncio.ensure_future(anext(stream)) for stream in streams]
        # The first poll has read the head: what is written from now on, the streams read from the hub.
        await asyncio.wait_for(hub._polled.wait(), 10)
        await create(client, ALICE, name="Rex", petType="Dog")
        got = await asyncio.wait_for(asyncio.gather(*firsts), 10)
        assert {(change.resource, change.action) for change in got} == {("pets", "created")}
        assert len({change.cursor for change in got}) == 1
        assert reads == 0
    finally:
        for stream in streams:
            await stream.aclose()
        await hub.close()
        await store.close()


async def test_a_poll_that_finds_the_head_where_it_was_reads_no_range_of_the_log(
    client: AsyncTestClient[Any], settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(live, "POLL_SECONDS", 0.01)
    store = open_store(settings)
    hub = ChangeHub(lambda: store, keep_alive_seconds=30)
    stream = None
    try:
        async with store.transaction(write=False) as tx:
            transaction_type, head = type(tx), await tx.head_cursor()
        heads = reads = 0
        polled_enough = asyncio.Event()
        read_the_head, read_the_range = transaction_type.head_cursor, transaction_type.changes_seen_by

        async def counted_head(*args: Any, **kwargs: Any) -> Any:
            nonlocal heads
            heads += 1
            if heads == 20:
                polled_enough.set()
            return await read_the_head(*args, **kwargs)

        async def counted_range(*args: Any, **kwargs: Any) -> Any:
            nonlocal reads
            reads += 1
            return await read_the_range(*args, **kwargs)

        monkeypatch.setattr(transaction_type, "head_cursor", counted_head)
        monkeypatch.setattr(transaction_type, "changes_seen_by", counted_range)
        stream = hub.follow(head, reader=_viewer(ALICE), resources=None)
        first = asyncio.ensure_future(anext(stream))
        await asyncio.wait_for(polled_enough.wait(), 10)  # polls that find nothing new
        assert reads == 0
        await create(client, ALICE, name="Rex", petType="Dog")
        change = await asyncio.wait_for(first, 10)
        assert (change.resource, change.action) == ("pets", "created")
        assert reads >= 1
    finally:
        if stream is not None:
            await stream.aclose()
        await hub.close()
        await store.close()
