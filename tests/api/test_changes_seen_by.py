"""What a live hub's poll reads from the change log when no administrator streams (`changes_seen_by`), on both
databases, after real writes: exactly the changes in its range that one of the callers it reads for may see."""

from __future__ import annotations

from typing import Any

from litestar.testing import AsyncTestClient

from petrecords.app import open_store
from petrecords.config import Settings
from petrecords.resources.changes import sees
from petrecords.store.base import Viewer
from tests.api.test_changes_feed import settled
from tests.api.test_vaccines import admin, create_vaccine
from tests.support import ALICE, BOB, auth, create

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
