"""Turns for long reads (store/turns.py): so many at once, shared by the processes of one directory, let go by a
process that ends, and a bounded wait for one."""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest

from petrecords.errors import DatabaseUnavailable
from petrecords.store.faults import POOL, TIMEOUT
from petrecords.store.turns import LongReadTurns


async def test_no_more_than_the_limit_run_at_once_and_a_waiting_read_goes_when_one_is_given_back() -> None:
    turns = LongReadTurns(2, max_waiting=1)
    first, second = await turns.take(), await turns.take()
    assert turns.held == 2
    waiting = asyncio.ensure_future(turns.take())
    await asyncio.sleep(0.05)
    assert not waiting.done()
    first.give_back()
    first.give_back()  # once only: a second give back frees nothing more
    third = await asyncio.wait_for(waiting, 1)
    assert turns.held == 2
    second.give_back()
    third.give_back()
    assert turns.held == 0


async def test_processes_of_one_directory_share_the_turns(tmp_path: Path) -> None:
    # Two sets of turns on one directory, as two workers of one instance hold them.
    one, other = LongReadTurns(1, directory=tmp_path), LongReadTurns(1, directory=tmp_path, wait_seconds=0.1)
    held = await one.take()
    with pytest.raises(DatabaseUnavailable) as refused:
        await other.take()
    assert refused.value.cause == TIMEOUT
    held.give_back()
    (await other.take()).give_back()
    one.close()
    other.close()


def _take_and_give_back(directory: Path, *, wait_seconds: float) -> None:
    turns = LongReadTurns(1, directory=directory, wait_seconds=wait_seconds)
    try:
        asyncio.run(turns.take()).give_back()
    finally:
        turns.close()


def test_a_turn_of_a_process_that_ends_is_free_again(tmp_path: Path) -> None:
    holder = (
        "import asyncio, sys\n"
        "from pathlib import Path\n"
        "from petrecords.store.turns import LongReadTurns\n"
        "turns = LongReadTurns(1, directory=Path(sys.argv[1]))\n"
        "asyncio.run(turns.take())\n"
        "print('held', flush=True)\n"
        "sys.stdin.readline()\n"
    )
    command = [sys.executable, "-c", holder, str(tmp_path)]
    with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as child:
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "held"
            with pytest.raises(DatabaseUnavailable):
                _take_and_give_back(tmp_path, wait_seconds=0.1)
            child.kill()  # ended without giving anything back
            child.wait(10)
            _take_and_give_back(tmp_path, wait_seconds=5)
        finally:
            child.kill()


async def test_a_wait_past_its_bound_and_one_waiting_read_too_many_are_refused() -> None:
    turns = LongReadTurns(1, wait_seconds=0.2, max_waiting=1)
    held = await turns.take()
    waiting = asyncio.ensure_future(turns.take())
    await asyncio.sleep(0.01)
    with pytest.raises(DatabaseUnavailable) as refused:
        await turns.take()
    assert (refused.value.cause, refused.value.status) == (POOL, 503)
    with pytest.raises(DatabaseUnavailable) as timed_out:
        await waiting
    assert timed_out.value.cause == TIMEOUT
    assert "Retry-After" in timed_out.value.headers
    held.give_back()
    assert turns.held == 0


async def test_a_turn_given_back_rests_in_proportion_to_its_busy_time_before_the_next_long_read_takes_it() -> None:
    turns = LongReadTurns(1, share=0.5)
    turn = await turns.take()
    await asyncio.sleep(0.2)
    turn.give_back()
    given_back = time.monotonic()
    assert turns.held == 1  # resting: as long again as it was busy, at half a core
    await turns.take()
    waited = time.monotonic() - given_back
    assert 0.15 <= waited < 1, waited


async def test_a_turn_that_rested_enough_while_held_is_free_at_once() -> None:
    turns = LongReadTurns(1, share=0.5)
    turn = await turns.take()
    await asyncio.sleep(0.2)
    turn.rested = 1.0  # a count's rests between its slices: more than the whole time it was held
    turn.give_back()
    assert turns.held == 0


def test_the_rest_owed_is_in_proportion_and_at_most_half_of_what_a_read_waits_for_a_turn() -> None:
    assert LongReadTurns(1, share=0.25).rest_owed(held=1.0, rested=0.0) == pytest.approx(3.0)
    assert LongReadTurns(1, share=0.5).rest_owed(held=1.0, rested=0.4) == pytest.approx(0.2)
    assert LongReadTurns(1, share=1.0).rest_owed(held=1.0, rested=0.0) == 0
    assert LongReadTurns(1, share=1e-6, wait_seconds=2).rest_owed(held=1.0, rested=0.0) == 1


@pytest.mark.parametrize("share", [0, -0.5, 1.5, math.nan])
def test_a_share_outside_zero_to_one_is_refused(share: float) -> None:
    with pytest.raises(ValueError, match="share"):
        LongReadTurns(1, share=share)


async def test_a_turn_given_back_owing_no_rest_is_free_at_once() -> None:
    turns = LongReadTurns(1, share=0.01)
    turn = await turns.take()
    await asyncio.sleep(0.05)
    turn.give_back(rest=False)  # a replica answered its long read
    assert turns.held == 0


def test_a_turn_given_back_outside_an_event_loop_is_free_at_once() -> None:
    turns = LongReadTurns(1, share=0.1)
    turn = asyncio.run(turns.take())
    time.sleep(0.05)
    turn.give_back()
    assert turns.held == 0
