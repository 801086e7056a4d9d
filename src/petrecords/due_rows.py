"""The due rows (contract section 14): each living pet's latest completed dose of each group, kept in `due_doses`
(and by grantee in `due_grants`) in the transaction of every write that can move it; `petrecords.due` serves them.

A group's latest dose moves when a dose is created, replaced, updated, marked in error or deleted (its pet's doses
are read again), when a vaccine's `group` or `name` changes (the pets with a dose of it), and when a pet is renamed,
changes type or owner, dies or is deleted (its rows follow it, or go). The writes of a pet's vaccinations hold the
pet exclusively (Reference.exclusive), and a pet's own writes hold it too, so that one transaction at a time reads a
pet's doses and writes its rows. The rows are counted like the vaccinations they show, for their owners and the
grantees of the pets' shares (see store/counts.py and store/grants.py): `GET /v1/due`'s exact total is a few kept
rows, and a page walks the index of its order.

The group key, label and state rules are those of certificates (petrecords.certificates.facts), so that a
certificate and the due list never disagree.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import sqlalchemy as sa

from petrecords.certificates.facts import group_key, group_label
from petrecords.pets import PETS
from petrecords.resources.declaration import Kept, Resource
from petrecords.shares import PET_SHARES
from petrecords.store.base import (
    Collection,
    Condition,
    Lock,
    Operator,
    PageQuery,
    Row,
    SortKey,
    Transaction,
)
from petrecords.store.planner import Plan
from petrecords.store.records import Statement
from petrecords.tables import Text, hour_indexed, metadata
from petrecords.text import match_key
from petrecords.vaccinations import COMPLETED, PET_VACCINATIONS
from petrecords.vaccines import VACCINES

READ_AT_ONCE = 10_000
"""A pet's records read in one statement: pages of this many, as long as there are more."""

