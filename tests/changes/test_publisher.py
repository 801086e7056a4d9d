"""The NATS publisher's own rules (changes.publisher), on both databases, against a NATS server of the test's own:
a publish that fails moves no cursor, the lease passes to another instance once its holder stops renewing it,
a publisher that takes over sends nothing twice, even when the stream's duplicate window has long passed, a
NATS that cannot be reached is said at once and every minute, with the number of changes waiting, and so is a
database that cannot be reached, on one connection to NATS kept all along."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import nats
import nats.js
import pytest
import sqlalchemy as sa
from litestar.testing import AsyncTestClient

from petrecords.app import open_store
from petrecords.changes import publisher as publisher_module
from petrecords.changes.publisher import Publisher
from petrecords.config import Settings
from petrecords.metrics import Metrics
from petrecords.store.base import Store
from tests.servers.nats_server import NatsServer, nats_server
from tests.servers.tcp_proxy import tcp_proxy
from tests.support import ALICE, create, until

pytestmark = pytest.mark.slow

Client = AsyncTestClient[Any]
CHANGES = 5
WAIT_SECONDS = 15.0
STREAM = "PETRECORDS"


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


def _publisher(
    make_settings: Callable[..., Settings],
    broker: NatsServer,
    store: Store,
    instance: str,
    metrics: Metrics | None = None,
    **settings: Any,
) -> Publisher:
    publisher = Publisher(
        make_settings(nats_url=broker.url, **settings), lambda: store, instance=instance, metrics=metrics or Metrics()
    )
    # Short, so that a takeover happens within the test: the rules are the same at any length.
    publisher.LEASE_SECONDS = 0.3
    publisher.RENEW_SECONDS = 0.05
    return publisher


async def _message_ids(stream: Any, name: str = STREAM) -> list[str]:
    info = await stream.stream_info(name)
    ids = []
    for sequence in range(info.state.first_seq, info.state.last_seq + 1):
        message = await stream.get_msg(name, seq=sequence)
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
    await stream.add_stream(name=STREAM, subjects=["petrecords.>"])
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
    await stream.add_stream(name=STREAM, subjects=["petrecords.>"])
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
        await stream.add_stream(name=STREAM, subjects=["petrecords.>"], duplicate_window=0.1)
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


def _unpublished(metrics: Metrics) -> float | None:
    for line in metrics.render().decode().splitlines():
        if line.startswith("petrecords_nats_unpublished_changes "):
            return float(line.split()[1])
    return None


async def test_an_unreachable_nats_is_said_at_once_and_every_minute_with_the_changes_waiting(
    store: Store, broker: NatsServer, make_settings: Callable[..., Settings], caplog: pytest.LogCaptureFixture
) -> None:
    broker.stop()  # as when NATS is down when the service starts, or its URL names nothing
    metrics = Metrics()
    publisher = _publisher(make_settings, broker, store, "first", metrics)
    publisher.RETRY_SECONDS = (0.05,)
    publisher.WARN_SECONDS = 0.5  # "every minute", shortened: the rule is the same at any length
    caplog.set_level(logging.INFO, logger="petrecords.duties")

    def said(text: str = "publishing changes to NATS paused") -> list[str]:
        return [record.getMessage() for record in caplog.records if text in record.getMessage()]

    running = asyncio.create_task(publisher.run())
    try:
        await until(lambda: len(said()) >= 2, what="a warning that publishing is paused, said again", seconds=10)
        # From the records' own times: a poll that sees the first one late would shorten the interval it measures.
        warned = [
            record.created for record in caplog.records if "publishing changes to NATS paused" in record.getMessage()
        ]
        again = warned[1] - warned[0]
        paused = said()
        waiting = _unpublished(metrics)

        broker.start()
        await until(lambda: bool(said("publishing changes to NATS again")), what="publishing again", seconds=10)
        await until(lambda: _unpublished(metrics) == 0, what="the count back at 0", seconds=10)
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)

    assert len(paused) == 2, paused
    assert 0.49 < again < 2.5, again  # never sooner than WARN_SECONDS, from when the first was said
    for message in paused:
        assert broker.url in message, message
        assert f"{CHANGES} committed changes wait" in message, message
        assert "ConnectionRefusedError" in message, message
    assert all(record.levelno == logging.WARNING for record in caplog.records if "paused" in record.getMessage())
    assert waiting == CHANGES
    connection, stream = await _jetstream(broker)
    try:
        assert len(await _message_ids(stream)) == CHANGES
    finally:
        await connection.close()


@contextlib.contextmanager
def _database_that_goes_away(
    make_settings: Callable[..., Settings], database_url: str
) -> Iterator[tuple[Settings, Callable[[], None], Callable[[], None]]]:
    """Settings whose database can be taken away and given back: PostgreSQL through a proxy that refuses every
    connection meanwhile, SQLite's file moved aside."""
    if database_url.startswith("sqlite"):
        path = sa.make_url(database_url).database
        assert path is not None
        aside = Path(path).with_name("aside.sqlite3")
        yield make_settings(), lambda: Path(path).rename(aside), lambda: aside.rename(path)
        return
    url = sa.make_url(database_url)
    with tcp_proxy(url.host or "127.0.0.1", url.port or 5432) as proxy:
        proxied = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
        yield make_settings(database_url=proxied, db_connect_timeout_seconds=1.0), proxy.cut, proxy.restore


