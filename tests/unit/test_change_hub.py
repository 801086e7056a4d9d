"""What a live stream reads from its process's buffer of recent changes: exactly the changes after its cursor
that its caller may see, whichever owners the buffered changes had and however many the buffer let go."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from petrecords.resources import feed
from petrecords.resources.feed import ChangeHub, event_stream_frame, sees
from petrecords.store.base import Change
from petrecords.tables import SHARED

OWNERS = ("ann@example.com", "bob@example.com", "cy@example.com")
BUFFERED = 8
"""A buffer this small lets the oldest changes go within a few polls."""

owner_of = st.sampled_from((*OWNERS, SHARED, None))
polls = st.lists(st.lists(st.tuples(owner_of, owner_of, st.sampled_from(("pets", "vaccines"))), max_size=6))


def _changes(owners: list[tuple[str | None, str | None, str]], first_position: int) -> list[Change]:
    return [
        Change(
            resource=resource,
            record_id=uuid.UUID(int=position),
            action="replaced",
            version=1,
            at=0,
            by=OWNERS[0],
            owner_before=before,
            owner_after=after,
            record=b"{}",
            cursor=(0, position),
        )
        for position, (before, after, resource) in enumerate(owners, start=first_position)
    ]


@settings(max_examples=300, deadline=None)
@given(
    polled=polls,
    reader=st.sampled_from((*OWNERS, None)),
    resources=st.sampled_from((None, ("pets",))),
    behind=st.integers(min_value=0, max_value=20),
)
def test_a_stream_reads_what_its_caller_may_see_after_its_cursor(
    polled: list[list[tuple[str | None, str | None, str]]],
    reader: str | None,
    resources: tuple[str, ...] | None,
    behind: int,
) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(feed, "BUFFERED_CHANGES", BUFFERED)
        hub = ChangeHub(lambda: None, keep_alive_seconds=10)
        hub._complete_after = (0, 0)
        everything: list[Change] = []
        for poll in polled:
            found = _changes(poll, len(everything) + 1)
            everything += found
            if found:
                hub._keep(found)
        # The index by owner lets go of what the buffer let go of: it holds the buffer, nothing more.
        indexed = {change.cursor for kept in hub._by_owner.values() for change in kept}
        assert indexed == {change.cursor for change in hub._buffer if feed._owners(change)}
        cursor = (0, max(0, len(everything) - behind))
        if cursor < hub._complete_after:
            return  # a stream this far behind reads from the database, not from the buffer
        got, read_up_to = asyncio.run(hub._after(cursor, reader=reader, resources=resources))
        # Every stream sends a change's event as the same bytes, kept only while the change is buffered.
        assert [hub.frame(change) for change in got] == [event_stream_frame(change) for change in got]
        hub._keep(_changes([(OWNERS[0], OWNERS[0], "pets")] * BUFFERED, len(everything) + 1))
        assert set(hub._frames) <= {change.cursor for change in hub._buffer}
    expected = [
        change
        for change in everything
        if change.cursor > cursor and sees(reader, change) and (resources is None or change.resource in resources)
    ]
    assert got == expected
    assert read_up_to == max(cursor, everything[-1].cursor if everything else cursor)


@settings(max_examples=200, deadline=None)
@given(poll=st.lists(st.tuples(owner_of, owner_of, st.just("pets")), min_size=1, max_size=4))
def test_a_poll_wakes_the_streams_that_may_see_its_changes_and_no_stranger(
    poll: list[tuple[str | None, str | None, str]],
) -> None:
    found = _changes(poll, 1)
    stranger = "nobody@example.com"

    async def woken() -> dict[str | None, bool]:
        hub = ChangeHub(lambda: None, keep_alive_seconds=0.05)
        hub._complete_after = (0, 0)
        readers: tuple[str | None, ...] = (*OWNERS, None, stranger)
        waits = [asyncio.create_task(hub._wait_for_more((0, 0), reader)) for reader in readers]
        await asyncio.sleep(0)
        hub._keep(found)
        return dict(zip(readers, await asyncio.gather(*waits), strict=True))

    result = asyncio.run(woken())
    for reader, was_woken in result.items():
        if any(sees(reader, change) for change in found):
            assert was_woken, reader
    if all(SHARED not in feed._owners(change) for change in found):
        assert not result[stranger]


@settings(max_examples=300, deadline=None)
@given(
    polled=polls,
    reader=st.sampled_from((*OWNERS, None)),
    resources=st.sampled_from((None, ("pets",))),
    behind=st.integers(min_value=0, max_value=40),
)
def test_a_stream_behind_the_buffer_reads_the_database_only_for_changes_let_go_that_it_may_see(
    polled: list[list[tuple[str | None, str | None, str]]],
    reader: str | None,
    resources: tuple[str, ...] | None,
    behind: int,
) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(feed, "BUFFERED_CHANGES", BUFFERED)
        # No database: a stream that reads from it here gets nothing and stays where it was.
        hub = ChangeHub(lambda: None, keep_alive_seconds=10)
        hub._open_stream(reader)
        hub._start_buffer((0, 0))
        everything: list[Change] = []
        for poll in polled:
            found = _changes(poll, len(everything) + 1)
            everything += found
            if found:
                hub._keep(found)
        complete_after = hub._complete_after
        assert complete_after is not None
        cursor = (0, max(0, len(everything) - behind))
        got, read_up_to = asyncio.run(hub._after(cursor, reader=reader, resources=resources))
    let_go = [change for change in everything if cursor < change.cursor <= complete_after]
    if any(sees(reader, change) for change in let_go):
        assert (got, read_up_to) == ([], cursor)
    if reader is not None and not any({reader, SHARED} & feed._owners(change) for change in let_go):
        assert got == [
            change
            for change in everything
            if change.cursor > cursor and sees(reader, change) and (resources is None or change.resource in resources)
        ]
        assert read_up_to == max(cursor, everything[-1].cursor if everything else cursor)


def test_a_caller_whose_streams_closed_is_forgotten_and_starts_over_behind_the_buffer() -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(feed, "BUFFERED_CHANGES", BUFFERED)
        hub = ChangeHub(lambda: None, keep_alive_seconds=10)
        hub._start_buffer((0, 0))
        hub._keep(_changes([(OWNERS[0], OWNERS[0], "pets")] * (BUFFERED * 2), 1))
        hub._open_stream(OWNERS[1])
        hub._close_stream(OWNERS[1])
        assert OWNERS[1] not in hub._let_go
        # Opened again after changes were let go: those before it are not known to be none of its own.
        hub._open_stream(OWNERS[1])
        got, read_up_to = asyncio.run(hub._after((0, 1), reader=OWNERS[1], resources=None))
        assert (got, read_up_to) == ([], (0, 1))
        got, read_up_to = asyncio.run(hub._after(hub._complete_after or (0, 0), reader=OWNERS[1], resources=None))
        assert got == []
        assert read_up_to == (0, BUFFERED * 2)


def test_streams_opened_together_send_their_keep_alives_spread_within_the_interval() -> None:
    hub = ChangeHub(lambda: None, keep_alive_seconds=10)
    waits = [hub.keep_alive_interval() for _ in range(1000)]
    assert all(10 * feed.KEEP_ALIVE_SPREAD <= wait <= 10 for wait in waits)
    # Spread over the range, not bunched: each tenth of it holds some.
    assert {int((wait - 7.5) / 0.25) for wait in waits} >= set(range(10))
