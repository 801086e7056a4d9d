"""What is due (contract section 14), the two endpoints that read the due rows (petrecords.due_rows):
`GET /v1/pets/{petId}/vaccination-status` and `GET /v1/due`. A pet's status is read from its kept rows, or from its
doses when the caller may not see them all; the due list pages the rows its caller may see, by owner or by grantee.
"""

from __future__ import annotations

import dataclasses
import functools
import uuid
from collections.abc import Sequence
from typing import Any

import msgspec
import sqlalchemy as sa

from petrecords.auth import Caller
from petrecords.certificates.facts import DAY_MS, due_state
from petrecords.due_pages import due_items, granted_page, granted_page_statement, granted_rows, items_select
from petrecords.due_rows import (
    DUE_DOSES,
    due_doses,
    due_row,
    latest_doses,
    pet_doses,
    statements_of,
)
from petrecords.endpoints import Answer, Call, Endpoint
from petrecords.errors import NotFound, ValidationFailed
from petrecords.openapi import DocumentContext, api_errors, headers, parameter
from petrecords.pets import PETS
from petrecords.resources.access import list_scope, permission, quick_permission, visible
from petrecords.resources.fields import (
    TIMESTAMP_SCHEMA,
    USER_OR_GROUP_SCHEMA,
    UUID_SCHEMA,
    Context,
    RecordId,
    pet_type,
)
from petrecords.resources.filters import SEVERAL, AnyOf, Compared, Errors, Owner, Scope, split_values, time_bound
from petrecords.resources.listing import PAGING_PARAMETERS, positive_int, query_pairs
from petrecords.resources.openapi_operations import TOO_LONG_TARGET, paging_parameters
from petrecords.services import Services
from petrecords.store.base import (
    Condition,
    Operator,
    PageQuery,
    Row,
    SortKey,
    Store,
    Transaction,
)
from petrecords.store.queries import list_statement
from petrecords.store.records import table_reader
from petrecords.vaccinations import PET_VACCINATIONS
from petrecords.vaccines import GROUP
from petrecords.values import format_timestamp, now_ms, parse_record_id

# --- GET /v1/pets/{petId}/vaccination-status --------------------------------------------------------------------


class StatusItem(msgspec.Struct, rename="camel"):
    group: str
    vaccine_id: str
    vaccine_name: str
    vaccination_id: str
    applied_at: str
    due_at: str
    state: str


class Status(msgspec.Struct, rename="camel"):
    pet_id: str
    as_of: str
    items: list[StatusItem]


@functools.lru_cache(maxsize=1)
def pet_and_rows_select() -> sa.Select[Any]:
    """The pet (parameter `record_id`) and each of its due rows beside it: one statement, so one state of the data
    (reads run outside BEGIN and COMMIT: a second statement could see a later one)."""
    pets = PETS.table
    return (
        sa.select(*pets.c, *due_doses.c)
        .select_from(pets.outerjoin(due_doses, due_doses.c.pet_id == pets.c.id))
        .where(pets.c.id == sa.bindparam("record_id", type_=pets.c.id.type))
    )


async def _pet_and_rows(tx: Transaction, record_id: uuid.UUID) -> tuple[Row | None, list[Row]]:
    found = await statements_of(tx).fetch((pet_and_rows_select(), {"record_id": record_id}))
    if not found:
        return None, []
    pets, rows = table_reader(PETS.table), table_reader(due_doses)
    pet = pets.row(found[0][: pets.width])
    # The due row's id is null where the outer join found none: a pet without rows.
    return pet, [rows.row(values, pets.width) for values in found if values[pets.width] is not None]


async def vaccination_status(*, store: Store, caller: Caller, record_id: str, due_soon_days: int) -> Status:
    """The pet's groups, each at its latest dose, as of now; 404 when the caller may not read the pet. The pet and
    its rows are read together, in one statement; its shares, when it is not the caller's, after them, as a get reads
    them."""
    parsed = parse_record_id(record_id)
    async with store.transaction(write=False, single=True, caller=caller) as tx:
        pet, latest = await _pet_and_rows(tx, parsed) if parsed is not None else (None, [])
        found = quick_permission(caller, PETS, pet)
        if found is None:
            found = await permission(tx, caller, PETS, pet, asked=parsed)
        pet = visible(pet, found)
        # A pet that died has no rows (it is due nothing): its groups are read from its doses.
        deceased = pet["deceased_at"] is not None
        if deceased:
            latest = [due_row(pet, dose) for dose in latest_doses(await pet_doses(tx, pet["id"])).values()]
    at = now_ms()
    due_soon_until = at + due_soon_days * DAY_MS
    items = []
    for row in sorted(latest, key=lambda found: (found["due_at"], found["label_key"])):
        state = "deceased" if deceased else due_state(row["due_at"], now_ms=at, due_soon_until_ms=due_soon_until)
        items.append(
            StatusItem(
                group=row["group_label"],
                vaccine_id=str(row["vaccine_id"]),
                vaccine_name=row["vaccine_name"],
                vaccination_id=str(row["id"]),
                applied_at=format_timestamp(row["applied_at"]),
                due_at=format_timestamp(row["due_at"]),
                state=state,
            )
        )
    return Status(pet_id=str(pet["id"]), as_of=format_timestamp(at), items=items)


