"""The NATS publisher's own rules (duties.Publisher), on both databases, against a NATS server of the test's own:
a publish that fails moves no cursor, the lease passes to another instance once its holder stops renewing it,
and a publisher that takes over sends nothing twice, even when the stream's duplicate window has long passed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import nats
import nats.js
import pytest
from litestar.testing import AsyncTestClient

from petrecords.app import open_store
from petrecords.config import Settings
from petrecords.duties import Publisher
from petrecords.store.base import Store
from tests.nats_server import NatsServer, nats_server
from tests.support import ALICE, create

pytestmark = pytest.mark.slow

Client = AsyncTestClient[Any]
CHANGES = 5
WAIT_SECONDS = 15.0


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[NatsServer]:
    with nats_server(tmp_path / "nats") as started:
        yield started


@pytest.fixture
async def store(
    make_client: Callable[[Settings], Client], make_settings: Callable[..., Settings]
) -> AsyncIterator[Store]:
    """The store of an emptied database that holds CHANGES changes."""
    async with make_client(make_settings()) as client:
        for number in range(CHANGES):
            await create(client, ALICE, name=f"pet {number}")
    opened = open_store(make_settings())
    yield opened
    await opened.close()


async def _jetstream(broker: NatsServer) -> tuple[Any, Any]:
    connection = await nats.connect(broker.url, connect_timeout=2, allow_reconnect=False, max_reconnect_attempts=0)
    return connection, connection.jetstream(timeout=2)


def _publisher(make_settings: Callable[..., Settings], broker: NatsServer, store: Store, instance: str) -> Publisher:
    publisher = Publisher(make_settings(nats_url=broker.url), lambda: store, instance=instance)
    # Short, so that a takeover happens within the test: the rules are the same at any length.
    publisher.LEASE_SECONDS = 0.3
    publisher.RENEW_SECONDS = 0.05
    return publisher


async def _message_ids(stream: Any) -> list[str]:
    info = await stream.stream_info(Publisher.STREAM)
    ids = []
    for sequence in range(info.state.first_seq, info.state.last_seq + 1):
        message = await stream.get_msg(Publisher.STREAM, seq=sequence)
        ids.append(message.headers["Nats-Msg-Id"])
    return ids


async def _published_cursor(store: Store) -> tuple[int, int]:
    async with store.transaction(write=False) as tx:
        return await tx.state_cursor(Publisher.LEASE)


async def test_a_publish_that_fails_moves_no_cursor(
    store: Store,
    broker: NatsServer,
    make_settings: Callable[..., Settings],
    make_client: Callable[[Settings], Client],
) -> None:
    publisher = _publisher(make_settings, broker, store, "first")
    connection, stream = await _jetstream(broker)
    await stream.add_stream(name=Publisher.STREAM, subjects=["petrecords.>"])
    assert await publisher.publish_once(stream)
    published = await _published_cursor(store)
    async with make_client(make_settings()) as client:
        await create(client, ALICE, name="after")
    broker.stop()

    with pytest.raises((nats.errors.Error, OSError, TimeoutError)):
        await publisher.publish_once(stream)
    await connection.close()

    assert await _published_cursor(store) == published
    broker.start()
    connection, stream = await _jetstream(broker)
    try:
        assert await publisher.publish_once(stream)
        assert len(await _message_ids(stream)) == CHANGES + 1
    finally:
        await connection.close()


async def test_a_lease_taken_while_nats_is_down_is_used_once_it_is_back(
    store: Store, broker: NatsServer, make_settings: Callable[..., Settings]
) -> None:
    publisher = _publisher(make_settings, broker, store, "first")
    publisher.RENEW_SECONDS = 60  # no second attempt at the lease within the test, but for a failed one
    connection, stream = await _jetstream(broker)
    await stream.add_stream(name=Publisher.STREAM, subjects=["petrecords.>"])
    broker.stop()
    # The lease is taken, then where the stream ends cannot be read.
    with pytest.raises((nats.errors.Error, OSError, TimeoutError)):
        await publisher.publish_once(stream)
    await connection.close()

    broker.start()
    connection, stream = await _jetstream(broker)
    try:
        assert await publisher.publish_once(stream)
        assert len(await _message_ids(stream)) == CHANGES
    finally:
        await connection.close()


async def test_a_takeover_sends_nothing_twice_past_the_duplicate_window(
    store: Store, broker: NatsServer, make_settings: Callable[..., Settings]
) -> None:
    connection, stream = await _jetstream(broker)
    try:
        # A stream an operator made, with a duplicate window far shorter than any takeover takes.
        await stream.add_stream(name=Publisher.STREAM, subjects=["petrecords.>"], duplicate_window=0.1)
        first = _publisher(make_settings, broker, store, "first")
        assert await first.publish_once(stream)
        # Then it died before it could keep its cursor: the next holder finds it where it was.
        async with store.transaction(write=True) as tx:
            assert await tx.set_state_cursor(Publisher.LEASE, (0, 0), holder="first")

        second = _publisher(make_settings, broker, store, "second")
        deadline = time.monotonic() + WAIT_SECONDS
        while not await second.publish_once(stream):  # until the first one's lease has lapsed
            assert time.monotonic() < deadline, "the lease was never taken over"
            await asyncio.sleep(0.01)

        ids = await _message_ids(stream)
        assert len(ids) == len(set(ids)) == CHANGES
        assert await _published_cursor(store) != (0, 0)
        assert not await first.publish_once(stream)  # the lease is the second's now
    finally:
        await connection.close()
