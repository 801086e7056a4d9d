"""One delivery attempt (webhooks.delivery), against real servers on 127.0.0.1, plain and TLS: what succeeds,
every way it fails, the address checked again at each connection (a name that resolves, now, to a refused address
fails before any connection), TLS's checks made on the URL's host name while the connection goes to the address
checked, and receivers that hang holding a connection each and nothing else."""

from __future__ import annotations

import asyncio
import json
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from petrecords.changes.change import change_wire
from petrecords.config import Settings
from petrecords.store.base import Change
from petrecords.webhooks.delivery import MAX_ANSWER_BYTES, Attempt, Sender, delivery_body
from petrecords.webhooks.signing import new_secret, verify
from petrecords.webhooks.targets import Resolver, target_problem
from tests.webhooks.receivers import HUGE_BYTES, Certificate, Receiver, certificate_for

SECONDS = 1.0
"""The delivery timeout of these tests: short, so that the hanging receivers cost little."""
SLACK_SECONDS = 1.5
"""What a busy machine may add to a timed attempt."""
NAME = "receiver.test"
"""The TLS receiver's name, which only the tests' own look-up resolves (to 127.0.0.1); .test is reserved."""
SECRET = new_secret()


def _settings(tmp_path: Path, *, allow_private: bool = True, seconds: float = SECONDS) -> Settings:
    return Settings(data_dir=tmp_path, webhooks_allow_private=allow_private, webhooks_timeout_seconds=seconds)


class Lookups:
    """A look-up of the tests' own: each name answers the addresses given to it, in turn (the last one again)."""

    def __init__(self, answers: dict[str, Sequence[Sequence[str]]]) -> None:
        self._answers = answers
        self.asked: list[str] = []

    def __call__(self, host: str, port: int) -> Sequence[str]:
        self.asked.append(host)
        answers = self._answers.get(host)
        if answers is None:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return answers[min(self.asked.count(host), len(answers)) - 1]


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    with Receiver().running() as running:
        yield running


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> Certificate:
    return certificate_for(tmp_path_factory.mktemp("tls"), NAME)


@pytest.fixture(scope="module")
def tls_receiver(certificate: Certificate) -> Iterator[Receiver]:
    with Receiver(certificate.server_context()).running() as running:
        yield running


@pytest.fixture(scope="module")
def resolver() -> Iterator[Resolver]:
    made = Resolver()
    yield made
    made.close()


@pytest.fixture
async def make_sender(tmp_path: Path) -> AsyncIterator[Callable[..., Sender]]:
    made: list[Sender] = []

    def make(resolver: Resolver, *, allow_private: bool = True, seconds: float = SECONDS, **options: Any) -> Sender:
        sender = Sender(_settings(tmp_path, allow_private=allow_private, seconds=seconds), resolver=resolver, **options)
        made.append(sender)
        return sender

    yield make
    for sender in made:
        await sender.aclose()


@pytest.fixture
def sender(make_sender: Callable[..., Sender], resolver: Resolver) -> Sender:
    return make_sender(resolver)


async def _deliver(sender: Sender, url: str, *, secrets: Sequence[str] = (SECRET,)) -> Attempt:
    return await sender.deliver(url=url, secrets=secrets, message_id="pets:0194:1", body=b'{"type":"pets.created"}')


def _mark() -> str:
    return uuid.uuid4().hex


