"""Delivery (webhooks.deliverer), on both databases, by a real app's duty to a real receiver on 127.0.0.1: every
change the owner's feed holds, in commit order, signed, once acknowledged; only those `events` selects; the retries,
the deliveries log, disabling after failures and after falling behind the kept changes, replays by moving
`position` back, a rotation's two signatures, a hanging receiver that slows no other webhook, and a certificate's
changes, which reach its issuer and its pet's owner without its link."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from petrecords.app import create_app, open_store
from petrecords.config import Settings
from petrecords.errors import DatabaseUnavailable
from petrecords.metrics import Metrics
from petrecords.registry import RESOURCES
from petrecords.store.base import Store
from petrecords.store.sql import SqlTransaction
from petrecords.tables import service_state
from petrecords.values import now_ms
from petrecords.webhooks import deliverer as deliverer_module
from petrecords.webhooks.deliverer import FELL_BEHIND, WebhookDeliveries
from petrecords.webhooks.delivery import Sender
from petrecords.webhooks.log import DAY_MS, KEPT_DAYS
from petrecords.webhooks.signing import verify
from petrecords.webhooks.targets import Resolver
from tests.support import ADMIN, ALICE, BOB, auth, create, overlapping_client, token, until, wipe
from tests.webhooks.receivers import Received, Receiver

Client = httpx.AsyncClient
LoopClient = contextlib.AbstractAsyncContextManager[httpx.AsyncClient]
WEBHOOKS = "/v1/webhooks"
SYSTEM = "system@petrecords.invalid"


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    with Receiver().running() as running:
        yield running


@pytest.fixture(autouse=True)
def quick_scans(monkeypatch: pytest.MonkeyPatch) -> None:
    """Webhooks found within a tenth of a second, not two: the tests wait less."""
    monkeypatch.setattr(WebhookDeliveries, "SCAN_SECONDS", 0.1)
    monkeypatch.setattr(WebhookDeliveries, "POLL_SECONDS", 0.05)


@pytest.fixture
def own_deliverer_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The app's own deliverer stays out of it: the test runs deliverers of its own, as other instances'."""

    async def idle(self: WebhookDeliveries) -> None:
        await asyncio.Event().wait()

    monkeypatch.setattr(WebhookDeliveries, "run", idle)


@pytest.fixture
def hook_settings(make_settings: Callable[..., Settings]) -> Callable[..., Settings]:
    def make(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "webhooks_allow_private": True,
            "webhooks_timeout_seconds": 1.0,
            "webhooks_retry_seconds": ("0.2",),
        }
        values.update(overrides)
        return make_settings(**values)

    return make


@pytest.fixture
async def make_loop_client(database_url: str) -> Callable[[Settings], LoopClient]:
    """Clients of apps that answer on this event loop, for the tests that run a deliverer of their own on it, as
    another instance's: Litestar's AsyncTestClient blocks this loop for each request (the app answers on a thread
    of its own), so that a deliverer caught inside a write transaction by a request held SQLite's write lock until
    the request, waiting for that lock, gave up with a 503."""
    await wipe(database_url)
    return lambda settings: overlapping_client(create_app(settings))


@pytest.fixture
async def client(
    make_client: Callable[[Settings], Client], hook_settings: Callable[..., Settings]
) -> AsyncIterator[Client]:
    async with make_client(hook_settings()) as started:
        yield started


def _mark() -> str:
    return uuid.uuid4().hex


