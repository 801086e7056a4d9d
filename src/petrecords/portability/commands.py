"""The data commands as the command line runs them: each applies pending migrations to its database first (as
`serve` does), then does its work; any failure is one CommandFailed line, with the target left as it was. Those
that write a database or a backup return their line of result: what was done, with counts."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import pysqlite3.dbapi2 as sqlite3

from petrecords.config import Settings
from petrecords.db import migrate
from petrecords.portability import backup as backups
from petrecords.portability import transfer, whoof
from petrecords.portability.errors import CommandFailed
from petrecords.registry import RESOURCES

T = TypeVar("T")


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@contextlib.contextmanager
def _failures(what: str) -> Iterator[None]:
    """A database or file error, as the command's one line."""
    try:
        yield
    except (sqlite3.Error, asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError) as exc:
        raise CommandFailed(f"{what}: {_one_line(exc)}") from None


def _run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


def _progress_wanted() -> bool:
    return sys.stderr.isatty()


def export(settings: Settings, *, output: Path | None) -> None:
    migrate(settings)
    with _failures("export"), transfer.output_file(output) as out:
        _run(transfer.export_to(settings, RESOURCES, out, show_progress=_progress_wanted()))


def import_file(settings: Settings, path: Path) -> str:
    migrate(settings)
    with _failures("import"):
        tally = _run(transfer.import_from(settings, RESOURCES, path, show_progress=_progress_wanted()))
    return f"imported {path}: {tally.summary()}"


def import_whoof(
    settings: Settings, url: str, *, system_user: str, orphan_owner: str | None, keep_mismatched: bool = False
) -> whoof.Report:
    options = whoof.Options.checked(system_user=system_user, orphan_owner=orphan_owner, keep_mismatched=keep_mismatched)
    migrate(settings)
    with _failures("import-whoof"):
        return _run(whoof.import_whoof(settings, RESOURCES, url, options, show_progress=_progress_wanted()))


def backup(settings: Settings, path: Path) -> str:
    backups.refuse_postgres(settings, "backup")
    migrate(settings)
    with _failures("backup"):
        return backups.backup(settings, RESOURCES, path, show_progress=_progress_wanted())


def restore(settings: Settings, path: Path) -> str:
    backups.refuse_postgres(settings, "restore")
    with _failures("restore"):
        return backups.restore(settings, RESOURCES, path, show_progress=_progress_wanted())
