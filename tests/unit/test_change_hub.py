"""What a live stream reads from its process's buffer of recent changes: exactly the changes after its cursor
that its caller may see, whichever owners the buffered changes had and however many the buffer let go."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from petrecords.changes import live as feed
from petrecords.changes.change import sees
from petrecords.changes.live import ChangeHub, event_stream_frame
from petrecords.store.base import Change, Cursor, Viewer
from petrecords.tables import SHARED

OWNERS = ("ann@example.com", "bob@example.com", "cy@example.com")
BUFFERED = 8
"""A buffer this small lets the oldest changes go within a few polls."""

owner_of = st.sampled_from((*OWNERS, SHARED, None))
polls = st.lists(st.lists(st.tuples(owner_of, owner_of, st.sampled_from(("pets", "vaccines"))), max_size=6))


def _viewer(reader: str | None) -> Viewer | None:
    """A caller of no group (None: an administrator)."""
    return None if reader is None else Viewer(email=reader, grantees=(reader,))


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


def _polled_for(
    reader: str | None, polled: list[list[tuple[str | None, str | None, str]]]
) -> tuple[ChangeHub, list[Change]]:
    """A hub with one stream of `reader`, after polls of every change (as while an administrator streams), and
    those changes."""
    hub = ChangeHub(lambda: None, keep_alive_seconds=10)
    hub._open_stream(_viewer(reader))
    hub._start_buffer((0, 0))
    everything: list[Change] = []
    for poll in polled:
        found = _changes(poll, len(everything) + 1)
        everything += found
        if found:
            hub._keep(found)
    return hub, everything


def _visible_after(
    changes: list[Change], cursor: Cursor, reader: str | None, resources: tuple[str, ...] | None
) -> list[Change]:
    """What a stream must send after `cursor`: the changes its caller may see, of the resources it asked for."""
    return [
        change
        for change in changes
        if change.cursor > cursor
        and sees(_viewer(reader), change)
        and (resources is None or change.resource in resources)
    ]


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
        hub, everything = _polled_for(reader, polled)
        # The index by owner lets go of what the buffer let go of: it holds the buffer, nothing more.
        indexed = {change.cursor for kept in hub._by_owner.values() for change in kept}
        assert indexed == {change.cursor for change in hub._buffer if feed._owners(change)}
        cursor = (0, max(0, len(everything) - behind))
        held_after = hub._held_after(_viewer(reader))
        assert held_after is not None
        if cursor < held_after:
            return  # a stream this far behind reads from the database, not from the buffer
        got, read_up_to = asyncio.run(hub._after(cursor, reader=_viewer(reader), resources=resources))
        # Every stream sends a change's event as the same bytes, kept only while the change is buffered.
        assert [hub.frame(change) for change in got] == [event_stream_frame(change) for change in got]
        hub._keep(_changes([(OWNERS[0], OWNERS[0], "pets")] * BUFFERED, len(everything) + 1))
        assert set(hub._frames) <= {change.cursor for change in hub._buffer}
    expected = _visible_after(everything, cursor, reader, resources)
    assert got == expected
    assert read_up_to == max(cursor, everything[-1].cursor if everything else cursor)


@given(poll=st.lists(st.tuples(owner_of, owner_of, st.just("pets")), min_size=1, max_size=4))
def test_a_poll_wakes_the_streams_that_may_see_its_changes_and_no_stranger(
    poll: list[tuple[str | None, str | None, str]],
) -> None:
    found = _changes(poll, 1)
    stranger = "nobody@example.com"

    async def woken() -> dict[str | None, bool]:
        hub = ChangeHub(lambda: None, keep_alive_seconds=0.05)
        hub._start_buffer((0, 0))
        readers: tuple[str | None, ...] = (*OWNERS, None, stranger)
        # Far off: only the poll may end a wait here. A deadline 50 ms away ended some waits on a busy machine
        # before the poll came, and the test took them for streams the poll had not woken.
        later = asyncio.get_running_loop().time() + 60
        waits = {reader: asyncio.create_task(hub._wait_for_more((0, 0), _viewer(reader), later)) for reader in readers}
        await asyncio.sleep(0)
        hub._keep(found)
        # A woken wait ends within the loop's next turns; one the poll did not wake is still waiting after them.
        for _ in range(5):
            await asyncio.sleep(0)
        ended = {reader: wait.done() and wait.result() for reader, wait in waits.items()}
        for wait in waits.values():
            wait.cancel()
        await asyncio.gather(*waits.values(), return_exceptions=True)
        return ended

    result = asyncio.run(woken())
    for reader, was_woken in result.items():
        if any(sees(_viewer(reader), change) for change in found):
            assert was_woken, reader
    if all(SHARED not in feed._owners(change) for change in found):
        assert not result[stranger]


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
        hub, everything = _polled_for(reader, polled)
        complete_after = hub._complete_after
        assert complete_after is not None
        cursor = (0, max(0, len(everything) - behind))
        got, read_up_to = asyncio.run(hub._after(cursor, reader=_viewer(reader), resources=resources))
    let_go = [change for change in everything if cursor < change.cursor <= complete_after]
    if any(sees(_viewer(reader), change) for change in let_go):
        assert (got, read_up_to) == ([], cursor)
    if reader is not None and not any({reader, SHARED} & feed._owners(change) for change in let_go):
        assert got == _visible_after(everything, cursor, reader, resources)
        assert read_up_to == max(cursor, everything[-1].cursor if everything else cursor)


def test_a_caller_whose_streams_closed_is_forgotten_and_starts_over_behind_the_buffer() -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(feed, "BUFFERED_CHANGES", BUFFERED)
        hub = ChangeHub(lambda: None, keep_alive_seconds=10)
        hub._start_buffer((0, 0))
        hub._keep(_changes([(OWNERS[0], OWNERS[0], "pets")] * (BUFFERED * 2), 1))
        hub._open_stream(_viewer(OWNERS[1]))
        hub._close_stream(_viewer(OWNERS[1]))
        assert OWNERS[1] not in hub._let_go
        # Opened again: the polls before read for others, so nothing before where they have got to is known.
        hub._open_stream(_viewer(OWNERS[1]))
        assert asyncio.run(hub._after((0, 1), reader=_viewer(OWNERS[1]), resources=None)) == ([], (0, 1))
        assert asyncio.run(hub._after((0, BUFFERED), reader=_viewer(OWNERS[1]), resources=None)) == ([], (0, BUFFERED))
        hub._keep(_changes([(OWNERS[1], OWNERS[1], "pets")], BUFFERED * 2 + 1))
        got, read_up_to = asyncio.run(hub._after((0, BUFFERED * 2), reader=_viewer(OWNERS[1]), resources=None))
        assert [change.cursor for change in got] == [(0, BUFFERED * 2 + 1)]
        assert read_up_to == (0, BUFFERED * 2 + 1)


def _seen_by_any(change: Change, readers: set[str]) -> bool:
    """What a filtered poll reads (`changes_seen_by`): shared records' changes, and those of the readers."""
    return change.owner_after == SHARED or change.owner_after in readers or change.owner_before in readers