due_doses = sa.Table(
    "due_doses",
    metadata,
    sa.Column("id", sa.Uuid(), primary_key=True, comment="the latest dose's vaccination id"),
    sa.Column("pet_id", sa.Uuid(), nullable=False),
    sa.Column("owner_id", Text, nullable=False, comment="the pet's owner, kept equal to it"),
    sa.Column(
        "group_key", Text, nullable=True, comment="the group's match key; null: the vaccine is a group of its own"
    ),
    sa.Column("label_key", Text, nullable=False, comment="match key of the group's label, for sorting and matching"),
    sa.Column("vaccine_id", sa.Uuid(), nullable=False),
    sa.Column("applied_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
    sa.Column("due_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
    sa.Column("pet_type", Text, nullable=False),
    sa.Column("pet_name_key", Text, nullable=False, comment="the pet's name_key, kept equal to it"),
    # What an item shows, kept here so that a page reads these rows alone.
    sa.Column("pet_name", Text, nullable=False, comment="the pet's name, kept equal to it"),
    sa.Column("group_label", Text, nullable=False, comment="the vaccine's group, or its name when it has none"),
    sa.Column("vaccine_name", Text, nullable=False, comment="the vaccine's name, kept equal to it"),
    sa.Column(
        "reminded",
        Text,
        nullable=False,
        server_default="none",
        comment="the last reminder written for this dueAt: none, due-soon or overdue (see petrecords.reminders)",
    ),
    sa.Index(None, "pet_id", "id"),
    # The default order, for everyone (an admin) and for an owner; the tie-breakers ride along so that a page is read
    # from the index in its order. A clinic's vet walks the first and looks each row up in the shares.
    sa.Index(None, "due_at", "pet_id", "label_key", "id"),
    sa.Index(None, "owner_id", "due_at", "pet_id", "label_key", "id"),
    # Reminders (contract section 15) come to a dose at dueAt minus the due-soon days, then at dueAt, and skip a
    # moment more than those days past: each pass reads a range of this order, never the whole table.
    sa.Index(None, "reminded", "due_at", "id"),
)
hour_indexed(due_doses, "due_at")

PAGE_INDEX_COLUMNS = (
    "due_at",
    "pet_id",
    "label_key",
    "due_id",
    "expires_at",
    "owner_id",
    "pet_type",
    "pet_name",
    "group_label",
    "vaccine_id",
    "vaccine_name",
    "applied_at",
)
"""The columns of a grantee's page index after the grantee: the page's order, then what its filters and items read."""

due_grants = sa.Table(
    "due_grants",
    metadata,
    sa.Column("grantee", Text, nullable=False, comment="a share's grantee: an e-mail address, or group:NAME"),
    sa.Column("due_id", sa.Uuid(), nullable=False, comment="the due row (its latest dose's vaccination id)"),
    sa.Column("expires_at", sa.BigInteger(), nullable=True, comment="the share's expiry, kept equal to it"),
    # The due row's columns that its filters and its order read, kept equal to it.
    sa.Column("pet_id", sa.Uuid(), nullable=False),
    sa.Column("owner_id", Text, nullable=False),
    sa.Column("pet_type", Text, nullable=False),
    sa.Column("label_key", Text, nullable=False),
    sa.Column("due_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
    # And what its item shows, kept equal to it too.
    sa.Column("pet_name", Text, nullable=False),
    sa.Column("group_label", Text, nullable=False),
    sa.Column("vaccine_id", sa.Uuid(), nullable=False),
    sa.Column("vaccine_name", Text, nullable=False),
    sa.Column("applied_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
    sa.PrimaryKeyConstraint("grantee", "due_id"),
    # A grantee's due rows in the due list's default order: a clinic's page walks its own rows, none of others', and
    # reads nothing but this index (what the filters, the expiry check and the items show ride along): no row of
    # the page is looked up anywhere else.
    sa.Index("ix_due_grants_grantee_page", "grantee", *PAGE_INDEX_COLUMNS),
    sa.Index(None, "pet_id"),
)
"""The due rows by grantee: one for each due row and each share of its pet (expired ones too, told apart by
`expires_at` when read, as the shares themselves are), rewritten with the pet's rows by every write that moves them
and by every write of the pet's shares. A grantee's page of `GET /v1/due` walks its rows in their order where the
due rows' own order would pass every other grantee's too."""

GRANT_COLUMNS = (
    "pet_id",
    "owner_id",
    "pet_type",
    "label_key",
    "due_at",
    "pet_name",
    "group_label",
    "vaccine_id",
    "vaccine_name",
    "applied_at",
)
"""The due row's columns kept in its rows by grantee: a change of any of them rewrites the pet's."""

DUE_COLUMNS = tuple(column.name for column in due_doses.c if column.name != "reminded")
"""What the keeper writes: `reminded` is the reminders' (a new row starts at `none`, its default)."""


def _stored_group(row: Row) -> object:
    """The group of a due row, as facts.group_key names a vaccine's."""
    group = row["group_key"]
    return ("vaccine", row["vaccine_id"]) if group is None else ("group", group)


def latest_doses(doses: Sequence[Row]) -> dict[object, Row]:
    """Each group's latest dose among a pet's vaccinations (each with its `vaccine`), by facts.group_key: the
    completed dose applied last, then of the greater id."""
    latest: dict[object, Row] = {}
    for dose in doses:
        if dose["status"] != COMPLETED:
            continue
        key = group_key(dose["vaccine"])
        current = latest.get(key)
        if current is None or (dose["applied_at"], dose["id"].int) > (current["applied_at"], current["id"].int):
            latest[key] = dose
    return latest


def due_row(pet: Row, dose: Row) -> Row:
    vaccine = dose["vaccine"]
    group = vaccine["group_name"]
    return {
        "id": dose["id"],
        "pet_id": pet["id"],
        "owner_id": pet["owner_id"],
        "group_key": None if group is None else match_key(group),
        "label_key": match_key(group_label(vaccine)),
        "vaccine_id": vaccine["id"],
        "applied_at": dose["applied_at"],
        "due_at": dose["due_at"],
        "pet_type": pet["pet_type"],
        "pet_name_key": pet["name_key"],
        "pet_name": pet["name"],
        "group_label": group_label(vaccine),
        "vaccine_name": vaccine["name"],
    }


def of_pet_query(pet_id: uuid.UUID, *, offset: int = 0) -> PageQuery:
    """A page of the records of a collection that name the pet, by id."""
    conditions = (Condition(("pet_id",), Operator.EQUAL, (pet_id,)),)
    return PageQuery(conditions=conditions, sort=(SortKey("id"),), limit=READ_AT_ONCE, offset=offset)


async def of_pet(tx: Transaction, collection: Collection, pet_id: uuid.UUID) -> list[Row]:
    """Every record of the collection that names the pet, by id."""
    found: list[Row] = []
    while True:
        page = await tx.list(collection, of_pet_query(pet_id, offset=len(found)))
        found.extend(page)
        if len(page) < READ_AT_ONCE:
            return found


async def pet_doses(tx: Transaction, pet_id: uuid.UUID) -> list[Row]:
    """A pet's completed vaccinations, each with its vaccine."""
    # The status is checked here, not in the query: SQLite, with no statistics (a database that was never ANALYZEd),
    # took the index on (status, created_at, id) over the pet's, and each write of a dose read every completed dose
    # of every pet (twice, see held_doses) while it held the one writer: about 20 ms at 48,000 doses, so that the
    # API's writes queued past the busy timeout (503) beside a load of dose creates and the reminders duty.
    return [dose for dose in await of_pet(tx, PET_VACCINATIONS.collection, pet_id) if dose["status"] == COMPLETED]


VACCINE_RANK = 0
"""Where a vaccine's lock comes in a transaction's order (ResourceSet.rank): vaccines refer to nothing."""
if VACCINES.references:
    raise TypeError("VACCINE_RANK is a vaccine's rank only while vaccines refer to nothing")


DUE_ROWS_RANK = VACCINE_RANK + 1_000
"""Where the hold of a pet's due rows comes in a write: after every record it holds. Every write of a pet's due rows
or their grants holds them first: a vaccine's write, which does not hold the pets, and a write of a pet, its doses
or its shares, which holds the pet but not a renamed vaccine. Without it, a pet renamed and a vaccine renamed at once
each wrote the pet's rows from what it read before the other committed (the grants twice: a duplicate key, a 500).
No cycle: a write holds them last, after its vaccines (held_doses), and a vaccine's write, holding them, waits for
nothing else."""


def due_rows_locks(pet_ids: set[uuid.UUID]) -> list[Lock]:
    return [Lock(DUE_ROWS_RANK, DUE_DOSES.name, pet_id) for pet_id in sorted(pet_ids)]


async def held_doses(tx: Transaction, pet_id: uuid.UUID) -> list[Row]:
    """A pet's completed doses, read again once their vaccines are held (shared). A vaccine's write (its group, its
    name) holds it exclusively and rewrites the rows of every pet with a dose of it, but does not hold the pets:
    without this, a dose of another vaccine of its group, written meanwhile, would read the group as it was and,
    committing last, leave rows the vaccine's write no longer matches. Held, the read is of the vaccine as its write
    committed it (or that write waits for this one, and reads this one's doses). Where a write transaction is the
    only writer (SQLite), nothing can have changed them since: the doses are read once."""
    doses = await pet_doses(tx, pet_id)
    vaccines = sorted({dose["vaccine_id"] for dose in doses})
    if not vaccines or tx.one_writer:
        return doses
    await tx.lock([Lock(VACCINE_RANK, VACCINES.name, vaccine, shared=True) for vaccine in vaccines])
    return await pet_doses(tx, pet_id)


async def _wanted_rows(tx: Transaction, pet_id: uuid.UUID, *, hold_vaccines: bool) -> dict[object, Row]:
    """A pet's due rows as its doses and its record now say (none for a pet that died or is gone), by group."""
    pet = await tx.get(PETS.collection, pet_id)
    if pet is None or pet["deceased_at"] is not None:
        return {}
    doses = await (held_doses if hold_vaccines else pet_doses)(tx, pet_id)
    return {key: due_row(pet, dose) for key, dose in latest_doses(doses).items()}


async def _held_rows(tx: Transaction, pet_id: uuid.UUID) -> dict[object, Row]:
    """A pet's due rows as stored, by group (their hold taken)."""
    return {_stored_group(row): row for row in await of_pet(tx, DUE_DOSES.collection, pet_id)}


async def _keep_pets(tx: Transaction, pet_ids: set[uuid.UUID], *, hold_vaccines: bool = True) -> None:
    """Write the pets' due rows as their doses and records now say. Every row that goes, goes first: a dose moved to
    another pet, or to another group (its vaccine's group changed), is then its row there, under the same id. Every
    pet's rows are read (and their vaccines held, see held_doses) before any is written. A vaccine's own write holds
    no other vaccine: it would wait for another vaccine's write that waits for it."""
    collection = DUE_DOSES.collection
    ordered = sorted(pet_ids)
    wanted_rows = [await _wanted_rows(tx, pet_id, hold_vaccines=hold_vaccines) for pet_id in ordered]
    if hold_vaccines:
        # A vaccine's write (which holds no vaccine but its own) took this hold already, before it read the doses.
        await tx.lock(due_rows_locks(pet_ids))
    rows = [(await _held_rows(tx, pet_id), wanted) for pet_id, wanted in zip(ordered, wanted_rows, strict=True)]
    gone: dict[uuid.UUID, Row] = {}
    moved: set[uuid.UUID] = set()
    for pet_id, (held, wanted) in zip(ordered, rows, strict=True):
        for key, row in held.items():
            if key not in wanted or wanted[key]["id"] != row["id"]:
                await tx.delete(collection, row)
                gone[row["id"]] = row
                moved.add(pet_id)
    for pet_id, (held, wanted) in zip(ordered, rows, strict=True):
        for key, row in wanted.items():
            before = held.get(key)
            if before is None or before["id"] != row["id"]:
                # A dose moved to another pet or group keeps what was reminded for its dueAt (contract section 15).
                was = gone.get(row["id"])
                reminded = was["reminded"] if was is not None and was["due_at"] == row["due_at"] else "none"
                await tx.insert(collection, {**row, "reminded": reminded})
                moved.add(pet_id)
            elif _stored(before) != row:
                # A reminder is for one dueAt: a dose whose dueAt moved may be reminded again (contract section 15).
                reminded = before["reminded"] if before["due_at"] == row["due_at"] else "none"
                await tx.update(collection, {**row, "reminded": reminded}, previous=before)
                if any(before[column] != row[column] for column in GRANT_COLUMNS):
                    moved.add(pet_id)
    await _keep_grants(tx, moved)


@runtime_checkable
class Statements(Protocol):
    """What the due rows are written and read with: statements of their own, and a list's plan (every store's
    transaction runs them and plans; see store/sql.py and store/planner.py)."""

    async def fetch(self, statement: Statement) -> Sequence[Sequence[Any]]: ...

    async def plan(self, collection: Collection, query: PageQuery) -> Plan: ...

    async def execute(self, statement: sa.ClauseElement, rows: dict[str, Any] | Sequence[dict[str, Any]]) -> None: ...


def statements_of(tx: Transaction) -> Statements:
    if not isinstance(tx, Statements):
        raise TypeError(f"{type(tx).__name__} runs no statements")
    return tx


_PET = sa.bindparam("pet_id", type_=sa.Uuid())
DROP_GRANTS = sa.delete(due_grants).where(due_grants.c.pet_id == _PET)


def grants_select(*where: sa.ColumnElement[bool]) -> sa.Select[Any]:
    """The due rows by grantee of the due rows and shares that meet `where`."""
    shares = PET_SHARES.table
    return (
        sa.select(shares.c.grantee, due_doses.c.id, shares.c.expires_at, *(due_doses.c[name] for name in GRANT_COLUMNS))
        .select_from(due_doses.join(shares, shares.c.pet_id == due_doses.c.pet_id))
        .where(*where)
    )


GRANT_INSERT_COLUMNS = ["grantee", "due_id", "expires_at", *GRANT_COLUMNS]
WRITE_GRANTS = sa.insert(due_grants).from_select(GRANT_INSERT_COLUMNS, grants_select(due_doses.c.pet_id == _PET))


def fill_grants_statement() -> sa.Insert:
    """The due rows by grantee of every due row, for a table of them that is empty: a load's."""
    return sa.insert(due_grants).from_select(GRANT_INSERT_COLUMNS, grants_select())


async def _keep_grants(tx: Transaction, pet_ids: set[uuid.UUID]) -> None:
    """The pets' due rows by grantee, written again from their due rows and shares as they now are (a pet has at most
    100 shares, and a row for each of its groups)."""
    if not pet_ids:
        return
    statements = statements_of(tx)
    ordered = sorted(pet_ids)
    # Every pet's rows go before any is written: a dose moved between two pets names the same due row id in the
    # rows of both until the one it left is dropped.
    for pet_id in ordered:
        await statements.execute(DROP_GRANTS, {"pet_id": pet_id})
    for pet_id in ordered:
        await statements.execute(WRITE_GRANTS, {"pet_id": pet_id})


async def _follow_pet(tx: Transaction, pet: Row) -> None:
    """A pet renamed, retyped or given away, alive or dead as before: its rows (the same doses) take its new values,
    one read of them and a write each, where a pet's death or its return reads its doses again."""
    collection = DUE_DOSES.collection
    moved = False
    await tx.lock(due_rows_locks({pet["id"]}))
    for before in await of_pet(tx, collection, pet["id"]):
        row = {
            **before,
            "owner_id": pet["owner_id"],
            "pet_type": pet["pet_type"],
            "pet_name_key": pet["name_key"],
            "pet_name": pet["name"],
        }
        if row != before:
            await tx.update(collection, row, previous=before)
            moved = moved or any(before[column] != row[column] for column in GRANT_COLUMNS)
    if moved:
        await _keep_grants(tx, {pet["id"]})


def fill_statement() -> sa.Insert:
    """The due rows of every stored dose, in one statement, for a table of them that is empty: a load's. The ranks
    of a pet's completed doses of each group (its vaccines' group_key, or the vaccine alone), latest first, as
    latest_doses chooses; ids compare as their bytes on both databases (SQLite keeps them as lower-case hex)."""
    doses, pets, vaccines = PET_VACCINATIONS.table, PETS.table, VACCINES.table
    group = vaccines.c.group_key
    alone = sa.case((group.is_(None), doses.c.vaccine_id))
    ranked = (
        sa.select(
            doses.c.id,
            doses.c.pet_id,
            pets.c.owner_id,
            group.label("group_key"),
            sa.func.coalesce(group, vaccines.c.name_key).label("label_key"),
            doses.c.vaccine_id,
            doses.c.applied_at,
            doses.c.due_at,
            pets.c.pet_type,
            pets.c.name_key.label("pet_name_key"),
            pets.c.name.label("pet_name"),
            sa.func.coalesce(vaccines.c.group_name, vaccines.c.name).label("group_label"),
            vaccines.c.name.label("vaccine_name"),
            sa.func.row_number()
            .over(partition_by=(doses.c.pet_id, group, alone), order_by=(doses.c.applied_at.desc(), doses.c.id.desc()))
            .label("latest"),
        )
        .join_from(doses, pets, pets.c.id == doses.c.pet_id)
        .join(vaccines, vaccines.c.id == doses.c.vaccine_id)
        .where(doses.c.status == COMPLETED, pets.c.deceased_at.is_(None))
        .subquery()
    )
    select = sa.select(*(ranked.c[column] for column in DUE_COLUMNS)).where(ranked.c.latest == 1)
    return sa.insert(due_doses).from_select(list(DUE_COLUMNS), select)


def _stored(row: Row) -> Row:
    return {column: row[column] for column in DUE_COLUMNS}


_DOSE_COLUMNS = ("pet_id", "vaccine_id", "applied_at", "due_at", "status")
_PET_COLUMNS = ("owner_id", "name", "pet_type", "deceased_at")
_VACCINE_COLUMNS = ("group_name", "name")
_SHARE_COLUMNS = ("pet_id", "grantee", "expires_at")


def _moved(before: Row | None, after: Row | None, columns: tuple[str, ...]) -> bool:
    return before is None or after is None or any(before[column] != after[column] for column in columns)


async def keep_due(tx: Transaction, resource: Resource, before: Row | None, after: Row | None) -> None:
    """Keep the due rows as a write of a pet, a vaccine or a vaccination leaves them (see Kept)."""
    pets: set[uuid.UUID] = set()
    if resource is PET_VACCINATIONS and _moved(before, after, _DOSE_COLUMNS):
        pets = {row["pet_id"] for row in (before, after) if row is not None}
    elif (
        resource is PETS and before is not None and after is not None and before["deceased_at"] == after["deceased_at"]
    ):
        if _moved(before, after, _PET_COLUMNS):
            await _follow_pet(tx, after)
        return
    elif resource is PETS and before is not None and _moved(before, after, _PET_COLUMNS):
        pets = {before["id"]}
    elif resource is VACCINES and before is not None and after is not None and _moved(before, after, _VACCINE_COLUMNS):
        doses = await tx.referrers(PET_VACCINATIONS.collection, "vaccine_id", after["id"])
        pets = {dose["pet_id"] for dose in doses}
        # Two vaccines' writes hold neither the other's vaccine nor the pets: each would read the other's group as it
        # was, and the one committing last would leave rows that miss the other's change. Holding the pets' rows,
        # the one that gets them second reads the doses after the first committed (see due_rows_locks).
        await tx.lock(due_rows_locks(pets))
    elif resource is PET_SHARES and _moved(before, after, _SHARE_COLUMNS):
        # A share made, gone or given another expiry: its pet's due rows by grantee (the pet is held, see Kept).
        shared = {row["pet_id"] for row in (before, after) if row is not None}
        await tx.lock(due_rows_locks(shared))
        await _keep_grants(tx, shared)
        return
    await _keep_pets(tx, pets, hold_vaccines=resource is not VACCINES)


def _collection(vaccinations: Collection) -> Collection:
    """Seen and counted as the vaccinations are (the same owner and shared-through columns), by the hour of dueAt."""
    return dataclasses.replace(
        vaccinations,
        name="due",
        table=due_doses,
        counted_by=None,
        counted_over="due_at",
        joins=(),
        searchable=(),
    )


DUE_DOSES = Kept(
    name="due",
    follows=(PETS, VACCINES, PET_VACCINATIONS, PET_SHARES),
    seen_as=PET_VACCINATIONS,
    keep=keep_due,
    make_collection=_collection,
    fill=lambda: (fill_statement(), fill_grants_statement()),
)
