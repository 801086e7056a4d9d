"""The process a large SQLite reminders pass runs in (Reminders.remind): `python -m petrecords.reminders_apart`, its
order (ReminderOrder) as JSON on its standard input, what it did (ReminderReport) as JSON on its standard output.

It holds the database's reminders lock file for the pass, or writes nothing and says so where another process holds
it. SIGTERM or SIGINT (the serving process stopping, Ctrl-C) end the pass after its batch, and so does the end of the
process that started it (a worker killed with SIGKILL, which can tell no one): the lock file is then let go within a
batch and a second, for the next pass (of a server started again, or of another process serving the file) to write
the rest. Its log lines go to the standard error it shares with the process that started it, in the same JSON."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import sys
import threading

import msgspec

from petrecords.config import Settings
from petrecords.errors import DatabaseUnavailable
from petrecords.logs import configure_logging
from petrecords.store.faults import DATABASE_ERRORS


class ReminderOrder(msgspec.Struct, frozen=True):
    settings: dict[str, object]
    """The settings a pass reads (Reminders.settings_of_a_pass), by name."""
    tuning: dict[str, float]
    """The numbers that tune a pass, by attribute name (Reminders.TUNING, and REST's for SQLite)."""
    now: int | None
    """The moment the pass writes up to (epoch milliseconds); None: the clock's at each batch."""
    parent: int
    """The process id of the process that started this one, which the pass ends with."""


class ReminderReport(msgspec.Struct, frozen=True):
    written: int = 0
    held: bool = True
    """False: another process was writing the reminders, and this one wrote nothing."""
    unavailable: str | None = None
    """The database could not serve the pass (its cause): the duty tries again at its next round."""


PARENT_CHECK_SECONDS = 1.0
"""How often the process looks whether the process that started it is still there."""


def _end_with_parent(stop: threading.Event, parent: int) -> None:
    """Set `stop` once the process `parent` is no longer this one's: the kernel gives an orphan another parent. Looked
    at first at once, for a parent that ended while this process started."""
    while os.getppid() == parent:
        if stop.wait(PARENT_CHECK_SECONDS):
            return
    stop.set()


async def _run(order: ReminderOrder) -> ReminderReport:
    stop = threading.Event()
    threading.Thread(target=_end_with_parent, args=(stop, order.parent), name="parent-watch", daemon=True).start()
    from petrecords.reminders import Reminders

    settings = Settings(**order.settings)  # type: ignore[arg-type]
    # What the process has made so far (its modules, above all) lives as long as it does: kept out of the
    # collector's counts, which walked it again at each older generation's collection. The collector took 11 % of a
    # pass's CPU, 5 % with them frozen (bench/results/2026-12-06-burst-by-pet.md).
    gc.freeze()
    loop = asyncio.get_running_loop()
    for ending in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(ending, stop.set)
    reminders = Reminders(settings, lambda: None)
    for name, value in order.tuning.items():
        setattr(reminders, name, {"sqlite": value} if name == "REST" else type(getattr(Reminders, name))(value))
    try:
        written, held = await reminders.remind_alone(order.now, stop)
    except DatabaseUnavailable as exc:
        return ReminderReport(unavailable=exc.cause)
    except DATABASE_ERRORS as exc:
        return ReminderReport(unavailable=type(exc).__name__)
    finally:
        stop.set()  # the parent's watch ends with the pass
    return ReminderReport(written=written, held=held)


def main() -> None:
    order = msgspec.json.decode(sys.stdin.buffer.read(), type=ReminderOrder)
    configure_logging(str(order.settings.get("log_level", "INFO")))
    report = asyncio.run(_run(order))
    try:
        sys.stdout.buffer.write(msgspec.json.encode(report))
        sys.stdout.buffer.flush()
    except BrokenPipeError:
        # The process that started this one has ended: no one to tell. Standard output goes nowhere from here, so
        # that the flush at exit does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":
    main()