async def _stream_holds(stream: Any, count: int) -> bool:
    try:
        return bool((await stream.stream_info(STREAM)).state.messages == count)
    except nats.js.errors.NotFoundError:
        return False


async def test_a_database_outage_is_said_every_minute_on_one_connection_to_nats(
    store: Store,
    broker: NatsServer,
    make_settings: Callable[..., Settings],
    make_client: Callable[[Settings], Client],
    database_url: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    connection, stream = await _jetstream(broker)
    connections = 0
    connect = nats.connect

    async def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal connections
        connections += 1
        return await connect(*args, **kwargs)

    monkeypatch.setattr(publisher_module.nats, "connect", counted)  # the publisher's connections to NATS, from now on
    caplog.set_level(logging.INFO, logger="petrecords.duties")

    def said(text: str) -> list[str]:
        return [
            record.getMessage()
            for record in caplog.records
            if f"publishing changes to NATS {text}" in record.getMessage()
        ]

    with _database_that_goes_away(make_settings, database_url) as (settings, away, back):
        outage_store = open_store(settings)
        publisher = _publisher(make_settings, broker, outage_store, "first", database_url=str(settings.database_url))
        publisher.RETRY_SECONDS = (0.05, 0.1)
        publisher.WARN_SECONDS = 2.0  # "every minute", shortened: the rule is the same at any length
        running = asyncio.create_task(publisher.run())
        try:
            await until(lambda: _stream_holds(stream, CHANGES), what="the changes published", seconds=10)
            away()
            await until(lambda: bool(said("paused")), what="a warning that publishing is paused", seconds=30)
            await asyncio.sleep(3.0)  # tens of attempts at the database, and a warning again after 2 s
            paused, again_meanwhile = said("paused"), said("again")
            back()
            await until(lambda: bool(said("again")), what="publishing again", seconds=10)
            async with make_client(make_settings()) as client:
                await create(client, ALICE, name="after")
            await until(lambda: _stream_holds(stream, CHANGES + 1), what="the new change published", seconds=10)
        finally:
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
            await outage_store.close()
            await connection.close()

    assert len(paused) == 2, paused
    assert not again_meanwhile, again_meanwhile
    assert all("the database is unavailable" in message for message in paused), paused
    assert len(said("again")) == 1
    assert connections == 1, f"{connections} connections to NATS"


async def test_the_stream_is_a_setting(
    store: Store, broker: NatsServer, make_settings: Callable[..., Settings]
) -> None:
    publisher = _publisher(make_settings, broker, store, "first", nats_stream="STAGING_PETRECORDS")
    running = asyncio.create_task(publisher.run())
    connection, stream = await _jetstream(broker)
    try:

        async def published() -> bool:
            try:
                info = await stream.stream_info("STAGING_PETRECORDS")
            except nats.js.errors.NotFoundError:
                return False
            return bool(info.state.messages == CHANGES)

        await until(published, what=f"{CHANGES} messages in the stream STAGING_PETRECORDS", seconds=10)
        names = await stream.streams_info()
        ids = await _message_ids(stream, "STAGING_PETRECORDS")
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await connection.close()

    assert [info.config.name for info in names] == ["STAGING_PETRECORDS"]
    assert len(set(ids)) == CHANGES
