"""The `/v1/webhooks` resource (contract, section 17), on both databases: its fields and their rules, who may read
and write one, at most 20 for an owner, the secret shown once (and by a rotation) and nowhere else, `position`, and
the deliveries log's endpoint. Delivery itself: test_deliverer.py."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from petrecords.app import open_store
from petrecords.config import Settings
from petrecords.webhooks.resource import MOST_PER_OWNER
from tests.support import ADMIN, ALICE, BOB, assert_error, auth, create

Client = AsyncTestClient[Any]
WEBHOOKS = "/v1/webhooks"
PUBLIC_URL = "https://93.184.215.14/petrecords"
"""A public address, written as one (no look-up); the webhooks that name it are created disabled, so that nothing is
ever sent there."""
FIELDS = {
    "id",
    "createdAt",
    "createdBy",
    "modifiedAt",
    "modifiedBy",
    "ownerId",
    "url",
    "events",
    "enabled",
    "disabledReason",
    "position",
}


def hook_body(**extra: Any) -> dict[str, Any]:
    return {"url": PUBLIC_URL, "enabled": False, **extra}


async def create_hook(client: Client, user: str = ALICE, *, admin: bool = False, **extra: Any) -> dict[str, Any]:
    response = await client.post(WEBHOOKS, json=hook_body(**extra), headers=auth(user, admin=admin))
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def _is_a_secret(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("whsec_") and len(base64.b64decode(value[6:])) == 32


class TestCreateWebhook:
    async def test_the_secret_is_shown_once_and_nowhere_else(self, client: Client) -> None:
        created = await create_hook(client)
        assert set(created) == FIELDS | {"secret"}
        assert _is_a_secret(created["secret"])
        assert created["ownerId"] == ALICE
        assert created["events"] == ["*"]
        assert created["enabled"] is False
        assert created["disabledReason"] is None
        assert created["position"] is None
        secret = created["secret"]
        shown = [
            await client.get(f"{WEBHOOKS}/{created['id']}", headers=auth()),
            await client.get(WEBHOOKS, headers=auth()),
            await client.get(f"{WEBHOOKS}/{created['id']}/history", headers=auth()),
            await client.get("/v1/changes", headers=auth()),
            await client.get("/v1/changes", headers=auth(ADMIN, admin=True)),
        ]
        for response in shown:
            assert response.status_code == 200, response.text
            assert secret not in response.text
            assert "secret" not in response.text
        got = shown[0].json()
        assert set(got) == FIELDS
        assert shown[3].json()["items"][-1]["record"] == got

    async def test_an_idempotent_replay_shows_the_same_secret(self, client: Client) -> None:
        headers = {**auth(), "Idempotency-Key": "hook-1"}
        first = await client.post(WEBHOOKS, json=hook_body(), headers=headers)
        again = await client.post(WEBHOOKS, json=hook_body(), headers=headers)
        assert first.status_code == again.status_code == 201
        assert again.headers["Idempotent-Replayed"] == "true"
        assert again.json() == first.json()
        assert _is_a_secret(again.json()["secret"])

    async def test_the_owner_is_the_caller_and_cannot_be_set(self, client: Client) -> None:
        created = await create_hook(client, ADMIN, admin=True, ownerId=BOB)
        assert created["ownerId"] == ADMIN

    async def test_at_most_twenty_for_an_owner(self, client: Client) -> None:
        for _ in range(MOST_PER_OWNER):
            await create_hook(client)
        refused = await client.post(WEBHOOKS, json=hook_body(), headers=auth())
        body = assert_error(refused, 400, 994)
        assert "ownerId" in body["errors"]
        await create_hook(client, BOB)  # another owner's room is their own

    @pytest.mark.parametrize(
        ("url", "says"),
        [
            ("http://93.184.215.14/hooks", "https"),
            ("https://127.0.0.1/hooks", "loopback"),
            ("https://169.254.169.254/latest/meta-data", "link-local"),
            ("https://10.1.2.3/hooks", "private"),
            ("https://[::1]/hooks", "loopback"),
            ("https://224.0.0.1/hooks", "multicast"),
            ("https://0.0.0.0/hooks", "unspecified"),
            ("https://user:pw@93.184.215.14/hooks", "user information"),
            ("https://93.184.215.14/hooks#part", "fragment"),
            ("https://93.184.215.14/" + "a" * 2000, "2000"),
            ("hooks.example.com/x", "https URL"),
            (42, "https URL"),
        ],
    )
    async def test_a_url_that_is_refused_is_400_naming_url(self, client: Client, url: Any, says: str) -> None:
        refused = await client.post(WEBHOOKS, json=hook_body(url=url), headers=auth())
        body = assert_error(refused, 400, 994)
        assert list(body["errors"]) == ["url"]
        assert says in body["errors"]["url"][0]

    async def test_a_name_that_resolves_to_a_refused_address_is_400(self, client: Client) -> None:
        refused = await client.post(WEBHOOKS, json=hook_body(url="https://localhost/hooks"), headers=auth())
        body = assert_error(refused, 400, 994)
        assert body["errors"]["url"] == ["must name a public host: localhost resolves to a loopback address."]

    async def test_a_name_that_resolves_to_nothing_now_is_taken_and_checked_at_each_delivery(
        self, client: Client
    ) -> None:
        created = await create_hook(client, url="https://hooks.nowhere.invalid/x")
        assert created["url"] == "https://hooks.nowhere.invalid/x"

    async def test_private_addresses_and_http_are_allowed_when_the_setting_says(
        self, make_client: Callable[[Settings], Client], make_settings: Callable[..., Settings]
    ) -> None:
        async with make_client(make_settings(webhooks_allow_private=True)) as client:
            created = await create_hook(client, url="http://127.0.0.1:9/hooks")
            assert created["url"] == "http://127.0.0.1:9/hooks"

    @pytest.mark.parametrize("events", [[], ["pets"], ["pets.adopted"], ["cats.*"], "*", [1], None])
    async def test_events_that_are_no_events_are_400_naming_events(self, client: Client, events: Any) -> None:
        refused = await client.post(WEBHOOKS, json=hook_body(events=events), headers=auth())
        if events is None:  # null: not given
            assert refused.status_code == 201
            assert refused.json()["events"] == ["*"]
            return
        assert list(assert_error(refused, 400, 994)["errors"]) == ["events"]

    async def test_events_are_kept_as_given(self, client: Client) -> None:
        events = ["pets.*", "pet-vaccination.overdue", "webhooks.replaced"]
        created = await create_hook(client, events=events)
        assert created["events"] == events


class TestWhoMayReadAndWrite:
    async def test_only_its_owner_and_an_admin(self, client: Client) -> None:
        hook = await create_hook(client)
        path = f"{WEBHOOKS}/{hook['id']}"
        for response in (
            await client.get(path, headers=auth(BOB)),
            await client.patch(path, json={"enabled": False}, headers=auth(BOB)),
            await client.put(path, json=hook_body(), headers=auth(BOB)),
            await client.delete(path, headers=auth(BOB)),
            await client.get(f"{path}/history", headers=auth(BOB)),
            await client.get(f"{path}/deliveries", headers=auth(BOB)),
            await client.post(f"{path}/secret", headers=auth(BOB)),
        ):
            assert_error(response, 404, 995)
        assert (await client.get(WEBHOOKS, headers=auth(BOB))).json()["totalCount"] == 0
        assert (await client.get(path, headers=auth(ADMIN, admin=True))).status_code == 200
        patched = await client.patch(path, json={"events": ["pets.*"]}, headers=auth(ADMIN, admin=True))
        assert patched.status_code == 200
        assert patched.json()["ownerId"] == ALICE
        assert (await client.delete(path, headers=auth())).status_code == 200
        assert_error(await client.get(path, headers=auth()), 404, 995)

    async def test_the_changes_of_a_webhook_are_its_owners(self, client: Client) -> None:
        hook = await create_hook(client)
        mine = (await client.get("/v1/changes?resource=webhooks", headers=auth())).json()["items"]
        theirs = (await client.get("/v1/changes?resource=webhooks", headers=auth(BOB))).json()["items"]
        assert [change["id"] for change in mine] == [hook["id"]]
        assert theirs == []


class TestWriteWebhook:
    async def test_disabled_reason_is_the_services_and_a_client_cannot_set_it(self, client: Client) -> None:
        hook = await create_hook(client)
        path = f"{WEBHOOKS}/{hook['id']}"
        patched = await client.patch(path, json={"disabledReason": "mine", "enabled": True}, headers=auth())
        assert patched.status_code == 200, patched.text
        assert patched.json()["disabledReason"] is None
        assert patched.json()["enabled"] is True
        again = await client.patch(path, json={"enabled": False}, headers=auth())
        assert again.json()["enabled"] is False

    async def test_the_create_s_answer_may_be_sent_back_and_its_secret_is_ignored(self, client: Client) -> None:
        hook = await create_hook(client)
        path = f"{WEBHOOKS}/{hook['id']}"
        replaced = await client.put(path, json={**hook, "secret": "whsec_AAAA"}, headers=auth())
        assert replaced.status_code == 200, replaced.text
        assert "secret" not in replaced.json()
        rotated = (await client.post(f"{path}/secret", headers=auth())).json()
        assert rotated["secret"] != hook["secret"]

    async def test_a_url_written_is_checked_as_on_create(self, client: Client) -> None:
        hook = await create_hook(client)
        path = f"{WEBHOOKS}/{hook['id']}"
        refused = await client.patch(path, json={"url": "https://127.0.0.1/x"}, headers=auth())
        assert list(assert_error(refused, 400, 994)["errors"]) == ["url"]
        refused = await client.put(path, json=hook_body(url="http://93.184.215.14/x"), headers=auth())
        assert list(assert_error(refused, 400, 994)["errors"]) == ["url"]

    async def test_position_takes_a_cursor_the_feed_handed_out(self, client: Client) -> None:
        await create(client)
        hook = await create_hook(client)
        path = f"{WEBHOOKS}/{hook['id']}"
        first = (await client.get("/v1/changes", headers=auth())).json()["items"][0]["cursor"]
        patched = await client.patch(path, json={"position": first}, headers=auth())
        assert patched.status_code == 200, patched.text
        assert patched.json()["position"] == first
        for wrong in ("yesterday", "ffffff-0", 7):
            refused = await client.patch(path, json={"position": wrong}, headers=auth())
            assert list(assert_error(refused, 400, 994)["errors"]) == ["position"]
        created = await create_hook(client, position=first)
        assert created["position"] == first
        cleared = await client.patch(path, json={"position": None}, headers=auth())
        assert cleared.json()["position"] is None

    async def test_a_cursor_older_than_the_kept_changes_is_400(self, client: Client, settings: Settings) -> None:
        await create(client)
        old = (await client.get("/v1/changes", headers=auth())).json()["items"][0]["cursor"]
        hook = await create_hook(client)
        store = open_store(settings)  # retention, as another instance runs it
        try:
            async with store.transaction(write=True) as tx:
                await tx.purge_changes(before_ms=2**62, limit=1000)
        finally:
            await store.close()
        refused = await client.patch(f"{WEBHOOKS}/{hook['id']}", json={"position": old}, headers=auth())
        body = assert_error(refused, 400, 994)
        assert "older than the kept changes" in body["errors"]["position"][0]


class TestNewSecret:
    async def test_a_new_secret_is_shown_once_and_is_a_write(self, client: Client) -> None:
        hook = await create_hook(client)
        path = f"{WEBHOOKS}/{hook['id']}"
        before = await client.get(path, headers=auth())
        rotated = await client.post(f"{path}/secret", headers=auth())
        assert rotated.status_code == 200, rotated.text
        body = rotated.json()
        assert set(body) == FIELDS | {"secret"}
        assert _is_a_secret(body["secret"])
        assert body["secret"] != hook["secret"]
        assert rotated.headers["ETag"] != before.headers["ETag"]
        after = await client.get(path, headers=auth())
        assert after.headers["ETag"] == rotated.headers["ETag"]
        history = (await client.get(f"{path}/history", headers=auth())).json()["items"]
        assert [change["action"] for change in history] == ["created", "replaced"]
        assert body["secret"] not in after.text
        assert body["secret"] not in (await client.get(f"{path}/history", headers=auth())).text

    async def test_if_match_is_honoured(self, client: Client) -> None:
        hook = await create_hook(client)
        stale = await client.post(f"{WEBHOOKS}/{hook['id']}/secret", headers={**auth(), "If-Match": '"nope"'})
        assert_error(stale, 412, 992)

    async def test_a_retry_with_the_same_idempotency_key_shows_the_same_secret(self, client: Client) -> None:
        """Contract section 3: every POST honours Idempotency-Key; a retried rotation must not make a third secret
        that the client never saw."""
        hook = await create_hook(client)
        path = f"{WEBHOOKS}/{hook['id']}/secret"
        first = await client.post(path, headers={**auth(), "Idempotency-Key": "rotate-1"})
        again = await client.post(path, headers={**auth(), "Idempotency-Key": "rotate-1"})

        assert (first.status_code, again.status_code) == (200, 200), again.text
        assert again.headers.get("Idempotent-Replayed") == "true"
        assert first.headers.get("Idempotent-Replayed") is None
        assert again.json() == first.json()
        assert again.headers["ETag"] == first.headers["ETag"]
        history = (await client.get(f"{WEBHOOKS}/{hook['id']}/history", headers=auth())).json()
        assert [change["action"] for change in history["items"]].count("replaced") == 1

    async def test_the_key_of_another_request_is_422_and_a_malformed_one_400(self, client: Client) -> None:
        hook, other = await create_hook(client), await create_hook(client)
        created = await client.post(WEBHOOKS, json=hook_body(), headers={**auth(), "Idempotency-Key": "made-it"})
        assert created.status_code == 201, created.text
        rotated = await client.post(f"{WEBHOOKS}/{hook['id']}/secret", headers={**auth(), "Idempotency-Key": "k-1"})
        assert rotated.status_code == 200, rotated.text

        assert_error(
            await client.post(f"{WEBHOOKS}/{other['id']}/secret", headers={**auth(), "Idempotency-Key": "k-1"}),
            422,
            990,
        )
        assert_error(
            await client.post(f"{WEBHOOKS}/{hook['id']}/secret", headers={**auth(), "Idempotency-Key": "made-it"}),
            422,
            990,
        )
        assert_error(
            await client.post(WEBHOOKS, json=hook_body(), headers={**auth(), "Idempotency-Key": "k-1"}), 422, 990
        )
        malformed = await client.post(
            f"{WEBHOOKS}/{hook['id']}/secret", headers={**auth(), "Idempotency-Key": "k" * 256}
        )
        assert_error(malformed, 400, 994)

    async def test_a_failed_rotation_leaves_its_key_free(self, client: Client) -> None:
        hook = await create_hook(client)
        path = f"{WEBHOOKS}/{hook['id']}/secret"
        stale = await client.post(path, headers={**auth(), "Idempotency-Key": "k-2", "If-Match": '"nope"'})
        assert_error(stale, 412, 992)

        again = await client.post(path, headers={**auth(), "Idempotency-Key": "k-2"})

        assert again.status_code == 200, again.text
        assert again.headers.get("Idempotent-Replayed") is None


class TestDeliveriesLog:
    async def test_a_new_webhook_has_no_attempts(self, client: Client) -> None:
        hook = await create_hook(client)
        page = await client.get(f"{WEBHOOKS}/{hook['id']}/deliveries?pageSize=5", headers=auth())
        assert page.status_code == 200, page.text
        assert page.json() == {
            "items": [],
            "pageIndex": 1,
            "pageSize": 5,
            "totalPages": 0,
            "totalCount": 0,
            "hasPreviousPage": False,
            "hasNextPage": False,
        }
        refused = await client.get(f"{WEBHOOKS}/{hook['id']}/deliveries?limit=5", headers=auth())
        assert_error(refused, 400, 994)