# Each step: a poll of new changes, with the streams opened (+) and closed (-) before it, and those opened while
# it was under way (after it chose whom to read for, before its changes were kept).
steps = st.lists(
    st.tuples(
        st.lists(st.tuples(owner_of, owner_of, st.sampled_from(("pets", "vaccines"))), max_size=6),
        st.lists(st.tuples(st.sampled_from("+-"), st.sampled_from((*OWNERS, None))), max_size=3),
        st.lists(st.sampled_from((*OWNERS, None)), max_size=2),
    ),
    max_size=8,
)


@given(
    steps=steps,
    reader=st.sampled_from((*OWNERS, None)),
    resources=st.sampled_from((None, ("pets",))),
    behind=st.integers(min_value=0, max_value=30),
)
def test_polls_for_the_streaming_callers_leave_no_stream_short_of_what_it_may_see(
    steps: list[tuple[list[tuple[str | None, str | None, str]], list[tuple[str, str | None]], list[str | None]]],
    reader: str | None,
    resources: tuple[str, ...] | None,
    behind: int,
) -> None:
    """Polls read only what the callers streaming then may see (every change while an administrator streams),
    and callers come and go between and during polls: a stream reads from the buffer exactly the changes after
    its cursor that it may see, or, when the buffer may lack some, from the database (none here: it stays)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(feed, "BUFFERED_CHANGES", BUFFERED)
        hub = ChangeHub(lambda: None, keep_alive_seconds=10)
        streams: list[str | None] = []
        hub._start_buffer((0, 0))
        everything: list[Change] = []
        for new, opened_or_closed, opened_during in steps:
            for sign, caller in opened_or_closed:
                if sign == "+":
                    hub._open_stream(_viewer(caller))
                    streams.append(caller)
                elif caller in streams:
                    hub._close_stream(_viewer(caller))
                    streams.remove(caller)
            polled_for = None if hub._admin_streams else sorted(hub._streams_of)
            for caller in opened_during:
                hub._open_stream(_viewer(caller))
                streams.append(caller)
            logged = _changes(new, len(everything) + 1)
            everything += logged
            through = logged[-1].cursor if logged else hub._polled_through
            found = [c for c in logged if polled_for is None or _seen_by_any(c, set(polled_for))]
            hub._keep(found, through=through, polled_for=polled_for)
        if reader not in streams:
            hub._open_stream(_viewer(reader))  # the stream under test opens now; else it opened with one of the steps
        cursor = (0, max(0, len(everything) - behind))
        got, read_up_to = asyncio.run(hub._after(cursor, reader=_viewer(reader), resources=resources))
    expected = _visible_after(everything, cursor, reader, resources)
    if (got, read_up_to) != ([], cursor):  # from the buffer: all of it, up to where the polls have got to
        assert got == expected
        assert read_up_to == max(cursor, everything[-1].cursor if everything else cursor)
    held_after = hub._held_after(_viewer(reader))
    assert held_after is not None
    if cursor >= held_after and everything and cursor < everything[-1].cursor:
        assert read_up_to == everything[-1].cursor  # the buffer served it


def test_streams_opened_together_send_their_keep_alives_spread_within_the_interval() -> None:
    hub = ChangeHub(lambda: None, keep_alive_seconds=10)
    waits = [hub.keep_alive_interval() for _ in range(1000)]
    assert all(10 * feed.KEEP_ALIVE_SPREAD <= wait <= 10 for wait in waits)
    # Spread over the range, not bunched: each tenth of it holds some.
    assert {int((wait - 7.5) / 0.25) for wait in waits} >= set(range(10))


@given(st.floats(min_value=0, max_value=1e7), st.sampled_from([0.05, 2, 10, 15]))
def test_a_quiet_streams_comment_falls_due_on_the_grid_within_the_interval(now: float, seconds: float) -> None:
    hub = ChangeHub(lambda: None, keep_alive_seconds=seconds)
    tick = min(feed.KEEP_ALIVE_TICK, seconds / 4)
    due = hub.comment_due(now)
    assert now + seconds / 2 - 1e-6 <= due <= now + seconds + 1e-6
    assert abs(due / tick - round(due / tick)) < 1e-6


def test_streams_opened_together_send_their_comments_in_a_few_batches_spread_within_the_interval() -> None:
    hub = ChangeHub(lambda: None, keep_alive_seconds=10)
    dues = {hub.comment_due(1000.0) for _ in range(1000)}
    assert dues == {1007.0, 1008.0, 1009.0}


def test_letting_go_of_a_change_polled_for_someone_else_keeps_a_later_caller_behind_its_start() -> None:
    """A change of two callers' records, polled while only one of them streamed, is let go after the other began
    to stream: that caller's changes polled before it began are still not in the buffer."""
    ann, bob = OWNERS[0], OWNERS[1]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(feed, "BUFFERED_CHANGES", BUFFERED)
        hub = ChangeHub(lambda: None, keep_alive_seconds=10)
        hub._start_buffer((0, 0))
        hub._open_stream(_viewer(bob))
        transferred, anns_own = _changes([(ann, bob, "pets"), (ann, ann, "pets")], 1)
        hub._keep([transferred], through=anns_own.cursor, polled_for=[bob])
        hub._open_stream(_viewer(ann))
        hub._keep(_changes([(bob, bob, "pets")] * BUFFERED, 3), polled_for=[ann, bob])
        assert transferred not in hub._buffer
        # Behind where ann began: her own change of then is read from the database (none here: it stays).
        assert asyncio.run(hub._after(transferred.cursor, reader=_viewer(ann), resources=None)) == (
            [],
            transferred.cursor,
        )


