"""`petrecords export` and `petrecords import`: every record of every resource and every kept change, as JSON Lines.

The file: a first line `{"format": "petrecords-export", "version": 1, "exportedAt": …}`; then each resource's
records (referenced resources first, each in id order), `{"resource": name, "record": {…}}`; then the links of
deleted certificates, `{"resource": "revoked-certificate-links", "record": {…}}` (see records.REVOKED_LINKS), in
id order; then every change
in the feed's order, `{"change": {…}}` without its cursor. Export streams from one snapshot, import streams into
one transaction: memory stays flat whatever the size.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import msgspec
import sqlalchemy as sa

from petrecords.certificates.resource import revoked_certificate_links
from petrecords.changes.publisher import Publisher
from petrecords.config import Settings, configured_lists
from petrecords.portability import databases
from petrecords.portability.databases import Batch, Snapshot, Target
from petrecords.portability.errors import CommandFailed
from petrecords.portability.progress import Meter
from petrecords.portability.records import (
    REVOKED_LINKS,
    REVOKED_LINKS_QUERY,
    ChangeBody,
    ExportReader,
    Malformed,
    change_row,
    counted,
    exported_change,
    exported_record,
    exported_revoked_link,
    record_id,
    revoked_link_row,
    timestamp_ms,
)
from petrecords.resources.declaration import Resource, ResourceSet
from petrecords.tables import changes
from petrecords.values import format_timestamp, now_ms

FORMAT = "petrecords-export"
FORMAT_VERSION = 1
BATCH_ROWS = 2000
"""Rows sent to the database at a time."""


def in_load_order(resources: ResourceSet) -> list[Resource]:
    """Referenced resources first (a record's references are in the file before it), then as registered."""
    return sorted(resources.resources, key=resources.rank)


# --- export ----------------------------------------------------------------------------------------


@dataclass
class Tally:
    """What a command wrote: records of each resource, and changes."""

    records: dict[str, int]
    changes: int = 0

    @classmethod
    def of(cls, resources: Sequence[Resource]) -> Tally:
        return cls({resource.name: 0 for resource in resources})

    def count(self, resource: Resource) -> None:
        self.records[resource.name] = self.records.get(resource.name, 0) + 1

    def summary(self) -> str:
        return f"{counted(self.records)} and {self.changes} changes"


async def _total(snapshot: Snapshot, resources: list[Resource]) -> int:
    return sum([await snapshot.count(resource.table) for resource in resources]) + await snapshot.count(changes)


async def export_to(settings: Settings, resources: ResourceSet, out: IO[bytes], *, show_progress: bool) -> Tally:
    """Write the export of the configured database to `out`."""
    ordered = in_load_order(resources)
    tally = Tally.of(ordered)
    encode = msgspec.json.Encoder().encode
    async with databases.snapshot(settings) as snapshot:
        header = {"format": FORMAT, "version": FORMAT_VERSION, "exportedAt": format_timestamp(now_ms())}
        out.write(encode(header) + b"\n")
        total = await _total(snapshot, ordered) if show_progress else None
        with Meter("export", total=total) as meter:
            for resource in ordered:
                statement, layout = databases.record_query(resource)
                async with contextlib.aclosing(snapshot.rows(statement)) as rows:
                    async for values in rows:
                        record = exported_record(resource, layout.row(values))
                        out.write(encode({"resource": resource.name, "record": record}) + b"\n")
                        tally.count(resource)
                        meter.advance(1)
            # A deleted certificate's link answers 410 after a move, as before it (the digests alone travel).
            async with contextlib.aclosing(snapshot.rows(REVOKED_LINKS_QUERY)) as rows:
                async for values in rows:
                    out.write(encode({"resource": REVOKED_LINKS, "record": exported_revoked_link(values)}) + b"\n")
            async with contextlib.aclosing(snapshot.rows(databases.CHANGES_QUERY)) as rows:
                async for values in rows:
                    out.write(encode({"change": exported_change(databases.CHANGES_LAYOUT.row(values))}) + b"\n")
                    tally.changes += 1
                    meter.advance(1)
    return tally


@contextlib.contextmanager
def output_file(path: Path | None) -> Iterator[IO[bytes]]:
    """Standard output, or a file that appears at `path` only once it is whole (a failed export leaves whatever
    was there before)."""
    if path is None:
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    directory = path.resolve().parent
    if not directory.is_dir():
        raise CommandFailed(f"--output {path}: no directory {directory}")
    handle, partial = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=directory)
    try:
        with os.fdopen(handle, "wb", buffering=1 << 20) as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)
        raise


