"""`petrecords import-whoof`: the pets, vaccines and pet vaccinations of a Whoof service's database, in the tables
Whoof's EF Core migrations create ("Pets", "Vaccines", "PetVaccinations"; its audit users and pet owners come
with its second migration, PetOwnership), loaded into an empty database as this service would have written them.

Each record keeps its Whoof id and audit fields (timestamps truncated to the millisecond) and gets one `created`
change, version 1, at its modifiedAt by its modifiedBy. Whoof's rules are looser than this contract's: a row
that breaks one is reported on a line of its own (the table, the Whoof id, what is wrong, what was done) and is
loaded corrected or skipped, as contract section 13 says. The records go through the same loader as an export
file, in one transaction.

This module maps Whoof's tables to this service's resources, so it names both; the loading is generic.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from petrecords.changes.publisher import Publisher
from petrecords.config import Settings, configured_lists
from petrecords.portability import databases
from petrecords.portability.databases import Batch
from petrecords.portability.errors import CommandFailed
from petrecords.portability.progress import Meter
from petrecords.portability.records import VERSION, ExportReader, Malformed, counted, owner_of
from petrecords.portability.transfer import BATCH_ROWS, in_load_order
from petrecords.resources.declaration import Resource, ResourceSet
from petrecords.resources.fields import DAY_MS, LATEST_MS
from petrecords.resources.wire import show
from petrecords.store.base import Row
from petrecords.tables import changes
from petrecords.text import WHITE_SPACE, clean_name, clean_prose
from petrecords.values import format_timestamp, normalize_email, now_ms

PETS, VACCINES, VACCINATIONS = "pets", "vaccines", "pet-vaccination"
WHOOF_PET_TYPES = {1: "Dog", 2: "Cat", 3: "Capybara", 4: "Other"}
"""Whoof's PetType enum (Whoof.Domain/Enums/PetType.cs): its columns hold the names; the numbers are read too."""
EARLIEST_MS = -2_208_988_800_000  # 1900-01-01T00:00:00Z
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MILLISECOND = dt.timedelta(milliseconds=1)


@dataclass(frozen=True)
class Options:
    system_user: str
    orphan_owner: str | None
    keep_mismatched: bool = False
    """Load a vaccination of a vaccine for another pet type, with a note in its notes, instead of skipping it."""

    @classmethod
    def checked(cls, *, system_user: str, orphan_owner: str | None, keep_mismatched: bool = False) -> Options:
        user = normalize_email(system_user)
        if user is None:
            raise CommandFailed(f"--system-user {system_user}: not an e-mail address")
        owner = None if orphan_owner is None else normalize_email(orphan_owner)
        if orphan_owner is not None and owner is None:
            raise CommandFailed(f"--orphan-owner {orphan_owner}: not an e-mail address")
        return cls(user, owner, keep_mismatched)


@dataclass
class Report:
    lines: list[str] = field(default_factory=list)
    loaded: dict[str, int] = field(default_factory=dict)
    skipped: int = 0
    corrected: int = 0
    kept: int = 0
    """Rows loaded as they are, though they break a rule (reported, and noted where the record has notes)."""

    def summary(self) -> str:
        return (
            f"loaded {counted(self.loaded)}; skipped {self.skipped} rows; corrected {self.corrected} rows; "
            f"kept {self.kept} rows as they are"
        )


class Skip(Exception):
    """The row cannot be loaded: why."""


class Finding:
    """One Whoof row being mapped: what was wrong with it and what was done, for its report line."""

    def __init__(self, table: str, whoof_id: Any) -> None:
        self.table = table
        self.whoof_id = whoof_id
        self.problems: list[str] = []
        self.kept: list[str] = []
        """What is wrong but loaded as it is."""

    def corrected(self, problem: str) -> None:
        self.problems.append(problem)

    def keep(self, problem: str) -> None:
        self.kept.append(problem)

    def line(self, outcome: str) -> str:
        return f"{self.table} {self.whoof_id}: {'; '.join([*self.problems, *self.kept])} -> {outcome}"

    @property
    def outcome(self) -> str | None:
        """What was done with a row that loads: None when nothing in it was wrong."""
        if self.problems:
            return "loaded corrected"
        return "loaded as it is" if self.kept else None