def test_a_change_a_share_lets_a_group_see_reaches_and_wakes_its_members_streams_only() -> None:
    ann, group = OWNERS[0], "clinic-42"
    vet = Viewer(email="vet@clinic.example", grantees=("vet@clinic.example", group))
    stranger = Viewer(email="nobody@example.com", grantees=("nobody@example.com", "clinic-7"))
    shared = msgspec.structs.replace(_changes([(ann, ann, "pets")], 1)[0], seen_by=(group,))

    async def run() -> tuple[bool, bool, list[Change]]:
        hub = ChangeHub(lambda: None, keep_alive_seconds=0.05)
        hub._start_buffer((0, 0))
        hub._open_stream(vet)
        hub._open_stream(stranger)
        soon = asyncio.get_running_loop().time() + 0.05
        waits = [asyncio.create_task(hub._wait_for_more((0, 0), viewer, soon)) for viewer in (vet, stranger)]
        await asyncio.sleep(0)
        hub._keep([shared], polled_for=sorted(hub._streams_of))
        vet_woken, stranger_woken = await asyncio.gather(*waits)
        got, _ = await hub._after((0, 0), reader=vet, resources=None)
        assert await hub._after((0, 0), reader=stranger, resources=None) == ([], shared.cursor)
        return vet_woken, stranger_woken, got

    vet_woken, stranger_woken, got = asyncio.run(run())
    assert vet_woken
    assert not stranger_woken
    assert got == [shared]