class TestSucceeded:
    async def test_a_2xx_is_a_success_and_the_receiver_can_check_what_it_got(
        self, sender: Sender, receiver: Receiver
    ) -> None:
        mark = _mark()
        before = time.time()
        attempt = await _deliver(sender, f"http://127.0.0.1:{receiver.port}/ok?{mark}")
        assert attempt == Attempt(status_code=200, duration_ms=attempt.duration_ms, error=None)
        assert attempt.succeeded
        assert attempt.outcome == "succeeded"
        assert 0 <= attempt.duration_ms < SECONDS * 1000
        [received] = receiver.requests_marked(mark)
        assert received.method == "POST"
        assert received.headers["content-type"] == "application/json"
        assert received.headers["webhook-id"] == "pets:0194:1"
        assert before - 1 <= int(received.headers["webhook-timestamp"]) <= time.time()
        assert received.body == b'{"type":"pets.created"}'
        verify(SECRET, received.headers, received.body)

    async def test_during_a_rotation_each_secret_checks_the_delivery(self, sender: Sender, receiver: Receiver) -> None:
        mark, old = _mark(), new_secret()
        attempt = await _deliver(sender, f"http://127.0.0.1:{receiver.port}/ok?{mark}", secrets=(SECRET, old))
        assert attempt.succeeded
        [received] = receiver.requests_marked(mark)
        assert len(received.headers["webhook-signature"].split(" ")) == 2
        verify(SECRET, received.headers, received.body)
        verify(old, received.headers, received.body)

    async def test_an_answer_of_exactly_the_limit_is_read_whole(self, sender: Sender, receiver: Receiver) -> None:
        attempt = await _deliver(sender, f"http://127.0.0.1:{receiver.port}/sized/{MAX_ANSWER_BYTES}")
        assert attempt.succeeded, attempt

    @pytest.mark.parametrize("status", [201, 202, 204, 299])
    async def test_every_2xx_acknowledges(self, sender: Sender, receiver: Receiver, status: int) -> None:
        assert (await _deliver(sender, f"http://127.0.0.1:{receiver.port}/status/{status}")).succeeded


class TestFailed:
    async def test_a_500_is_a_failure(self, sender: Sender, receiver: Receiver) -> None:
        attempt = await _deliver(sender, f"http://127.0.0.1:{receiver.port}/status/500")
        assert (attempt.status_code, attempt.outcome, attempt.error) == (500, "failed", "answered 500")

    async def test_a_redirect_is_a_failure_and_is_not_followed(self, sender: Sender, receiver: Receiver) -> None:
        mark, before = _mark(), len(receiver.requests)
        attempt = await _deliver(sender, f"http://127.0.0.1:{receiver.port}/redirect?{mark}")
        assert (attempt.status_code, attempt.error) == (302, "redirect (302), not followed")
        assert [request.target for request in receiver.requests[before:]] == [f"/redirect?{mark}"]

    async def test_a_receiver_that_hangs_fails_at_the_timeout(self, sender: Sender, receiver: Receiver) -> None:
        attempt = await _deliver(sender, f"http://127.0.0.1:{receiver.port}/hang")
        assert (attempt.status_code, attempt.error) == (None, f"no complete answer within {SECONDS:g} s")
        assert SECONDS * 1000 <= attempt.duration_ms < (SECONDS + SLACK_SECONDS) * 1000

    async def test_the_timeout_covers_the_whole_answer(self, sender: Sender, receiver: Receiver) -> None:
        """Each byte of the answer comes well within the timeout; the whole answer does not."""
        attempt = await _deliver(sender, f"http://127.0.0.1:{receiver.port}/trickle")
        assert (attempt.status_code, attempt.error) == (200, f"no complete answer within {SECONDS:g} s")
        assert attempt.duration_ms < (SECONDS + SLACK_SECONDS) * 1000

    async def test_an_answer_over_64_kib_is_a_failure(self, sender: Sender, receiver: Receiver) -> None:
        assert HUGE_BYTES > 10 * MAX_ANSWER_BYTES
        attempt = await _deliver(sender, f"http://127.0.0.1:{receiver.port}/huge")
        assert (attempt.status_code, attempt.error) == (200, "answer over 64 KiB")
        attempt = await _deliver(sender, f"http://127.0.0.1:{receiver.port}/sized/{MAX_ANSWER_BYTES + 1}")
        assert (attempt.status_code, attempt.error) == (200, "answer over 64 KiB")

    async def test_a_reset_connection_is_a_failure(self, sender: Sender, receiver: Receiver) -> None:
        attempt = await _deliver(sender, f"http://127.0.0.1:{receiver.port}/reset")
        assert (attempt.status_code, attempt.error) == (None, "connection reset")

    async def test_a_refused_connection_is_a_failure(self, sender: Sender) -> None:
        with socket.socket() as unused:
            unused.bind(("127.0.0.1", 0))
            port = unused.getsockname()[1]
        attempt = await _deliver(sender, f"http://127.0.0.1:{port}/")
        assert (attempt.status_code, attempt.error) == (None, "connection refused")

    async def test_a_name_that_does_not_resolve_is_a_failure(self, sender: Sender) -> None:
        attempt = await _deliver(sender, "https://nowhere.invalid/")
        assert (attempt.status_code, attempt.error) == (None, "nowhere.invalid does not resolve")


