"""Webhooks: `/v1/webhooks`, an owner's URL to which the service delivers each change the owner may see (contract,
section 17), and the log of its delivery attempts.

The secret is kept in the database as it was issued: a delivery signs with it (HMAC needs the key itself, so a hash
would not do), and every instance of a deployment must sign alike. It is a column that no field shows: no GET, list,
history, change, NATS message or log line holds it. It leaves the service twice only: in the answer to the create
(and, for as long as the Idempotency-Key is kept, in that answer as kept for a replay) and in the answer to a
rotation. Whoever can read the database can read it, as they can read the records it signs."""

from __future__ import annotations

import functools
from typing import Any

import msgspec
import sqlalchemy as sa

from petrecords.auth import Caller
from petrecords.changes.change import decode_cursor, encode_cursor
from petrecords.changes.feed import CURSOR_PATTERN, start_of
from petrecords.config import Settings
from petrecords.errors import CursorExpired, ValidationFailed
from petrecords.resources.declaration import Errors, Field, Ownership, Preparing, Resource, Revealed, Values
from petrecords.resources.fields import Context, Email, Flag, PlainKind, Problem, SchemaContext
from petrecords.resources.filters import Owner
from petrecords.tables import Text, audit_columns, metadata
from petrecords.values import now_ms
from petrecords.webhooks.endpoints import ROTATION_OVERLAP_HOURS, SECRET_SCHEMA, webhook_endpoints
from petrecords.webhooks.events import ACTIONS, DEFAULT_EVENTS, EVERY_EVENT, read_events
from petrecords.webhooks.signing import new_secret
from petrecords.webhooks.targets import MAX_URL_LENGTH, Resolver, target_problem, url_problem

MOST_PER_OWNER = 20
SCHEMA_NAME = "Webhook"
SYSTEM_USER = "system@petrecords.invalid"
"""Who the service's own writes of a webhook are by (disabling it after failures)."""
SYSTEM = Caller(email=SYSTEM_USER, is_admin=True)
CHANGE_RESOURCES = ("pets", "vaccines", "pet-vaccination", "pet-shares", "pet-certificates", "webhooks")
"""The resources of the change feed (contract, section 11), which `events` may name."""

webhooks = sa.Table(
    "webhooks",
    metadata,
    *audit_columns(),
    sa.Column("owner_id", Text, nullable=False, comment="who created it: whose feed it delivers"),
    sa.Column("url", Text, nullable=False),
    sa.Column("events", Text, nullable=False, comment="a JSON array of the events it selects"),
    sa.Column("enabled", sa.Boolean(), nullable=False),
    sa.Column("disabled_reason", Text, nullable=True, comment="why the service disabled it"),
    sa.Column("position", Text, nullable=True, comment="the cursor acknowledged; null: after its created change"),
    sa.Column("secret", Text, nullable=False, comment="whsec_ and base64: never shown but when made"),
    sa.Column("previous_secret", Text, nullable=True, comment="the secret before the last rotation"),
    sa.Column("previous_secret_until", sa.BigInteger(), nullable=True, comment="epoch ms: until then, signed by both"),
    sa.Column("sees_all", sa.Boolean(), nullable=False, comment="the owner was an administrator when they wrote it"),
    sa.Column("owner_groups", Text, nullable=False, comment="a JSON array: the owner's groups when they wrote it"),
    sa.Column("failures", sa.Integer(), nullable=False, comment="failed attempts in a row"),
    sa.Column("first_failed_at", sa.BigInteger(), nullable=True, comment="epoch ms: the first of those failures"),
    sa.Column("next_attempt_at", sa.BigInteger(), nullable=True, comment="epoch ms: when to try again"),
    sa.Index(None, "created_at", "id"),
    sa.Index(None, "owner_id", "created_at", "id"),
    sa.Index(None, "modified_at", "id"),
    # What the deliverers look for: the enabled webhooks.
    sa.Index(None, "enabled", "id"),
)