async def _hook(
    client: Client,
    receiver: Receiver,
    path: str,
    mark: str,
    user: str = ALICE,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> Any:
    body = {"url": f"http://127.0.0.1:{receiver.port}{path}?{mark}", **extra}
    response = await client.post(WEBHOOKS, json=body, headers=auth(user) if headers is None else headers)
    assert response.status_code == 201, response.text
    return response.json()


def _bodies(requests: list[Received]) -> list[dict[str, Any]]:
    return [json.loads(request.body) for request in requests]


async def _feed(client: Client, user: str = ALICE) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = (await client.get("/v1/changes?limit=1000", headers=auth(user))).json()["items"]
    return items


class TestDelivery:
    async def test_every_change_of_the_owners_feed_arrives_in_order_and_signed(
        self, client: Client, receiver: Receiver
    ) -> None:
        mark = _mark()
        await create(client, name="Before")  # committed before the webhook: not delivered
        hook = await _hook(client, receiver, "/ok", mark)
        rex = (await create(client, name="Rex")).json()
        await create(client, BOB, name="Bobs")  # not Alice's: never delivered to her
        await client.patch(f"/v1/pets/{rex['id']}", json={"breed": "Beagle"}, headers=auth())
        await client.delete(f"/v1/pets/{rex['id']}", headers=auth())
        feed = await _feed(client)
        created_at = next(i for i, change in enumerate(feed) if change["id"] == hook["id"])
        expected = feed[created_at + 1 :]
        assert [change["action"] for change in expected] == ["created", "replaced", "deleted"]
        await until(lambda: len(receiver.requests_marked(mark)) >= len(expected), what="the deliveries")
        got = receiver.requests_marked(mark)
        assert [body["data"] for body in _bodies(got)] == expected
        for request, change in zip(got, expected, strict=True):
            assert request.method == "POST"
            assert request.headers["content-type"] == "application/json"
            body = json.loads(request.body)
            assert body == {"type": f"pets.{change['action']}", "timestamp": change["at"], "data": change}
            assert request.headers["webhook-id"] == f"pets:{change['id']}:{change['version']}"
            verify(hook["secret"], request.headers, request.body)
        path = f"{WEBHOOKS}/{hook['id']}"
        await until(
            lambda: _position_is(client, path, expected[-1]["cursor"]), what="the position to move past the last"
        )
        log = (await client.get(f"{path}/deliveries", headers=auth())).json()
        assert log["totalCount"] == 3
        assert [item["changeCursor"] for item in log["items"]] == [change["cursor"] for change in reversed(expected)]
        assert {item["outcome"] for item in log["items"]} == {"succeeded"}
        assert {item["statusCode"] for item in log["items"]} == {200}
        assert all(item["error"] is None and item["type"].startswith("pets.") for item in log["items"])

    async def test_only_the_events_selected_and_the_position_moves_past_the_others(
        self, client: Client, receiver: Receiver
    ) -> None:
        mark = _mark()
        hook = await _hook(client, receiver, "/ok", mark, events=["pets.deleted"])
        rex = (await create(client)).json()
        await client.delete(f"/v1/pets/{rex['id']}", headers=auth())
        await create(client)
        last = (await _feed(client))[-1]["cursor"]
        await until(lambda: _position_is(client, f"{WEBHOOKS}/{hook['id']}", last), what="the position")
        assert [body["type"] for body in _bodies(receiver.requests_marked(mark))] == ["pets.deleted"]

    async def test_the_etag_changes_as_the_deliveries_move_the_position(
        self, client: Client, receiver: Receiver
    ) -> None:
        mark = _mark()
        hook = await _hook(client, receiver, "/ok", mark, events=["pets.deleted"])
        path = f"{WEBHOOKS}/{hook['id']}"
        read = await client.get(path, headers=auth())
        await create(client)  # not selected: the position moves past it, though nobody writes the webhook
        last = (await _feed(client))[-1]["cursor"]
        await until(lambda: _position_is(client, path, last), what="the position")
        moved = await client.get(path, headers={**auth(), "If-None-Match": read.headers["etag"]})
        assert moved.status_code == 200, "a 304 would keep the position as it was"
        assert moved.json()["position"] == last
        assert moved.json()["modifiedAt"] == read.json()["modifiedAt"]  # no write
        assert moved.headers["etag"] != read.headers["etag"]
        stale = await client.patch(path, json={"enabled": False}, headers={**auth(), "If-Match": read.headers["etag"]})
        assert stale.status_code == 412, stale.text
        current = await client.patch(
            path, json={"enabled": False}, headers={**auth(), "If-Match": moved.headers["etag"]}
        )
        assert current.status_code == 200, current.text

    async def test_an_admins_webhook_delivers_every_change(self, client: Client, receiver: Receiver) -> None:
        mark = _mark()
        body = {"url": f"http://127.0.0.1:{receiver.port}/ok?{mark}", "events": ["pets.created"]}
        assert (await client.post(WEBHOOKS, json=body, headers=auth(ADMIN, admin=True))).status_code == 201
        await create(client, ALICE, name="A")
        await create(client, BOB, name="B")
        await until(lambda: len(receiver.requests_marked(mark)) == 2, what="both owners' pets")
        assert [body["data"]["record"]["name"] for body in _bodies(receiver.requests_marked(mark))] == ["A", "B"]

    async def test_it_sees_as_its_owners_token_did_when_the_owner_last_wrote_it(
        self, client: Client, receiver: Receiver
    ) -> None:
        mark = _mark()
        in_clinic = {"Authorization": f"Bearer {token(BOB, groups=['clinic-42'])}"}
        hook = await _hook(client, receiver, "/ok", mark, events=["pets.*"], headers=in_clinic)
        path = f"{WEBHOOKS}/{hook['id']}"
        rex = (await create(client, ALICE, name="Rex")).json()
        shared = {"petId": rex["id"], "grantee": "group:clinic-42", "access": "read"}
        assert (await client.post("/v1/pet-shares", json=shared, headers=auth(ALICE))).status_code == 201

        async def rename(name: str) -> None:
            answer = await client.patch(f"/v1/pets/{rex['id']}", json={"name": name}, headers=auth(ALICE))
            assert answer.status_code == 200, answer.text

        def names() -> list[str]:
            return [body["data"]["record"]["name"] for body in _bodies(receiver.requests_marked(mark))]

        await rename("Seen through the group")
        await until(lambda: names() == ["Seen through the group"], what="the change the group's share shows")
        # An administrator's write changes what it delivers, never the owner's groups.
        answer = await client.patch(path, json={"events": ["pets.*"]}, headers=auth(ADMIN, admin=True))
        assert answer.status_code == 200, answer.text
        await rename("Still seen")
        await until(lambda: names()[-1:] == ["Still seen"], what="the change after the administrator's write")
        # The owner's write with a token that names no group: the group's share no longer reaches it.
        answer = await client.patch(path, json={"enabled": True}, headers=auth(BOB))
        assert answer.status_code == 200, answer.text
        await rename("Not seen")
        await create(client, BOB, name="Bobs")
        await until(lambda: names()[-1:] == ["Bobs"], what="the owner's own change")
        # A client's write of the webhook drops an acknowledgement not yet saved: a change may come again.
        assert list(dict.fromkeys(names())) == ["Seen through the group", "Still seen", "Bobs"]


@pytest.mark.usefixtures("own_deliverer_only")
class TestAWriteDuringARead:
    async def test_changes_after_the_owners_write_are_seen_as_it_wrote_them(
        self,
        make_loop_client: Callable[[Settings], LoopClient],
        hook_settings: Callable[..., Settings],
        receiver: Receiver,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """The owner writes the webhook with a token of no group, then the pet shared with the group is renamed,
        both while the deliverer reads: between its read of the webhook and its read of the changes (on
        PostgreSQL each statement of a read sees what has committed before it). The rename comes after the
        owner's write in the log: it is not delivered through the group the webhook no longer has."""
        settings = hook_settings()
        mark = _mark()
        in_clinic = {"Authorization": f"Bearer {token(BOB, groups=['clinic-42'])}"}
        async with make_loop_client(settings) as client, _deliverer(settings) as (deliveries, _):
            hook = await _hook(client, receiver, "/ok", mark, events=["pets.*"], headers=in_clinic)
            rex = (await create(client, ALICE, name="Rex")).json()
            shared = {"petId": rex["id"], "grantee": "group:clinic-42", "access": "read"}
            assert (await client.post("/v1/pet-shares", json=shared, headers=auth(ALICE))).status_code == 201
            hook_id = uuid.UUID(hook["id"])

            async def rename(name: str) -> None:
                answer = await client.patch(f"/v1/pets/{rex['id']}", json={"name": name}, headers=auth(ALICE))
                assert answer.status_code == 200, answer.text

            await rename("Seen through the group")
            assert await deliveries.deliver_once(hook_id) == 0
            start_of = deliverer_module._start_of

            async def start_after_writes(tx: Any, row: Any) -> Any:
                monkeypatch.setattr(deliverer_module, "_start_of", start_of)  # during the first read alone
                answer = await client.patch(f"{WEBHOOKS}/{hook_id}", json={"enabled": True}, headers=auth(BOB))
                assert answer.status_code == 200, answer.text
                await rename("Not seen")
                return await start_of(tx, row)

            monkeypatch.setattr(deliverer_module, "_start_of", start_after_writes)
            for _ in range(3):
                await deliveries.deliver_once(hook_id)
            await create(client, BOB, name="Bobs")
            await deliveries.deliver_once(hook_id)

            names = [body["data"]["record"]["name"] for body in _bodies(receiver.requests_marked(mark))]
            assert names == ["Seen through the group", "Bobs"]


class TestFailures:
    async def test_a_failure_is_tried_again_logged_and_the_next_waits_for_it(
        self, client: Client, receiver: Receiver
    ) -> None:
        mark = _mark()
        hook = await _hook(client, receiver, "/status/500", mark, events=["pets.*"])
        path = f"{WEBHOOKS}/{hook['id']}"
        await create(client, name="First")
        await create(client, name="Second")
        await until(lambda: len(receiver.requests_marked(mark)) >= 3, what="three attempts")
        # Only the first change is tried while it fails: the second waits behind it.
        assert {body["data"]["record"]["name"] for body in _bodies(receiver.requests_marked(mark))} == {"First"}
        ids = {request.headers["webhook-id"] for request in receiver.requests_marked(mark)}
        assert len(ids) == 1  # the same webhook-id on every retry
        await until(lambda: _logged(client, path, 2), what="the failures in the log")
        failed = (await client.get(f"{path}/deliveries", headers=auth())).json()["items"][0]
        assert failed["outcome"] == "failed"
        assert failed["statusCode"] == 500
        assert failed["error"] == "answered 500"
        fixed = await client.patch(path, json={"url": f"http://127.0.0.1:{receiver.port}/ok?{mark}"}, headers=auth())
        assert fixed.status_code == 200

        def attempts() -> list[tuple[str, str, str]]:
            """Each attempt's path, webhook-id and pet, as the receiver got them."""
            return [
                (
                    request.target.split("?")[0],
                    request.headers["webhook-id"],
                    _bodies([request])[0]["data"]["record"]["name"],
                )
                for request in receiver.requests_marked(mark)
            ]

        await until(
            lambda: [b["data"]["record"]["name"] for b in _bodies(_ok(receiver, mark))] == ["First", "Second"],
            what="both, in order, once the receiver answers",
            seen=attempts,
        )

    async def test_failing_for_the_set_hours_disables_it_as_a_change_by_the_service(
        self, make_client: Callable[[Settings], Client], hook_settings: Callable[..., Settings], receiver: Receiver
    ) -> None:
        async with make_client(hook_settings(webhooks_disable_after_hours=0.0003)) as client:  # about a second
            mark = _mark()
            hook = await _hook(client, receiver, "/status/503", mark, events=["pets.*"])
            path = f"{WEBHOOKS}/{hook['id']}"
            await create(client)
            await until(lambda: _disabled(client, path), what="the webhook to be disabled")
            got = (await client.get(path, headers=auth())).json()
            assert got["disabledReason"] == "Its deliveries failed for 0.0003 hours without a success."
            history = (await client.get(f"{path}/history", headers=auth())).json()["items"]
            assert (history[-1]["action"], history[-1]["by"]) == ("replaced", SYSTEM)
            assert history[-1]["record"]["enabled"] is False
            tried = len(receiver.requests_marked(mark))
            # Enabled again, it resumes after its position: the pet's change is tried again.
            again = await client.patch(path, json={"enabled": True}, headers=auth())
            assert again.json()["disabledReason"] is None
            await until(lambda: len(receiver.requests_marked(mark)) > tried, what="a new attempt")

    async def test_falling_behind_the_kept_changes_disables_it(
        self, client: Client, receiver: Receiver, hook_settings: Callable[..., Settings]
    ) -> None:
        mark = _mark()
        hook = await _hook(client, receiver, "/status/500", mark)
        path = f"{WEBHOOKS}/{hook['id']}"
        await create(client)
        await until(lambda: len(receiver.requests_marked(mark)) >= 1, what="a first attempt")
        store = open_store(hook_settings())  # retention, as another instance runs it
        try:
            async with store.transaction(write=True) as tx:
                await tx.purge_changes(before_ms=2**62, limit=1000)
        finally:
            await store.close()
        await until(lambda: _disabled(client, path), what="the webhook to be disabled")
        assert (await client.get(path, headers=auth())).json()["disabledReason"] == FELL_BEHIND


class TestReplayAndRotation:
    async def test_an_earlier_position_delivers_again_from_there(self, client: Client, receiver: Receiver) -> None:
        mark = _mark()
        hook = await _hook(client, receiver, "/ok", mark, events=["pets.*"])
        await create(client, name="One")
        await create(client, name="Two")
        await until(lambda: len(receiver.requests_marked(mark)) == 2, what="two deliveries")
        feed = await _feed(client)
        one = next(change for change in feed if change["record"].get("name") == "One")
        moved = await client.patch(f"{WEBHOOKS}/{hook['id']}", json={"position": one["cursor"]}, headers=auth())
        assert moved.status_code == 200, moved.text
        await until(lambda: len(receiver.requests_marked(mark)) == 3, what="the replay")
        assert [b["data"]["record"]["name"] for b in _bodies(receiver.requests_marked(mark))] == ["One", "Two", "Two"]

    async def test_after_a_rotation_deliveries_carry_both_signatures(self, client: Client, receiver: Receiver) -> None:
        mark = _mark()
        hook = await _hook(client, receiver, "/ok", mark, events=["pets.*"])
        rotated = (await client.post(f"{WEBHOOKS}/{hook['id']}/secret", headers=auth())).json()
        await create(client)
        await until(lambda: len(receiver.requests_marked(mark)) == 1, what="a delivery")
        request = receiver.requests_marked(mark)[0]
        assert len(request.headers["webhook-signature"].split(" ")) == 2
        verify(rotated["secret"], request.headers, request.body)
        verify(hook["secret"], request.headers, request.body)


class TestInstances:
    @pytest.mark.usefixtures("own_deliverer_only")
    async def test_one_instance_delivers_a_webhook_and_another_takes_over_once_its_lease_lapses(
        self,
        make_loop_client: Callable[[Settings], LoopClient],
        hook_settings: Callable[..., Settings],
        receiver: Receiver,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        monkeypatch.setattr(WebhookDeliveries, "LEASE_SECONDS", 1.0)
        monkeypatch.setattr(WebhookDeliveries, "LEASE_MARGIN_SECONDS", 0.6)
        settings = hook_settings(webhooks_timeout_seconds=0.3)
        async with make_loop_client(settings) as client:
            mark = _mark()
            hook = await _hook(client, receiver, "/ok", mark, events=["pets.*"])
            hook_id = uuid.UUID(hook["id"])
            store = open_store(settings)
            resolver = Resolver()
            senders = [Sender(settings, resolver=resolver) for _ in range(2)]
            first, second = (
                WebhookDeliveries(
                    settings, lambda: store, resources=RESOURCES, instance=name, metrics=Metrics(), sender=sender
                )
                for name, sender in zip(("first", "second"), senders, strict=True)
            )
            try:
                await first.scan()
                await second.scan()
                assert (first.delivering, second.delivering) == ({hook_id}, frozenset())
                await create(client, name="One")
                await until(lambda: len(receiver.requests_marked(mark)) == 1, what="the first delivery")
                await first.stop_delivering()  # it dies; its lease lasts until it lapses
                await create(client, name="Two")
                await second.scan()
                assert second.delivering == frozenset()
                await asyncio.sleep(1.2)
                await second.scan()
                assert second.delivering == {hook_id}

                def names() -> list[str]:
                    return [body["data"]["record"]["name"] for body in _bodies(receiver.requests_marked(mark))]

                await until(lambda: "Two" in names(), what="the takeover's delivery")
                # "One" again only if the first stopped between its answer and the save (at least once).
                assert list(dict.fromkeys(names())) == ["One", "Two"]
                assert names()[-1] == "Two"
            finally:
                await first.stop_delivering()
                await second.stop_delivering()
                for sender in senders:
                    await sender.aclose()
                resolver.close()
                await store.close()


@pytest.mark.usefixtures("own_deliverer_only")
class TestRetention:
    async def test_the_deliveries_log_is_purged_after_thirty_days(
        self,
        make_loop_client: Callable[[Settings], LoopClient],
        hook_settings: Callable[..., Settings],
        receiver: Receiver,
    ) -> None:
        settings = hook_settings()
        async with make_loop_client(settings) as client, _deliverer(settings) as (deliveries, store):
            hook = await _hook(client, receiver, "/ok", _mark(), events=["pets.*"])
            path = f"{WEBHOOKS}/{hook['id']}"
            await deliveries.scan()
            await create(client, name="One")
            await until(lambda: _logged(client, path, 1), what="the attempt in the log")
            await deliveries.stop_delivering()
            logged = (await client.get(f"{path}/deliveries", headers=auth())).json()["items"]
            attempted = round(datetime.datetime.fromisoformat(logged[0]["attemptedAt"]).timestamp() * 1000)

            assert await deliveries.purge(store, now=attempted + KEPT_DAYS * DAY_MS) == 0  # 30 days old: kept
            assert (await client.get(f"{path}/deliveries", headers=auth())).json()["totalCount"] == 1
            assert await deliveries.purge(store, now=attempted + KEPT_DAYS * DAY_MS + 1) == 1
            assert (await client.get(f"{path}/deliveries", headers=auth())).json()["totalCount"] == 0

    async def test_the_lease_of_a_deleted_webhook_goes_once_it_lapses(
        self,
        make_loop_client: Callable[[Settings], LoopClient],
        hook_settings: Callable[..., Settings],
        receiver: Receiver,
    ) -> None:
        settings = hook_settings()
        async with make_loop_client(settings) as client, _deliverer(settings) as (deliveries, store):
            kept, gone = [await _hook(client, receiver, "/ok", _mark()) for _ in range(2)]
            await deliveries.scan()
            assert deliveries.delivering == {uuid.UUID(kept["id"]), uuid.UUID(gone["id"])}
            assert (await client.delete(f"{WEBHOOKS}/{gone['id']}", headers=auth())).status_code == 200
            await until(lambda: uuid.UUID(gone["id"]) not in deliveries.delivering, what="its delivery to stop")
            await deliveries.stop_delivering()
            both = {f"webhook:{kept['id']}", f"webhook:{gone['id']}"}
            assert await _leases(store) == both

            await deliveries.purge(store, now=now_ms())  # held still: kept
            assert await _leases(store) == both
            await deliveries.purge(store, now=now_ms() + deliveries.lease_ms + 1)
            assert await _leases(store) == {f"webhook:{kept['id']}"}  # a webhook that is still there keeps its own


@contextlib.asynccontextmanager
async def _deliverer(settings: Settings) -> AsyncIterator[tuple[WebhookDeliveries, Store]]:
    """A deliverer of its own, with its own store, as another instance's."""
    store = open_store(settings)
    resolver = Resolver()
    sender = Sender(settings, resolver=resolver)
    deliveries = WebhookDeliveries(
        settings, lambda: store, resources=RESOURCES, instance="own", metrics=Metrics(), sender=sender
    )
    try:
        yield deliveries, store
    finally:
        await deliveries.stop_delivering()
        await sender.aclose()
        resolver.close()
        await store.close()


async def _leases(store: Store) -> set[str]:
    """The names of the webhooks' leases the database keeps."""
    async with store.transaction(write=False) as tx:
        assert isinstance(tx, SqlTransaction)
        query = sa.select(service_state.c.name).where(service_state.c.name.like("webhook:%"))
        return {row[0] for row in await tx.fetch((query, {}))}


class _Outage:
    """A store whose transactions fail as a database that went away does, while `down` is set."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.down = False
        self.refused = 0
        self.open = 0
        """Transactions begun before `down` was set and not yet ended: a read among them may still see a change."""

    def transaction(self, **options: Any) -> Any:
        if self.down:
            self.refused += 1
            raise DatabaseUnavailable(cause="connection")
        return self._counted(self.store.transaction(**options))

    @contextlib.asynccontextmanager
    async def _counted(self, transaction: Any) -> AsyncIterator[Any]:
        self.open += 1
        try:
            async with transaction as tx:
                yield tx
        finally:
            self.open -= 1


class TestDatabaseOutage:
    @pytest.mark.usefixtures("own_deliverer_only")
    async def test_delivery_pauses_while_the_database_is_away_and_resumes_after(
        self,
        make_loop_client: Callable[[Settings], LoopClient],
        hook_settings: Callable[..., Settings],
        receiver: Receiver,
    ) -> None:
        settings = hook_settings()
        async with make_loop_client(settings) as client:
            mark = _mark()
            await _hook(client, receiver, "/ok", mark, events=["pets.*"])
            store = open_store(settings)
            outage = _Outage(store)
            sender = Sender(settings, resolver=Resolver())
            deliveries = WebhookDeliveries(
                settings,
                lambda: outage,
                resources=RESOURCES,
                instance="one",
                metrics=Metrics(),
                sender=sender,  # type: ignore[arg-type, return-value]
            )
            try:
                await deliveries.scan()
                await create(client, name="Before")
                await until(lambda: len(receiver.requests_marked(mark)) == 1, what="a delivery")
                outage.down = True
                # A read the deliverer began before would see a change committed now (PostgreSQL reads what each
                # statement finds committed): the outage holds once those have ended.
                await until(lambda: outage.open == 0, what="the transactions begun before the outage to end")
                await create(client, name="During")
                await until(lambda: outage.refused >= 2, what="the deliverer to find the database away")
                assert len(receiver.requests_marked(mark)) == 1
                assert deliveries.delivering  # paused, not given up
                outage.down = False

                def names() -> list[str]:
                    return [body["data"]["record"]["name"] for body in _bodies(receiver.requests_marked(mark))]

                await until(lambda: "During" in names(), what="delivery to resume")
                # "Before" again if its acknowledgement was not saved before the outage (at least once).
                assert list(dict.fromkeys(names())) == ["Before", "During"]
                assert names()[-1] == "During"
            finally:
                await deliveries.stop_delivering()
                await sender.aclose()
                await store.close()


class TestIsolation:
    async def test_a_hanging_receiver_slows_no_other_webhook(
        self, make_client: Callable[[Settings], Client], hook_settings: Callable[..., Settings], receiver: Receiver
    ) -> None:
        async with make_client(hook_settings(webhooks_timeout_seconds=20.0)) as client:
            hanging, quick = _mark(), _mark()
            await _hook(client, receiver, "/hang", hanging)
            await _hook(client, receiver, "/ok", quick, BOB)
            for number in range(5):
                await create(client, ALICE, name=f"Pet {number}")
                await create(client, BOB, name=f"Pet {number}")
            # Bob's five arrive while Alice's first change hangs, for 20 s, on its one connection (on a busy machine
            # her first attempt may begin after his: it is awaited, then his within the 20 s it hangs).
            await until(lambda: len(receiver.requests_marked(hanging)) == 1, what="the hanging delivery", seconds=15)
            await until(lambda: len(receiver.requests_marked(quick)) == 5, what="the quick deliveries", seconds=15)
            assert len(receiver.requests_marked(hanging)) == 1

    async def test_a_certificates_changes_reach_its_issuer_and_the_pets_owner_without_its_link(
        self, client: Client, receiver: Receiver
    ) -> None:
        marks = {ALICE: _mark(), BOB: _mark()}
        for user, mark in marks.items():
            await _hook(client, receiver, "/ok", mark, user, events=["pet-certificates.*"])
        rex = (await create(client, name="Rex")).json()
        share = {"petId": rex["id"], "grantee": BOB, "access": "read"}
        assert (await client.post("/v1/pet-shares", json=share, headers=auth())).status_code == 201
        issued = await client.post("/v1/pet-certificates", json={"petId": rex["id"]}, headers=auth(BOB))
        assert issued.status_code == 201, issued.text
        certificate = issued.json()
        assert (await client.delete(f"/v1/pet-certificates/{certificate['id']}", headers=auth(BOB))).status_code == 200

        token = certificate["link"].rsplit("/", 1)[1]
        for user, mark in marks.items():
            await until(lambda mark=mark: len(receiver.requests_marked(mark)) >= 2, what=f"{user}'s deliveries")
            got = receiver.requests_marked(mark)
            assert [body["type"] for body in _bodies(got)] == ["pet-certificates.created", "pet-certificates.deleted"]
            assert all(token not in request.body.decode() for request in got), user


async def _position_is(client: Client, path: str, cursor: str) -> bool:
    return bool((await client.get(path, headers=auth())).json()["position"] == cursor)


async def _disabled(client: Client, path: str) -> bool:
    return bool((await client.get(path, headers=auth())).json()["enabled"] is False)


async def _logged(client: Client, path: str, count: int) -> bool:
    return bool((await client.get(f"{path}/deliveries", headers=auth())).json()["totalCount"] >= count)


def _ok(receiver: Receiver, mark: str) -> list[Received]:
    return [request for request in receiver.requests_marked(mark) if request.target.startswith("/ok")]
