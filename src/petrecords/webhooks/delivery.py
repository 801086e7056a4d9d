"""One delivery attempt: `POST url` of a change, signed, over httpx, and what came of it.

An attempt succeeds when the receiver answers `2xx`, with at most 64 KiB of answer, within
PETRECORDS_WEBHOOKS_TIMEOUT_SECONDS of its start: connecting, sending and the whole answer. Anything else is a
failure: another status, a redirect (never followed), a longer answer (reading stops there), a timeout, a connection
refused or reset, a TLS certificate that does not check, an address that the target rule refuses.

The address is checked at each connection, by the network backend under httpx: it resolves the host, checks every
address, and connects to one of the addresses it checked, never to a name resolved again, so that a name that
resolved to a public address when it was checked and to 127.0.0.1 a moment later (DNS rebinding) still reaches
only the public one. TLS is started on that connection with the URL's host name, so that SNI and the certificate's
check are about the name, as they are with a plain connection.

Each attempt holds one connection, for at most the timeout: a receiver that hangs costs that connection and
nothing else; there is no limit on connections at once that many slow receivers could use up."""

from __future__ import annotations

import asyncio
import functools
import ssl
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import httpcore
import httpx
import msgspec

from petrecords.changes.change import change_wire
from petrecords.config import Settings
from petrecords.store.base import Change
from petrecords.webhooks.signing import signed_headers
from petrecords.webhooks.targets import HostUnresolved, Resolver, TargetProblem, url_problem

MAX_ANSWER_BYTES = 64 * 1024
"""An answer longer than this is a failure; no more of it is read."""
MAX_ERROR_LENGTH = 200
USER_AGENT = "PetRecords-Webhooks/1"
KEPT_CONNECTIONS = 100
"""Idle connections kept open for the next delivery to the same receiver, across all webhooks."""
KEEP_ALIVE_SECONDS = 15.0

FAILURES: tuple[type[BaseException], ...] = (httpx.HTTPError, httpx.InvalidURL, TargetProblem, OSError)
"""What an attempt may end with besides an answer (OSError includes TimeoutError and TLS's errors)."""


@dataclass(frozen=True)
class Attempt:
    """What came of one attempt, as the deliveries log keeps it."""

    status_code: int | None
    """The receiver's status, if it answered."""
    duration_ms: int
    error: str | None
    """Why it failed, in a few words (never the receiver's answer); None when it succeeded."""

    @property
    def succeeded(self) -> bool:
        return self.error is None

    @property
    def outcome(self) -> Literal["succeeded", "failed"]:
        return "succeeded" if self.error is None else "failed"


def delivery_body(change: Change) -> bytes:
    """The body of a change's delivery: `{"type": "{resource}.{action}", "timestamp": its "at", "data": the change
    as the feed shows it}`, as compact JSON. The body is signed as these bytes, and sent as them on every attempt."""
    wire = change_wire(change)
    return msgspec.json.encode({"type": f"{change.resource}.{change.action}", "timestamp": wire["at"], "data": wire})


class _CheckedNetwork(httpcore.AsyncNetworkBackend):
    """httpcore's network backend, connecting only to addresses it has just resolved and checked."""

    def __init__(self, resolver: Resolver, *, allow_private: bool, within: float) -> None:
        self._resolver = resolver
        self._allow_private = allow_private
        self._within = within
        self._network = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's name for the connect timeout
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await self._resolver.checked(
            host, port, allow_private=self._allow_private, within=self._within if timeout is None else timeout
        )
        failure: httpcore.ConnectError | None = None
        for address in addresses:
            try:
                return await self._network.connect_tcp(
                    str(address), port, timeout=timeout, local_address=local_address, socket_options=socket_options
                )
            except httpcore.ConnectError as exc:
                failure = exc  # the next address may answer
        assert failure is not None  # noqa: S101 - a host has at least one address
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's name
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("webhooks are delivered over TCP only")

    async def sleep(self, seconds: float) -> None:
        await self._network.sleep(seconds)


class _CheckedTransport(httpx.AsyncHTTPTransport):
    """httpx's own transport (its mapping of httpcore's errors and streams), over a pool whose connections are
    made by the checked network: httpx takes no network backend of its own."""

    def __init__(self, network: _CheckedNetwork, *, verify: ssl.SSLContext) -> None:
        super().__init__(verify=verify, trust_env=False)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=verify,
            max_connections=None,
            max_keepalive_connections=KEPT_CONNECTIONS,
            keepalive_expiry=KEEP_ALIVE_SECONDS,
            network_backend=network,
        )