def _ms(value: dt.datetime) -> int:
    """A Whoof timestamp (microseconds) truncated to the millisecond."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return (value - _EPOCH) // _MILLISECOND


def _shown(value: Any) -> str:
    return msgspec.json.encode(value).decode() if value is None or isinstance(value, str) else repr(value)


class Mapper:
    def __init__(self, resources: ResourceSet, settings: Settings, options: Options) -> None:
        self.by_name = {resource.name: resource for resource in resources.resources}
        self.options = options
        self.pet_types = {pet_type.casefold(): pet_type for pet_type in settings.pet_types}
        self.now = now_ms()

    def user(self, row: Finding, member: str, value: Any) -> str:
        if isinstance(value, str) and (email := normalize_email(value.strip(WHITE_SPACE))) is not None:
            if email != value:
                row.corrected(f"{member}: {_shown(value)} is not in lower case (loaded as {email})")
            return email
        row.corrected(f"{member}: {_shown(value)} is not an e-mail address (loaded as {self.options.system_user})")
        return self.options.system_user

    def owner(self, row: Finding, value: Any) -> str:
        if isinstance(value, str) and (email := normalize_email(value.strip(WHITE_SPACE))) is not None:
            if email != value:
                row.corrected(f"ownerId {_shown(value)} is not in lower case (loaded as {email})")
            return email
        missing = value is None or not str(value).strip(WHITE_SPACE)
        wrong = "the pet has no owner" if missing else f"ownerId {_shown(value)} is not an e-mail address"
        if self.options.orphan_owner is None:
            raise Skip(f"{wrong} (--orphan-owner names one)")
        row.corrected(f"{wrong} (loaded with --orphan-owner {self.options.orphan_owner})")
        return self.options.orphan_owner

    def name(self, row: Finding, value: Any) -> str:
        if not isinstance(value, str) or not value.strip(WHITE_SPACE):
            raise Skip(f"name {_shown(value)} is empty")
        name, problem = clean_name(value, max_length=100)
        if name is None:
            raise Skip(f"name {_shown(value)[:60]} {problem}")
        if name != value:
            row.corrected(f"name {_shown(value)} is not trimmed (loaded as {_shown(name)})")
        return name

    def description(self, row: Finding, value: Any) -> str | None:
        if value is None:
            return None
        text, problem = clean_prose(value, max_length=1000)
        if problem is not None:
            raise Skip(f"description {_shown(value)[:60]} {problem}")
        if text is None:
            row.corrected(f"description {_shown(value)} is blank (loaded as null)")
        elif text != value:
            row.corrected(f"description {_shown(value)[:60]} is not trimmed (loaded trimmed)")
        return text

    def pet_type(self, value: Any) -> str:
        text = str(value).strip()
        if text.isdigit() and int(text) in WHOOF_PET_TYPES:
            text = WHOOF_PET_TYPES[int(text)]
        found = self.pet_types.get(text.casefold())
        if found is None:
            raise Skip(f"petType {_shown(value)} is none of the configured pet types")
        return found

    def audit(self, row: Finding, source: Any) -> dict[str, Any]:
        created_by, modified_by = _has(source, "CreatedBy"), _has(source, "ModifiedBy")
        if created_by == modified_by:
            created_by = modified_by = self.user(row, "createdBy and modifiedBy", created_by)
        else:
            created_by = self.user(row, "createdBy", created_by)
            modified_by = self.user(row, "modifiedBy", modified_by)
        times = {
            member: _ms(source[column]) for member, column in (("createdAt", "CreatedAt"), ("modifiedAt", "ModifiedAt"))
        }
        for member, moment in times.items():
            if moment < EARLIEST_MS:
                # .NET's default (0001-01-01) where Whoof never set the time: the audit fields are kept, as they are.
                row.keep(f"{member} {format_timestamp(moment)} is before 1900 (.NET's default for a time never set)")
        return {
            "id": str(source["Id"]),
            "createdAt": format_timestamp(times["createdAt"]),
            "createdBy": created_by,
            "modifiedAt": format_timestamp(times["modifiedAt"]),
            "modifiedBy": modified_by,
            VERSION: 1,
        }


def with_note(notes: str | None, note: str) -> str:
    """Notes with a note appended, after a blank line."""
    return note if not notes else f"{notes}\n\n{note}"


def _has(record: Any, name: str) -> Any:
    return record.get(name) if name in record else None


class WhoofSource:
    """The Whoof database, read one table at a time in id order."""

    def __init__(self, connection: Any) -> None:
        self._connection = connection

    async def check(self) -> None:
        found = {
            row[0]
            for row in await self._connection.fetch(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
            )
        }
        missing = [name for name in ("Pets", "Vaccines", "PetVaccinations") if name not in found]
        if missing:
            raise CommandFailed(f"not a Whoof database: it has no table {', '.join(missing)}")

    async def rows(self, table: str) -> list[Any]:
        return list(await self._connection.fetch(f'SELECT * FROM "{table}" ORDER BY "Id"'))  # noqa: S608 - constants


async def import_whoof(
    settings: Settings, resources: ResourceSet, url: str, options: Options, *, show_progress: bool
) -> Report:
    mapper = Mapper(resources, settings, options)
    reader = ExportReader(resources, configured_lists(settings), now_ms=mapper.now)
    report = Report()
    try:
        connection = await databases.connect_postgres(settings, url)
    except ValueError:
        raise CommandFailed("POSTGRESQL_URL must be a postgresql:// URL of the Whoof database") from None
    except OSError as exc:
        raise CommandFailed(f"cannot reach the Whoof database: {exc}") from None
    try:
        source = WhoofSource(connection)
        await source.check()
        vaccines_in, pets_in, vaccinations_in = (
            await source.rows("Vaccines"),
            await source.rows("Pets"),
            await source.rows("PetVaccinations"),
        )
    finally:
        await connection.close()
    loaded: dict[str, list[Row]] = {PETS: [], VACCINES: [], VACCINATIONS: []}
    vaccines: dict[uuid.UUID, Row] = {}
    pets: dict[uuid.UUID, Row] = {}

    def take(resource: str, table: str, source_row: Any, build: Any) -> Row | None:
        row = Finding(table, source_row["Id"])
        try:
            record = build(row, source_row)
            stored = reader.row(mapper.by_name[resource], record)
        except Skip as exc:
            row.problems.append(str(exc))
            report.lines.append(row.line("skipped"))
            report.skipped += 1
            return None
        except Malformed as exc:
            row.problems.append(str(exc))
            report.lines.append(row.line("skipped"))
            report.skipped += 1
            return None
        outcome = row.outcome
        if outcome is not None:
            report.lines.append(row.line(outcome))
            if row.problems:
                report.corrected += 1
            else:
                report.kept += 1
        loaded[resource].append(stored)
        return stored

    def vaccine(row: Finding, source_row: Any) -> dict[str, Any]:
        duration = source_row["Duration"]
        if not isinstance(duration, int) or not 1 <= duration <= 36500:
            raise Skip(f"duration {duration!r} is not a whole number of days from 1 to 36500")
        return {
            **mapper.audit(row, source_row),
            "name": mapper.name(row, source_row["Name"]),
            "description": mapper.description(row, source_row["Description"]),
            "petType": mapper.pet_type(source_row["PetType"]),
            "duration": duration,
        }

    def pet(row: Finding, source_row: Any) -> dict[str, Any]:
        return {
            **mapper.audit(row, source_row),
            "ownerId": mapper.owner(row, _has(source_row, "OwnerId")),
            "name": mapper.name(row, source_row["Name"]),
            "petType": mapper.pet_type(source_row["PetType"]),
        }

    def vaccination(row: Finding, source_row: Any) -> dict[str, Any]:
        the_pet, the_vaccine = pets.get(source_row["PetId"]), vaccines.get(source_row["VaccineId"])
        if the_pet is None:
            raise Skip(f"its pet {source_row['PetId']} was not loaded")
        if the_vaccine is None:
            raise Skip(f"its vaccine {source_row['VaccineId']} was not loaded")
        notes = None
        if the_vaccine["pet_type"] != the_pet["pet_type"]:
            mismatch = (
                f"its vaccine {source_row['VaccineId']} is for {the_vaccine['pet_type']}, its pet "
                f"{source_row['PetId']} is a {the_pet['pet_type']}"
            )
            if not mapper.options.keep_mismatched:
                raise Skip(f"{mismatch} (--keep-mismatched loads it)")
            row.keep(f"{mismatch} (kept by --keep-mismatched, with a note in its notes)")
            notes = with_note(
                None,
                f"Moved in from Whoof as it was recorded there: its vaccine, {the_vaccine['name']}, is for "
                f"{the_vaccine['pet_type']}, and this pet is a {the_pet['pet_type']}.",
            )
        applied = _ms(source_row["AppliedAt"])
        if applied > mapper.now:
            raise Skip(f"appliedAt {format_timestamp(applied)} is in the future")
        if applied < EARLIEST_MS:
            raise Skip(f"appliedAt {format_timestamp(applied)} is before 1900")
        due = applied + the_vaccine["duration"] * DAY_MS
        if due > LATEST_MS:
            raise Skip("its due date would be after the year 9999")
        return {
            **mapper.audit(row, source_row),
            "ownerId": the_pet["owner_id"],
            "petId": str(source_row["PetId"]),
            "vaccineId": str(source_row["VaccineId"]),
            "appliedAt": format_timestamp(applied),
            "dueAt": format_timestamp(due),
            "notes": notes,
        }

    for source_row in vaccines_in:
        if (stored := take(VACCINES, "Vaccines", source_row, vaccine)) is not None:
            vaccines[stored["id"]] = stored
    for source_row in pets_in:
        if (stored := take(PETS, "Pets", source_row, pet)) is not None:
            pets[stored["id"]] = stored
    for source_row in vaccinations_in:
        take(VACCINATIONS, "PetVaccinations", source_row, vaccination)
    await _load(settings, resources, loaded, {VACCINES: vaccines, PETS: pets}, show_progress=show_progress)
    report.loaded = {name: len(rows) for name, rows in loaded.items()}
    return report


def _created_change(resource: Resource, row: Row, referenced: Mapping[str, Mapping[uuid.UUID, Row]]) -> dict[str, Any]:
    shown_row = dict(row)
    for embed in resource.embeds:
        reference = resource.reference_of(embed.reference)
        shown_row[embed.field] = referenced[reference.target.name][row[resource.field_named(embed.reference).column]]
    record = show(resource, shown_row)
    owner = owner_of(resource, record)
    key_column, grantee_column = resource.shared_through
    return {
        "resource": resource.name,
        "record_id": row["id"],
        "action": "created",
        "version": 1,
        "at": row["modified_at"],
        "by": row["modified_by"],
        "owner_before": owner if resource.ownership.column is None else None,
        "owner_after": owner,
        "record": msgspec.json.encode(record),
        "shared_key": None if key_column is None else row[key_column],
        "grantee": None if grantee_column is None else row[grantee_column],
    }


def _batches(table: Any, rows: Iterable[dict[str, Any]]) -> Iterable[Batch]:
    batch = Batch(table, [], [])
    for row in rows:
        batch.rows.append(row)
        batch.lines.append(len(batch.rows))
        if len(batch.rows) >= BATCH_ROWS:
            yield batch
            batch = Batch(table, [], [])
    if batch.rows:
        yield batch


async def _load(
    settings: Settings,
    resources: ResourceSet,
    loaded: Mapping[str, list[Row]],
    referenced: Mapping[str, Mapping[uuid.UUID, Row]],
    *,
    show_progress: bool,
) -> None:
    ordered = in_load_order(resources)
    tables = [resource.table for resource in ordered]
    total = sum(len(rows) for rows in loaded.values())
    async with databases.target(settings) as target:
        await target.begin([*tables, *databases.LOG_TABLES])
        holding = await target.nonempty([*tables, *databases.LOG_TABLES])
        if holding:
            raise CommandFailed(
                f"the database holds records already ({', '.join(holding)}); import-whoof loads only into a "
                "database with no records: nothing was imported"
            )
        with Meter("import-whoof", total=2 * total if show_progress else None) as meter:
            created: list[tuple[int, int, bytes, dict[str, Any]]] = []
            for resource in ordered:
                rows = loaded.get(resource.name, [])
                for batch in _batches(resource.table, rows):
                    await target.insert(batch)
                    meter.advance(len(batch.rows))
                created.extend(
                    (
                        row["modified_at"],
                        resources.rank(resource),
                        row["id"].bytes,
                        _created_change(resource, row, referenced),
                    )
                    for row in rows
                )
            created.sort(key=lambda item: item[:3])
            xid = await target.change_xid()
            for batch in _batches(changes, ({**item[3], "xid": xid} for item in created)):
                await target.insert(batch)
                meter.advance(len(batch.rows))
        await target.finish(ordered, published_state=Publisher.LEASE, kept=resources.kept)