# --- import ----------------------------------------------------------------------------------------


class Header(msgspec.Struct, forbid_unknown_fields=True):
    format: str
    version: int
    exportedAt: str


class Line(msgspec.Struct, forbid_unknown_fields=True):
    resource: str | None = None
    record: dict[str, Any] | None = None
    change: ChangeBody | None = None


_decode_header = msgspec.json.Decoder(Header).decode
_decode_line = msgspec.json.Decoder(Line).decode


@dataclass(frozen=True)
class Item:
    """One line of a file, read: a record of a resource, or a change."""

    line: int
    resource: Resource | None
    row: dict[str, Any]
    table: sa.Table | None = None
    """Where a line that is neither a record nor a change goes (a revoked link)."""


def _problem(exc: msgspec.ValidationError | msgspec.DecodeError | Malformed | UnicodeDecodeError) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text (byte {exc.start + 1} of the line, 0x{exc.object[exc.start]:02x}, {exc.reason})"
    text = str(exc)
    return text[0].lower() + text[1:] if text else "malformed"


class ExportFile:
    """The lines of an export file, read and checked one at a time (with how many bytes were read)."""

    def __init__(self, path: Path, reader: ExportReader) -> None:
        self.path = path
        self.reader = reader
        self.bytes_read = 0
        try:
            self.size = path.stat().st_size
        except OSError as exc:
            raise CommandFailed(f"{path}: {exc.strerror or exc}") from None

    def _lines(self) -> Iterator[tuple[int, bytes]]:
        try:
            handle = self.path.open("rb", buffering=1 << 20)
        except OSError as exc:
            raise CommandFailed(f"{self.path}: {exc.strerror or exc}") from None
        with handle:
            number = 0
            for number, text in enumerate(handle, start=1):
                self.bytes_read += len(text)
                if not text.endswith(b"\n"):
                    raise CommandFailed(f"{self.path}: line {number} is cut off (the file ends within it)")
                yield number, text
            if number == 0:
                raise CommandFailed(f"{self.path}: the file is empty, not an export")

    def items(self, *, rows: bool = True) -> Iterator[Item]:
        """Every record and change after the format line; without `rows`, records with their id alone."""
        lines = self._lines()
        for number, text in lines:
            self._header(number, text)
            break
        for number, text in lines:
            try:
                yield self._item(number, text, rows=rows)
            except (msgspec.ValidationError, msgspec.DecodeError, Malformed, UnicodeDecodeError) as exc:
                raise CommandFailed(f"{self.path}: line {number}: {_problem(exc)}") from None

    def _header(self, number: int, text: bytes) -> None:
        try:
            header = _decode_header(text)
            timestamp_ms("exportedAt", header.exportedAt)
        except (msgspec.ValidationError, msgspec.DecodeError, Malformed, UnicodeDecodeError) as exc:
            raise CommandFailed(
                f"{self.path}: line {number}: not the format line of a petrecords export ({_problem(exc)})"
            ) from None
        if header.format != FORMAT:
            raise CommandFailed(f"{self.path}: line {number}: format is {header.format!r}, not {FORMAT!r}")
        if header.version != FORMAT_VERSION:
            raise CommandFailed(
                f"{self.path}: line {number}: format version {header.version}; this petrecords reads version "
                f"{FORMAT_VERSION}"
            )

    def _item(self, number: int, text: bytes, *, rows: bool) -> Item:
        line = _decode_line(text)
        if line.change is not None:
            if line.resource is not None or line.record is not None:
                raise Malformed("a change line holds `change` and nothing else")
            return Item(number, None, change_row(self.reader, line.change))
        if line.resource is None or line.record is None:
            raise Malformed('a line must be {"resource": …, "record": …} or {"change": …}')
        if line.resource == REVOKED_LINKS:
            return Item(number, None, revoked_link_row(line.record), table=revoked_certificate_links)
        resource = self.reader.resource(line.resource)
        if not rows:
            return Item(number, resource, {"id": record_id("id", line.record.get("id"))})
        return Item(number, resource, self.reader.row(resource, line.record))