# --- GET /v1/due ----------------------------------------------------------------------------------------------


DUE_SORT = {"dueat": ("dueAt", "due_at"), "petname": ("petName", "pet_name_key"), "group": ("group", "label_key")}
SORT_NAMES = tuple(name for name, _ in DUE_SORT.values())
TIE_BREAKERS = ("pet_id", "label_key", "id")
_BEFORE = time_bound("before", "due_at", Operator.BELOW, "dueAt < this (RFC 3339, `Z` or an offset). Default: now.")
FILTERS = (
    time_bound("after", "due_at", Operator.AT_LEAST, "dueAt ≥ this."),
    AnyOf("petId", "pet_id", RecordId(), "Only these pets."),
    AnyOf("petType", "pet_type", pet_type(), "Only pets of these types (case-insensitive)."),
    Compared("group", "label_key", GROUP, Operator.EQUAL, "Only this group, by its label, case ignored.", keyed=True),
)
OWNER = Owner("owner_id")
SCOPE = Scope()
DUE_PARAMETERS = (
    *PAGING_PARAMETERS,
    "before",
    "after",
    "petId",
    "petType",
    "ownerId",
    "group",
    "access",
    "sort",
    "order",
)
_SEVERAL = frozenset({"petId", "petType", "sort", "order"})


@dataclasses.dataclass(frozen=True)
class DueRequest:
    page_index: int
    page_size: int
    conditions: tuple[Condition, ...]
    owner: str | None
    scope: str | None
    sort: tuple[SortKey, ...]


def parse_due_query(
    pairs: Sequence[tuple[str, str]], *, context: Context, default_page_size: int, max_page_size: int
) -> DueRequest:
    """The parameters of `GET /v1/due`; 400 naming every one that is unknown or malformed."""
    values: dict[str, list[str]] = {}
    for name, value in pairs:
        values.setdefault(name, []).append(value)
    errors: Errors = {}
    for name, given in values.items():
        if name not in DUE_PARAMETERS:
            errors[name] = ["is not a parameter of this operation; expected one of " + ", ".join(DUE_PARAMETERS) + "."]
        elif name not in _SEVERAL and len(given) > 1:
            errors[name] = ["must be given once."]
    single = {name: given for name, given in values.items() if name not in errors}
    page_index = 1
    if (raw := single.get("pageIndex")) is not None:
        page_index = positive_int("pageIndex", raw[0], errors) or 1
    page_size = default_page_size
    if (raw := single.get("pageSize")) is not None:
        page_size = positive_int("pageSize", raw[0], errors, maximum=max_page_size) or max_page_size
    before = _BEFORE.read(single, errors, context) or [Condition(("due_at",), Operator.BELOW, (context.now_ms,))]
    conditions = [*before, *(condition for one in FILTERS for condition in one.read(single, errors, context))]
    owner = OWNER.owner(single, errors)
    scope = SCOPE.scope(single, errors)
    sort = _due_sort(single, errors)
    if errors:
        raise ValidationFailed(errors, what="query")
    return DueRequest(page_index, page_size, tuple(conditions), owner, scope, sort)


def _due_sort(values: dict[str, list[str]], errors: Errors) -> tuple[SortKey, ...]:
    """`sort` (dueAt, petName, group, each optionally with -) in the direction `order` gives those without -, or, as in
    every list (contract section 4), each in its own direction when `order` lists one for each and no field carries
    a -; ties are broken by petId, then group, ascending."""
    items = split_values(values["sort"]) if "sort" in values else ["dueAt"]
    directions = [direction.lower() for direction in split_values(values.get("order", ["asc"]))]
    listed = len(directions) > 1
    if any(direction not in ("asc", "desc") for direction in directions) or (
        listed and (len(directions) != len(items) or any(item.startswith("-") for item in items))
    ):
        errors["order"] = ["must be asc or desc, or one of them for each sort field when no sort field carries a -."]
        return ()
    keys: list[SortKey] = []
    for position, item in enumerate(items):
        found = DUE_SORT.get(item.removeprefix("-").lower())
        if found is None or any(key.column == found[1] for key in keys):
            errors["sort"] = ["must be distinct fields of dueAt, petName, group, each optionally prefixed with -."]
            return ()
        descending = directions[position] == "desc" if listed else item.startswith("-") or directions == ["desc"]
        keys.append(SortKey(found[1], descending))
    sorted_by = {key.column for key in keys}
    return (*keys, *(SortKey(column) for column in TIE_BREAKERS if column not in sorted_by))