class TestAddressCheckedAtEachConnection:
    async def test_a_name_that_resolves_to_loopback_fails_without_a_connection(
        self, make_sender: Callable[..., Sender], tls_receiver: Receiver
    ) -> None:
        sender = make_sender(Resolver(lookup=Lookups({NAME: [["127.0.0.1"]]})), allow_private=False)
        connections = tls_receiver.connections
        attempt = await _deliver(sender, f"https://{NAME}:{tls_receiver.port}/ok")
        assert (attempt.status_code, attempt.error) == (None, f"address refused: {NAME} resolves to a loopback address")
        assert tls_receiver.connections == connections

    async def test_localhost_is_refused_as_the_system_resolves_it(
        self, make_sender: Callable[..., Sender], resolver: Resolver, tls_receiver: Receiver
    ) -> None:
        connections = tls_receiver.connections
        attempt = await _deliver(make_sender(resolver, allow_private=False), f"https://localhost:{tls_receiver.port}/")
        assert attempt.error is not None
        assert attempt.error.startswith("address refused: localhost resolves to a loopback address")
        assert tls_receiver.connections == connections

    async def test_a_name_rebound_to_loopback_after_its_check_is_refused(
        self, make_sender: Callable[..., Sender], tls_receiver: Receiver
    ) -> None:
        """DNS rebinding: public when the URL is written, 127.0.0.1 when the delivery connects."""
        resolver = Resolver(lookup=Lookups({NAME: [["93.184.215.14"], ["127.0.0.1"]]}))
        url = f"https://{NAME}:{tls_receiver.port}/ok"
        assert await target_problem(url, allow_private=False, resolver=resolver) is None
        connections = tls_receiver.connections
        attempt = await _deliver(make_sender(resolver, allow_private=False), url)
        assert attempt.error == f"address refused: {NAME} resolves to a loopback address"
        assert tls_receiver.connections == connections

    async def test_one_refused_address_among_public_ones_refuses_the_name(
        self, make_sender: Callable[..., Sender], tls_receiver: Receiver
    ) -> None:
        resolver = Resolver(lookup=Lookups({NAME: [["93.184.215.14", "169.254.169.254"]]}))
        attempt = await _deliver(make_sender(resolver, allow_private=False), f"https://{NAME}:{tls_receiver.port}/")
        assert attempt.error == f"address refused: {NAME} resolves to a link-local address"

    async def test_plain_http_is_refused_once_private_targets_are_no_longer_allowed(
        self, make_sender: Callable[..., Sender], resolver: Resolver, receiver: Receiver
    ) -> None:
        """A URL written while PETRECORDS_WEBHOOKS_ALLOW_PRIVATE was true, delivered after it was turned off."""
        connections = receiver.connections
        attempt = await _deliver(make_sender(resolver, allow_private=False), f"http://127.0.0.1:{receiver.port}/ok")
        assert attempt.error == "URL refused: it must use https: plain http is refused"
        assert receiver.connections == connections