@functools.cache
def _trusted() -> ssl.SSLContext:
    """The default certificates trusted, loaded once per process (a tenth of the rest of an app's start) and shared
    by every Sender: an SSLContext may serve many connections at once."""
    return httpx.create_ssl_context()


class Sender:
    """Makes delivery attempts, for every webhook of a process, over one pool of connections."""

    def __init__(self, settings: Settings, *, resolver: Resolver, verify: ssl.SSLContext | None = None) -> None:
        """`verify`: the certificates trusted (default: the certifi bundle, or SSL_CERT_FILE's)."""
        self.seconds = settings.webhooks_timeout_seconds
        self.allow_private = settings.webhooks_allow_private
        network = _CheckedNetwork(resolver, allow_private=self.allow_private, within=self.seconds)
        self._client = httpx.AsyncClient(
            transport=_CheckedTransport(network, verify=_trusted() if verify is None else verify),
            timeout=httpx.Timeout(self.seconds),
            follow_redirects=False,
            trust_env=False,  # no proxy or .netrc from the environment: a proxy would connect where it likes
            headers={"User-Agent": USER_AGENT},
        )

    async def deliver(self, *, url: str, secrets: Sequence[str], message_id: str, body: bytes) -> Attempt:
        """One attempt to deliver `body`, signed with each of `secrets` (the current one first)."""
        headers = {
            "Content-Type": "application/json",
            **signed_headers(secrets, message_id=message_id, timestamp=int(time.time()), body=body),
        }
        started = time.monotonic()
        status: int | None = None
        # A URL written while PETRECORDS_WEBHOOKS_ALLOW_PRIVATE was on is refused once it is off.
        problem = _url_problem(url, allow_private=self.allow_private)
        if problem is not None:
            error: str | None = f"URL refused: it {problem.rstrip('.')}"
        else:
            try:
                async with asyncio.timeout(self.seconds):
                    async with self._client.stream("POST", url, content=body, headers=headers) as answer:
                        status = answer.status_code
                        error = await _judged(answer)
            except FAILURES as exc:
                error = _error_of(exc, self.seconds)
        duration_ms = round((time.monotonic() - started) * 1000)
        return Attempt(status_code=status, duration_ms=duration_ms, error=error and error[:MAX_ERROR_LENGTH])

    async def aclose(self) -> None:
        await self._client.aclose()


@functools.lru_cache(maxsize=1024)
def _url_problem(url: str, *, allow_private: bool) -> str | None:
    """url_problem, read once for each URL a process delivers to rather than at each attempt (a webhook's URL is the
    same for every change it is sent)."""
    return url_problem(url, allow_private=allow_private)


async def _judged(answer: httpx.Response) -> str | None:
    """Why an answer is a failure, or None: its body is read only for a 2xx, up to the limit."""
    status = answer.status_code
    if 300 <= status < 400:
        return f"redirect ({status}), not followed"
    if not 200 <= status < 300:
        return f"answered {status}"
    read = 0
    async for chunk in answer.aiter_raw():
        read += len(chunk)
        if read > MAX_ANSWER_BYTES:
            return f"answer over {MAX_ANSWER_BYTES // 1024} KiB"
    return None


def _causes(exc: BaseException) -> Iterator[BaseException]:
    seen: BaseException | None = exc
    while seen is not None:
        yield seen
        seen = seen.__cause__ or seen.__context__


def _error_of(exc: BaseException, seconds: float) -> str:
    """A failure in a few words, for the deliveries log: never a message that could quote the receiver."""
    if isinstance(exc, HostUnresolved):
        return exc.reason
    if isinstance(exc, TargetProblem):
        return f"address refused: {exc.reason}"
    if isinstance(exc, TimeoutError | httpx.TimeoutException):
        return f"no complete answer within {seconds:g} s"
    for cause in _causes(exc):
        if isinstance(cause, ssl.SSLCertVerificationError):
            return f"TLS certificate refused: {cause.verify_message}"
        if isinstance(cause, ssl.SSLError):
            return f"TLS failed: {cause.reason or 'handshake'}"
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cause, ConnectionResetError | BrokenPipeError):
            return "connection reset"
    if isinstance(exc, httpx.ConnectError):
        return "could not connect"
    if isinstance(exc, httpx.RemoteProtocolError):
        return "no valid HTTP answer (the connection closed, or the answer was malformed)"
    return f"network error ({type(exc).__name__})"