def test_a_stream_waiting_for_a_first_poll_that_does_not_come_still_sends_its_keep_alives() -> None:
    async def run() -> list[Change | None]:
        # No store: the hub never polls (as with its database gone since the stream opened).
        hub = ChangeHub(lambda: None, keep_alive_seconds=0.2)
        stream = hub.follow((0, 0), reader=_viewer(OWNERS[0]), resources=None)
        try:
            return [await asyncio.wait_for(anext(stream), 1) for _ in range(2)]
        finally:
            await stream.aclose()
            await hub.close()

    assert asyncio.run(run()) == [None, None]


def test_streams_waiting_for_the_first_poll_end_when_the_hub_closes() -> None:
    async def run() -> list[Change | None]:
        hub = ChangeHub(lambda: None, keep_alive_seconds=60)
        sent = asyncio.ensure_future(_everything(hub.follow((0, 0), reader=_viewer(OWNERS[0]), resources=None)))
        await asyncio.sleep(0.05)
        await hub.close()
        return await asyncio.wait_for(sent, 1)

    assert asyncio.run(run()) == []


async def _everything(stream: AsyncIterator[Change | None]) -> list[Change | None]:
    return [change async for change in stream]


def test_wakes_that_bring_a_stream_nothing_do_not_put_off_its_comment() -> None:
    async def run() -> Change | None:
        hub = ChangeHub(lambda: None, keep_alive_seconds=0.3)
        hub._start_buffer((0, 0))
        stream = hub.follow((0, 0), reader=_viewer(OWNERS[0]), resources=("vaccines",))
        sent = asyncio.ensure_future(anext(stream))
        try:
            # A change of the caller's every 0.1 s, of a resource the stream did not ask for: each wakes it.
            for position in range(1, 30):
                await asyncio.sleep(0.1)
                if sent.done():
                    break
                hub._keep(_changes([(OWNERS[0], OWNERS[0], "pets")], position))
            assert sent.done(), "no comment in 3 s of wakes that brought nothing"
            return sent.result()
        finally:
            await stream.aclose()
            await hub.close()

    assert asyncio.run(run()) is None


def test_a_first_poll_that_comes_late_does_not_put_off_the_first_comment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(feed, "KEEP_ALIVE_SPREAD", 1.0)  # every wait the whole interval: 2 s

    async def run() -> float:
        hub = ChangeHub(lambda: None, keep_alive_seconds=2)
        loop = asyncio.get_running_loop()
        opened = loop.time()
        stream = hub.follow((0, 0), reader=_viewer(OWNERS[0]), resources=None)
        sent = asyncio.ensure_future(anext(stream))
        try:
            await asyncio.sleep(1.4)  # the comment is due on the grid of half-seconds: from 1.5 s to 2 s
            assert not sent.done()
            hub._start_buffer((0, 0))  # the first poll, late
            assert await asyncio.wait_for(sent, 5) is None
            return loop.time() - opened
        finally:
            await stream.aclose()
            await hub.close()

    # At the end of the interval that began at the open (2 s), not of one that began at the poll (3.6 s).
    assert asyncio.run(run()) < 2.8


def test_a_stream_opened_after_the_hub_closed_ends_at_once() -> None:
    async def run() -> list[Change | None]:
        hub = ChangeHub(lambda: None, keep_alive_seconds=60)
        await hub.close()
        return await asyncio.wait_for(_everything(hub.follow((0, 0), reader=_viewer(OWNERS[0]), resources=None)), 1)

    assert asyncio.run(run()) == []