class WebhookUrl(PlainKind):
    """Where deliveries go: its form is read here; whether it is `https`, and where its host resolves to, depend on
    PETRECORDS_WEBHOOKS_ALLOW_PRIVATE and on the network, and are looked at before the write (see screen_url)."""

    def read(self, value: Any, context: Context) -> tuple[Any, Problem | None]:
        if not isinstance(value, str):
            return None, "must be an https URL, such as https://example.com/webhooks."
        if url_problem(value, allow_private=True) is None:
            return value, None  # whether http may be used, and where the host resolves: screen_url
        return None, url_problem(value, allow_private=False)

    def expected(self, context: Context) -> str:
        return "an https URL"

    def schema(self, context: SchemaContext, *, sent: bool) -> dict[str, Any]:
        return {
            "type": "string",
            "format": "uri",
            "maxLength": MAX_URL_LENGTH,
            "description": "An absolute https URL, without user information or fragment, whose host is, and "
            "resolves only to, public addresses (checked when written, and again at each delivery). "
            "PETRECORDS_WEBHOOKS_ALLOW_PRIVATE=true allows http and private addresses too.",
            "examples": ["https://93.184.215.14/petrecords-webhooks"],
        }


class Events(PlainKind):
    """Which changes a webhook selects, kept as a JSON array."""

    def read(self, value: Any, context: Context) -> tuple[Any, Problem | None]:
        events, problem = read_events(value, CHANGE_RESOURCES)
        if events is None:
            return None, problem
        return msgspec.json.encode(list(dict.fromkeys(events))).decode(), None

    def show(self, stored: Any) -> Any:
        return msgspec.json.decode(stored)

    def expected(self, context: Context) -> str:
        return "an array of events"

    def schema(self, context: SchemaContext, *, sent: bool) -> dict[str, Any]:
        names = [EVERY_EVENT, *(f"{resource}.*" for resource in CHANGE_RESOURCES)]
        names += [f"{resource}.{action}" for resource in CHANGE_RESOURCES for action in ACTIONS]
        return {
            "type": "array",
            "minItems": 1,
            "items": {"type": "string", "enum": names},
            "description": "Which changes to deliver: `{resource}.{action}`, `{resource}.*` or `*` (every change, "
            "the default).",
            "examples": [["pets.*", "pet-vaccination.overdue"]],
        }


class Position(PlainKind):
    """A cursor of the change feed, up to which every change a webhook selects was acknowledged."""

    nullable = True

    def read(self, value: Any, context: Context) -> tuple[Any, Problem | None]:
        if not isinstance(value, str):
            return None, "must be a cursor this service handed out (nextCursor, a change's cursor), or null."
        try:
            return encode_cursor(decode_cursor("position", value)), None
        except ValidationFailed as exc:
            return None, exc.errors["position"][0]

    def expected(self, context: Context) -> str:
        return "a cursor of the change feed"

    def schema(self, context: SchemaContext, *, sent: bool) -> dict[str, Any]:
        return {
            "oneOf": [{"type": "string", "pattern": CURSOR_PATTERN}, {"type": "null"}],
            "description": "The cursor (as the change feed hands them out) up to which every change the webhook "
            "selects has been acknowledged; it moves past the changes `events` does not select. On create, null "
            "starts with the first change committed after the webhook's own `created` change, and a cursor after "
            "it. Setting an earlier cursor delivers again from there. A cursor older than the kept changes is 400.",
        }


class Reason(PlainKind):
    """Why the service disabled a webhook, in a sentence: set by the service only."""

    nullable = True

    def read(self, value: Any, context: Context) -> tuple[Any, Problem | None]:
        return None, "is set by the service."

    def expected(self, context: Context) -> str:
        return "a sentence"

    def schema(self, context: SchemaContext, *, sent: bool) -> dict[str, Any]:
        return {
            "oneOf": [{"type": "string"}, {"type": "null"}],
            "description": "Why the service disabled the webhook (its deliveries kept failing, or it fell behind "
            "the kept changes); null while enabled, or when its owner disabled it.",
        }


@functools.cache
def shared_resolver() -> Resolver:
    """The one resolver of a process (its threads start on first use)."""
    return Resolver()


async def screen_url(values: Values, settings: Settings) -> Errors:
    """The URL's rule, with its host looked up now (before the write's transaction: a slow name server holds
    nothing). A host that resolves to no address now is let through: the rule refuses the addresses it reaches,
    and a name that does not resolve reaches none (each delivery looks it up again, and fails while it does not)."""
    url = values.get("url")
    if url is None:
        return {}
    problem = await target_problem(
        url, allow_private=settings.webhooks_allow_private, resolver=shared_resolver(), refuse_unresolved=False
    )
    return {} if problem is None else {"url": [problem]}