async def due_page(*, tx: Transaction, caller: Caller, request: DueRequest) -> dict[str, Any]:
    """A page of the groups due among the living pets the caller may see, as the list body of contract section 4."""
    scope = await list_scope(tx, caller, DUE_DOSES.seen_as, owner=request.owner, scope=request.scope)
    conditions = (*request.conditions, *(scope or ()))
    collection = DUE_DOSES.collection
    total = await tx.count(collection, conditions) if scope is not None else 0
    offset = (request.page_index - 1) * request.page_size
    rows: Sequence[Sequence[Any]] = []
    if offset < total:
        statements = statements_of(tx)
        granted = granted_page(conditions, request.sort, offset + request.page_size)
        if granted is not None and granted.grantees:
            found = await statements.fetch(granted_page_statement(granted, limit=request.page_size, offset=offset))
            arms = len(granted.grantees) + len(granted.owners)
            rows = granted_rows(found, arms=arms, limit=request.page_size, offset=offset)
        else:
            query = PageQuery(conditions=conditions, sort=request.sort, limit=request.page_size, offset=offset)
            plan = await statements.plan(collection, query)
            page, values = list_statement(collection, plan.read, after_key=plan.after_key, search=plan.search)
            rows = await statements.fetch((items_select(page), values))
    total_pages = -(-total // request.page_size)
    return {
        "items": due_items(rows),
        "pageIndex": request.page_index,
        "pageSize": request.page_size,
        "totalPages": total_pages,
        "totalCount": total,
        "hasPreviousPage": request.page_index > 1,
        "hasNextPage": request.page_index < total_pages,
    }


# --- the endpoints -----------------------------------------------------------------------------------------------


class DueHandlers:
    """The handlers of the two due endpoints, for one application."""

    def __init__(self, services: Services) -> None:
        self.services = services

    async def status(self, call: Call) -> Answer:
        caller: Caller = call.caller
        settings = self.services.settings
        status = await vaccination_status(
            store=self.services.store,
            caller=caller,
            record_id=call.params["petId"],
            due_soon_days=settings.due_soon_days,
        )
        return Answer(200, msgspec.json.encode(status))

    async def due(self, call: Call) -> Answer:
        caller: Caller = call.caller
        settings = self.services.settings
        request = parse_due_query(
            query_pairs(call.query),
            context=self.services.context(),
            default_page_size=settings.default_page_size,
            max_page_size=settings.max_page_size,
        )
        async with self.services.store.transaction(write=False, caller=caller) as tx:
            page = await due_page(tx=tx, caller=caller, request=request)
        return Answer(200, msgspec.json.encode(page))


def due_endpoints(services: Services) -> list[Endpoint]:
    handlers = DueHandlers(services)
    return [
        Endpoint(
            "GET",
            "/v1/pets/{petId}/vaccination-status",
            "getPetVaccinationStatus",
            PETS.name,
            "A pet's groups of vaccines, each at its latest dose, and whether it is due",
            handlers.status,
            _status_document,
            direct=True,
        ),
        Endpoint(
            "GET",
            "/v1/due",
            "listDue",
            PET_VACCINATIONS.name,
            "The groups whose latest dose is due, among the living pets the caller may see",
            handlers.due,
            _due_document,
            direct=True,
        ),
    ]


def _string(description: str, **more: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **more}


_GROUP = _string("The group's label: the latest dose's vaccine's group, or its name when it has none.")
_COMMON_ITEM = {
    "vaccineId": {**UUID_SCHEMA, "description": "The latest dose's vaccine."},
    "vaccineName": _string("The latest dose's vaccine's name."),
    "vaccinationId": {**UUID_SCHEMA, "description": "The group's latest dose: its vaccination record."},
    "appliedAt": {**TIMESTAMP_SCHEMA, "description": "When the latest dose was given."},
    "dueAt": {**TIMESTAMP_SCHEMA, "description": "When the group is due: the latest dose's dueAt."},
}
STATES = ("overdue", "due-soon", "current", "deceased")


def _object(properties: dict[str, Any], description: str = "") -> dict[str, Any]:
    return {
        "type": "object",
        "description": description,
        "required": list(properties),
        "additionalProperties": False,
        "properties": properties,
    }


def _status_document(context: DocumentContext) -> dict[str, Any]:
    days = context.settings.due_soon_days
    item = _object(
        {
            "group": _GROUP,
            **_COMMON_ITEM,
            "state": _string(
                f"overdue: dueAt is at or before asOf; due-soon: within {days} days after it "
                "(PETRECORDS_DUE_SOON_DAYS); current: later; deceased: the pet has died (every group).",
                enum=list(STATES),
            ),
        }
    )
    status = _object(
        {
            "petId": {**UUID_SCHEMA, "description": "The pet."},
            "asOf": {**TIMESTAMP_SCHEMA, "description": "The time of the answer, which the states are as of."},
            "items": {"type": "array", "items": item, "description": "One per group, by dueAt, then group."},
        },
        "A pet's vaccination status: one item for each group the pet has a completed dose of.",
    )
    return {
        "description": "Whoever may read the pet (its owner, a grantee of one of its shares, an admin). A pet's doses "
        "of one group are its completed vaccinations whose vaccines have equal groups (case ignored), or, for a "
        "vaccine with no group, of that vaccine alone; the latest (appliedAt, then the greater id) counts, and an "
        "earlier dose is never due again. A dose entered-in-error counts for nothing. No ETag.",
        "parameters": [
            parameter("petId", {**UUID_SCHEMA}, "The pet's id.", where="path", required=True),
        ],
        "responses": {
            "200": {
                "description": "The pet's status.",
                "headers": headers("Cache-Control"),
                "content": {"application/json": {"schema": status}},
            },
            **api_errors(NotFound),
        },
    }


def _due_document(context: DocumentContext) -> dict[str, Any]:
    settings = context.settings
    item = _object(
        {
            "petId": {**UUID_SCHEMA, "description": "The pet."},
            "petName": _string("The pet's name."),
            "petType": _string("The pet's type."),
            "ownerId": {**USER_OR_GROUP_SCHEMA, "description": "The pet's owner: a user, or a group (`group:NAME`)."},
            "group": _GROUP,
            **_COMMON_ITEM,
        }
    )
    page = _object(
        {
            "items": {"type": "array", "items": item},
            "pageIndex": {"type": "integer", "minimum": 1},
            "pageSize": {"type": "integer", "minimum": 1, "maximum": settings.max_page_size},
            "totalPages": {"type": "integer", "minimum": 0},
            "totalCount": {"type": "integer", "minimum": 0, "description": "Exact."},
            "hasPreviousPage": {"type": "boolean"},
            "hasNextPage": {"type": "boolean"},
        },
        "A page of what is due: one item per pet and group.",
    )
    schemas = context.schemas
    filters = (_BEFORE, *FILTERS, OWNER, SCOPE)
    parameters = [document for one in filters for document in one.document(schemas)]
    parameters += [
        *paging_parameters(context, counted="Items"),
        parameter(
            "sort",
            {
                "type": "array",
                "minItems": 1,
                "uniqueItems": True,
                "items": {"type": "string", "enum": [prefix + name for name in SORT_NAMES for prefix in ("", "-")]},
                # Each field at most once, in one direction.
                "not": {
                    "anyOf": [
                        {"allOf": [{"contains": {"const": name}}, {"contains": {"const": "-" + name}}]}
                        for name in SORT_NAMES
                    ]
                },
            },
            "Distinct fields of dueAt, petName, group (names matched case-insensitively); `-` sorts that field "
            f"descending. {SEVERAL} Default `dueAt`. Ties are broken by petId, then group (case ignored), ascending.",
            several=True,
        ),
        parameter(
            "order",
            {
                "type": "array",
                "minItems": 1,
                "maxItems": len(SORT_NAMES),
                "items": {"type": "string", "enum": ["asc", "desc"]},
                "default": ["asc"],
            },
            "`asc` or `desc`: the direction of the sort fields without a `-` prefix. Or one direction for each sort "
            f"field, in the same order, when no sort field carries a `-`. {SEVERAL}",
            several=True,
        ),
    ]
    return {
        "description": "For the living pets the caller may see (their own, those shared with them, every pet for an "
        "admin), each group whose latest dose is due before `before`: one item per pet and group, as the list body. "
        "A booster renews the doses before it: only the latest completed dose of each group counts. Any other "
        "parameter is 400 (the data-provider conventions of the other lists do not apply). The next request sees "
        "every committed write that moves a group's latest dose.",
        "parameters": parameters,
        "responses": {
            "200": {
                "description": "A page of what is due.",
                "headers": headers("Cache-Control"),
                "content": {"application/json": {"schema": page}},
            },
            **TOO_LONG_TARGET,
            **api_errors(),
        },
    }
