"""How many live streams a caller holds in an instance whose workers share a directory: each worker's count in a
file of its own, read by the others, forgotten with a worker that died."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from petrecords.changes.streams import Slot, StreamSlots
from petrecords.errors import RateLimited

CALLER = "ann@example.com"


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _folder(directory: Path) -> Path:
    (folder,) = [path for path in directory.iterdir() if path.is_dir()]
    return folder


def test_a_caller_holds_at_most_the_limit_counted_over_the_live_workers(tmp_path: Path) -> None:
    slots = StreamSlots(5, directory=tmp_path, retry_after_seconds=7)
    first = slots.take(CALLER)
    folder = _folder(tmp_path)
    # Another live worker holds three of the caller's streams, a dead one held forty.
    (folder / f"{os.getppid()}.streams").write_text("3")
    dead = folder / f"{_dead_pid()}.streams"
    dead.write_text("40")
    second = slots.take(CALLER)
    assert not dead.exists()
    with pytest.raises(RateLimited):
        slots.take(CALLER)
    assert (folder / f"{os.getpid()}.streams").read_text() == "2"
    # Someone else's streams are counted apart.
    slots.take("bob@example.com").give_back()
    second.give_back()
    third = slots.take(CALLER)
    first.give_back()
    third.give_back()
    third.give_back()  # given back once, however often asked
    assert not (folder / f"{os.getpid()}.streams").exists()
    assert [path.name for path in folder.iterdir() if path.suffix == ".streams"] == [f"{os.getppid()}.streams"]


def test_a_thousand_streams_of_one_caller_keep_one_file_per_worker(tmp_path: Path) -> None:
    slots = StreamSlots(1000, directory=tmp_path, retry_after_seconds=7)
    held = [slots.take(CALLER) for _ in range(1000)]
    folder = _folder(tmp_path)
    assert sorted(path.name for path in folder.iterdir()) == [".lock", f"{os.getpid()}.streams"]
    assert (folder / f"{os.getpid()}.streams").read_text() == "1000"
    with pytest.raises(RateLimited):
        slots.take(CALLER)
    for slot in held:
        slot.give_back()
    assert sorted(path.name for path in folder.iterdir()) == [".lock"]


def test_an_app_alone_counts_its_own(tmp_path: Path) -> None:
    slots = StreamSlots(2, directory=None, retry_after_seconds=7)
    held = [slots.take(CALLER), slots.take(CALLER)]
    with pytest.raises(RateLimited):
        slots.take(CALLER)
    held[0].give_back()
    slots.take(CALLER)
    assert not list(tmp_path.iterdir())


def test_a_slot_the_collector_gives_back_while_its_folder_is_locked_is_counted_and_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slots = StreamSlots(5, directory=tmp_path, retry_after_seconds=7)
    dropped = slots.take(CALLER)
    count_others = StreamSlots._held_by_others

    def collected_meanwhile(folder: Path) -> int:
        dropped.give_back()  # as the collector finalizing a slot dropped unread, at an allocation within take()
        return count_others(folder)

    monkeypatch.setattr(StreamSlots, "_held_by_others", staticmethod(collected_meanwhile))
    taken: list[Slot] = []
    # In a thread of its own: a second lock of the folder would wait for the first for good.
    taking = threading.Thread(target=lambda: taken.append(slots.take(CALLER)), daemon=True)
    taking.start()
    taking.join(10)
    assert taken, "taking a slot waited for the lock it held"
    assert (_folder(tmp_path) / f"{os.getpid()}.streams").read_text() == "1"
    taken[0].give_back()
    assert not (_folder(tmp_path) / f"{os.getpid()}.streams").exists()


def test_a_slot_of_another_caller_given_back_while_a_folder_is_locked_waits_for_no_second_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slots = StreamSlots(5, directory=tmp_path, retry_after_seconds=7)
    dropped = slots.take("bob@example.com")
    bobs_folder = _folder(tmp_path)
    count_others = StreamSlots._held_by_others
    collected = threading.Event()

    def collected_meanwhile(folder: Path) -> int:
        if not collected.is_set():
            collected.set()
            dropped.give_back()  # as the collector, at an allocation within the take of Ann's slot
        return count_others(folder)

    monkeypatch.setattr(StreamSlots, "_held_by_others", staticmethod(collected_meanwhile))
    # Another worker holds Bob's folder, and would wait for Ann's: holding Ann's while waiting for Bob's would
    # leave both waiting for good.
    with (bobs_folder / ".lock").open("a") as bobs_lock:
        fcntl.flock(bobs_lock, fcntl.LOCK_EX)
        taken: list[Slot] = []
        taking = threading.Thread(target=lambda: taken.append(slots.take(CALLER)), daemon=True)
        taking.start()
        assert collected.wait(10)
        annes_folder = next(path for path in tmp_path.iterdir() if path != bobs_folder)
        with (annes_folder / ".lock").open("a") as annes_lock:
            deadline = time.monotonic() + 10
            while True:
                try:
                    fcntl.flock(annes_lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    assert time.monotonic() < deadline, "Ann's folder stayed locked while waiting for Bob's"
                    time.sleep(0.01)
    taking.join(10)
    assert taken
    assert not (bobs_folder / f"{os.getpid()}.streams").exists()
    assert (annes_folder / f"{os.getpid()}.streams").read_text() == "1"


def test_a_lock_let_go_on_another_thread_leaves_the_one_held_here_counted_as_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slots = StreamSlots(5, directory=tmp_path, retry_after_seconds=7)
    bobs = slots.take("bob@example.com")
    anns = slots.take(CALLER)
    keep_count, count_others = StreamSlots._keep_count, StreamSlots._held_by_others
    writing_bobs, holding_anns = threading.Event(), threading.Event()

    def kept_when_told(folder: Path, held: int) -> None:
        if threading.current_thread() is elsewhere:
            writing_bobs.set()
            holding_anns.wait(10)
        keep_count(folder, held)

    def collected_meanwhile(folder: Path) -> int:
        if not holding_anns.is_set():
            holding_anns.set()
            elsewhere.join(10)  # Bob's count written and his folder let go, on the other thread
            anns.give_back()  # the collector, on this thread, which holds Ann's folder
        return count_others(folder)

    monkeypatch.setattr(StreamSlots, "_keep_count", staticmethod(kept_when_told))
    monkeypatch.setattr(StreamSlots, "_held_by_others", staticmethod(collected_meanwhile))
    # The collector gives Bob's slot back on a thread of the database's, which holds his folder meanwhile.
    elsewhere = threading.Thread(target=bobs.give_back, daemon=True)
    elsewhere.start()
    assert writing_bobs.wait(10)
    taken: list[Slot] = []
    taking = threading.Thread(target=lambda: taken.append(slots.take(CALLER)), daemon=True)
    taking.start()
    taking.join(10)
    assert taken, "taking a slot waited for the lock it held"
    assert [path.read_text() for path in tmp_path.glob("*/*.streams")] == ["1"]  # Ann's one slot; Bob's none


def test_a_worker_forgets_the_count_left_by_a_dead_process_whose_id_it_now_has(tmp_path: Path) -> None:
    StreamSlots(5, directory=tmp_path, retry_after_seconds=7).take(CALLER)
    folder = _folder(tmp_path)
    (folder / f"{os.getpid()}.streams").write_text("5")
    slots = StreamSlots(5, directory=tmp_path, retry_after_seconds=7)
    assert not (folder / f"{os.getpid()}.streams").exists()
    held = slots.take(CALLER)
    assert (folder / f"{os.getpid()}.streams").read_text() == "1"
    held.give_back()