def fresh_state() -> Values:
    """The delivery state of a webhook that has not failed."""
    return {"failures": 0, "first_failed_at": None, "next_attempt_at": None}


async def prepare(writing: Preparing) -> Values:
    """The columns a write sets that no field shows, and the rules that need the change log."""
    tx, caller, stored, written = writing.tx, writing.caller, writing.stored, writing.written
    extra: Values = {}
    if stored is None:
        # The secret itself is made before (see _new_secret), for the create's answer to show.
        extra.update(previous_secret=None, previous_secret_until=None, disabled_reason=None, **fresh_state())
    position = written["position"]
    if position is not None and (stored is None or position != stored["position"]):
        try:
            await start_of(tx, decode_cursor("position", position), name="position")
        except CursorExpired:
            raise ValidationFailed.single(
                "position", "is older than the kept changes: a cursor at or after the oldest kept change."
            ) from None
    if stored is not None and written["secret"] != stored["secret"]:
        # A new secret (POST …/secret): the old one goes on signing for a while beside it.
        overlap_ms = ROTATION_OVERLAP_HOURS * 3_600_000
        extra.update(previous_secret=stored["secret"], previous_secret_until=now_ms() + overlap_ms)
    if caller.email == SYSTEM_USER:
        return extra  # the service's own write (disabling): it sets what it means to
    if caller.email == written["owner_id"]:
        # Whose feed it delivers: the owner's, as their token said when they last wrote it.
        extra.update(sees_all=caller.is_admin, owner_groups=msgspec.json.encode(list(caller.groups)).decode())
    if stored is not None:
        # A client's write (a new position, enabled again, a new URL) starts the retries afresh.
        extra.update(fresh_state())
        enabled_again = written["enabled"] or stored["enabled"]
        extra["disabled_reason"] = None if enabled_again else stored["disabled_reason"]
    return extra


def _new_secret() -> tuple[Values, dict[str, Any]]:
    """A new webhook's secret, kept as it is (a delivery signs with it) and shown in the create's answer."""
    secret = new_secret()
    return {"secret": secret}, {"secret": secret}


WEBHOOKS = Resource(
    name="webhooks",
    table=webhooks,
    title="webhook",
    schema_name=SCHEMA_NAME,
    plural="Webhooks",
    path_parameter="webhookId",
    description="A URL to which the service delivers each change its owner may see, as a signed POST (Standard "
    "Webhooks), in commit order, one at a time, at least once. Its owner and an administrator may read and write "
    f"it; at most {MOST_PER_OWNER} for an owner.",
    fields=(
        Field(
            "ownerId",
            "owner_id",
            Email("Who created it: the changes delivered are those this user may see."),
            read_only=True,
        ),
        Field("url", "url", WebhookUrl(), required=True),
        Field("events", "events", Events(), default=msgspec.json.encode(list(DEFAULT_EVENTS)).decode()),
        Field(
            "enabled",
            "enabled",
            Flag("Whether changes are delivered; set to false by the service when deliveries keep failing."),
            default=True,
        ),
        Field("disabledReason", "disabled_reason", Reason(), read_only=True),
        Field("position", "position", Position()),
    ),
    ownership=Ownership(column="owner_id"),
    filters=(Owner("owner_id"),),
    tolerated=("secret",),  # a client may send back the create's answer, as it may any record it read
    sort_fields=("id", "createdAt", "createdBy", "modifiedAt", "modifiedBy"),
    screen=screen_url,
    prepare=prepare,
    revealed=Revealed(make=_new_secret, schemas={"secret": SECRET_SCHEMA}),
    more_endpoints=webhook_endpoints,
    record_operations=(f"rotate{SCHEMA_NAME}Secret", f"list{SCHEMA_NAME}Deliveries"),
    most_per_owner=MOST_PER_OWNER,
    moved_without_write=("position",),  # moved by the deliveries: the ETag follows it
    # A public address that needs no look-up; created disabled, as a client does before its receiver is ready.
    examples={"url": "https://93.184.215.14/petrecords-webhooks", "events": ["pets.*"], "enabled": False},
)