class TestTls:
    async def test_the_connection_goes_to_the_address_checked_and_tls_checks_the_name(
        self, make_sender: Callable[..., Sender], certificate: Certificate, tls_receiver: Receiver
    ) -> None:
        """The system cannot resolve receiver.test: only the checked address was connected to; and the certificate
        names receiver.test alone, no address: it was checked against the URL's name."""
        lookups = Lookups({NAME: [["127.0.0.1"]]})
        sender = make_sender(Resolver(lookup=lookups), verify=certificate.trusted_by_a_client())
        mark = _mark()
        attempt = await _deliver(sender, f"https://{NAME}:{tls_receiver.port}/ok?{mark}")
        assert attempt.succeeded, attempt
        assert lookups.asked == [NAME]
        [received] = tls_receiver.requests_marked(mark)
        assert received.headers["host"] == f"{NAME}:{tls_receiver.port}"
        verify(SECRET, received.headers, received.body)

    async def test_a_certificate_for_another_name_is_refused(
        self, make_sender: Callable[..., Sender], certificate: Certificate, tls_receiver: Receiver
    ) -> None:
        resolver = Resolver(lookup=Lookups({"other.test": [["127.0.0.1"]]}))
        sender = make_sender(resolver, verify=certificate.trusted_by_a_client())
        attempt = await _deliver(sender, f"https://other.test:{tls_receiver.port}/ok")
        assert attempt.status_code is None
        assert attempt.error is not None
        assert attempt.error.startswith("TLS certificate refused: Hostname mismatch")

    async def test_an_untrusted_certificate_is_refused(
        self, make_sender: Callable[..., Sender], tls_receiver: Receiver
    ) -> None:
        sender = make_sender(Resolver(lookup=Lookups({NAME: [["127.0.0.1"]]})))  # the default trust: certifi's
        attempt = await _deliver(sender, f"https://{NAME}:{tls_receiver.port}/ok")
        assert attempt.error is not None
        assert attempt.error.startswith("TLS certificate refused: unable to get local issuer certificate")


class TestSlowReceivers:
    async def test_hanging_receivers_hold_a_connection_each_and_never_the_event_loop(
        self, make_sender: Callable[..., Sender], resolver: Resolver, receiver: Receiver
    ) -> None:
        """Twenty receivers that hang, at once: each holds its own connection until the timeout, while a delivery to
        a receiver that answers goes through at once and the event loop is never held up."""
        sender = make_sender(resolver)
        connections = receiver.connections
        longest_lag = 0.0
        hanging = [
            asyncio.create_task(_deliver(sender, f"http://127.0.0.1:{receiver.port}/hang?{_mark()}")) for _ in range(20)
        ]

        async def tick() -> None:
            nonlocal longest_lag
            while True:
                before = time.monotonic()
                await asyncio.sleep(0.01)
                longest_lag = max(longest_lag, time.monotonic() - before - 0.01)

        ticker = asyncio.create_task(tick())
        try:
            await asyncio.sleep(SECONDS / 4)
            started = time.monotonic()
            assert (await _deliver(sender, f"http://127.0.0.1:{receiver.port}/ok")).succeeded
            answered_in = time.monotonic() - started
            attempts = await asyncio.gather(*hanging)
        finally:
            ticker.cancel()
        assert answered_in < SECONDS / 2
        assert {attempt.error for attempt in attempts} == {f"no complete answer within {SECONDS:g} s"}
        assert receiver.connections - connections == 21
        assert longest_lag < SECONDS / 2


class TestBody:
    def test_the_body_is_the_change_as_the_feed_shows_it(self) -> None:
        change = Change(
            cursor=(7, 3),
            resource="pet-vaccination",
            record_id=uuid.UUID("0194c3a8-7f00-7000-8000-000000000001"),
            action="replaced",
            version=2,
            at=1_764_000_000_123,
            by="alice@example.com",
            owner_before="alice@example.com",
            owner_after="alice@example.com",
            record=b'{"id":"0194c3a8-7f00-7000-8000-000000000001","dueAt":null}',
        )
        body = json.loads(delivery_body(change))
        assert list(body) == ["type", "timestamp", "data"]
        assert body["type"] == "pet-vaccination.replaced"
        assert body["timestamp"] == "2025-11-24T16:00:00.123Z"
        assert body["data"] == json.loads(json.dumps({**change_wire(change), "record": json.loads(change.record)}))
        assert b" " not in delivery_body(change)