async def _first_held(target: Target, items: Iterator[Item]) -> Item | None:
    """The first record of the file that the database holds."""
    pending: dict[str, list[Item]] = {}

    async def look(found_in: list[Item]) -> Item | None:
        resource = found_in[0].resource
        assert resource is not None  # noqa: S101 - records only
        held = await target.held(resource.table, [item.row["id"] for item in found_in])
        return next((item for item in found_in if item.row["id"] in held), None)

    first: Item | None = None
    for item in items:
        if item.resource is None:
            continue
        batch = pending.setdefault(item.resource.name, [])
        batch.append(item)
        if len(batch) >= BATCH_ROWS:
            found = await look(batch)
            batch.clear()
            if found is not None and (first is None or found.line < first.line):
                first = found
            if first is not None and all(not waiting or waiting[0].line > first.line for waiting in pending.values()):
                return first
    for batch in pending.values():
        if batch:
            found = await look(batch)
            if found is not None and (first is None or found.line < first.line):
                first = found
    return first


async def _load(
    target: Target, items: Iterator[Item], meter: Meter, progress: Callable[[], int], tally: Tally
) -> Tally:
    xid = await target.change_xid()
    batch: Batch | None = None
    for item in items:
        table = item.table if item.table is not None else changes if item.resource is None else item.resource.table
        if batch is not None and (batch.table is not table or len(batch.rows) >= BATCH_ROWS):
            await target.insert(batch)
            meter.advance(len(batch.rows), progress())
            batch = None
        if batch is None:
            batch = Batch(table, [], [])
        row = item.row
        if item.resource is not None:
            tally.count(item.resource)
        elif item.table is None:
            row["xid"] = xid
            tally.changes += 1
        batch.rows.append(row)
        batch.lines.append(item.line)
    if batch is not None:
        await target.insert(batch)
        meter.advance(len(batch.rows), progress())
    return tally


async def import_from(settings: Settings, resources: ResourceSet, path: Path, *, show_progress: bool) -> Tally:
    """Load an export file into the configured database, which must hold no record: all of it, or nothing."""
    reader = ExportReader(resources, configured_lists(settings))
    source = ExportFile(path, reader)
    ordered = in_load_order(resources)
    tables = [*(resource.table for resource in ordered), revoked_certificate_links]
    async with databases.target(settings) as target:
        await target.begin([*tables, *databases.LOG_TABLES])
        holding = await target.nonempty([*tables, *databases.LOG_TABLES])
        if holding:
            first = await _first_held(target, source.items(rows=False))
            if first is not None and first.resource is not None:
                raise CommandFailed(
                    f"{path}: line {first.line}: {first.resource.name} {first.row['id']} is in the database already; "
                    "import loads only into a database with no records: nothing was imported"
                )
            raise CommandFailed(
                f"the database holds records already ({', '.join(holding)}); import loads only into a database "
                "with no records: nothing was imported"
            )
        with Meter("import", total=source.size if show_progress else None) as meter:
            tally = await _load(target, source.items(), meter, lambda: source.bytes_read, Tally.of(ordered))
        for resource in ordered:
            await _check_owners(target, source, resource)
        await target.finish(ordered, published_state=Publisher.LEASE, kept=resources.kept)
    return tally


async def _check_owners(target: Target, source: ExportFile, resource: Resource) -> None:
    """A record's owner that follows another record's (a vaccination's is its pet's) is derived, not read: a file
    where they differ is refused (it is no export of this service, whose records always agree), naming the line."""
    query = databases.disowned_query(resource)
    if query is None:
        return
    found = await target.fetch(query)
    if not found:
        return
    columns = query.selected_columns
    record_id, owner, followed_id, followed_owner = (
        databases.typed(column.type, value) for column, value in zip(columns, found[0], strict=True)
    )
    line = next(
        item.line for item in source.items(rows=False) if item.resource is resource and item.row["id"] == record_id
    )
    field, through = resource.ownership.field, resource.ownership.through
    raise CommandFailed(
        f"{source.path}: line {line}: {field} is {owner}, but its {through} {followed_id} is {followed_owner}'s: a "
        f"{resource.title}'s {field} is always that of its {through}'s record; nothing was imported"
    )
