"""The HTTP edge of a real `petrecords serve`, over raw sockets: the deadlines of contract section 7, the
requests the HTTP server refuses before the service runs (docs/explanation/slow-clients.md, "What the HTTP
server answers itself"), and the Server header.

The server runs with deadlines of one second so that each can be seen to act; every wait below is for
something the server does (an answer, a closed connection), with a generous bound only for failing.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import pytest

from tests.e2e.servers import Server, running_server

pytestmark = pytest.mark.slow

ALICE = "alice@example.com"
DEADLINE_SECONDS = 1.0
# Only a server that never acts reaches this.
GIVE_UP_SECONDS = 30.0
TRICKLE_SECONDS = 0.25


@dataclass
class Answer:
    status: int
    reason: str
    headers: dict[str, list[str]] = field(default_factory=dict)
    body: bytes = b""

    def header(self, name: str) -> str | None:
        values = self.headers.get(name)
        return values[0] if values else None


def _parse(data: bytes) -> tuple[Answer, int] | None:
    """The answer at the start of `data` and its length, once it has arrived whole."""
    head, separator, rest = data.partition(b"\r\n\r\n")
    if not separator:
        return None
    status_line, *lines = head.decode("latin-1").split("\r\n")
    _, status, reason = status_line.split(" ", 2)
    answer = Answer(int(status), reason)
    for line in lines:
        name, _, value = line.partition(":")
        answer.headers.setdefault(name.strip().lower(), []).append(value.strip())
    length = int(answer.header("content-length") or 0)
    if len(rest) < length:
        return None
    answer.body = rest[:length]
    return answer, len(head) + 4 + length


class Connection:
    """One raw client connection to the server."""

    def __init__(self, server: Server) -> None:
        address = urlsplit(server.url)
        self.socket = socket.create_connection((address.hostname, address.port), timeout=GIVE_UP_SECONDS)
        self._pending = b""

    def send(self, data: bytes) -> None:
        # A server that refuses a request part way may close before it has all of it.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.socket.sendall(data)

    def _receive(self, seconds: float) -> bytes | None:
        """What arrives within `seconds`: bytes, b"" when the server closed, None when nothing came."""
        readable, _, _ = select.select([self.socket], [], [], seconds)
        if not readable:
            return None
        try:
            return self.socket.recv(65536)
        except ConnectionResetError:
            return b""

    def answer(self, *, trickle: bytes = b"") -> Answer:
        """The next answer; meanwhile one byte of `trickle` every TRICKLE_SECONDS, if given."""
        deadline = time.monotonic() + GIVE_UP_SECONDS
        while (parsed := _parse(self._pending)) is None:
            if time.monotonic() > deadline:
                pytest.fail(f"no answer within {GIVE_UP_SECONDS} s; received {self._pending[:200]!r}")
            data = self._receive(TRICKLE_SECONDS if trickle else GIVE_UP_SECONDS)
            if data is None:
                self.send(trickle[:1])
                trickle = trickle[1:] or trickle
                continue
            if not data:
                pytest.fail(f"the connection closed before a whole answer; received {self._pending[:200]!r}")
            self._pending += data
        answer, length = parsed
        self._pending = self._pending[length:]
        return answer

    def closed(self, *, trickle: bytes = b"") -> bytes:
        """Wait until the server closes the connection (sending one byte of `trickle` every TRICKLE_SECONDS,
        if given); what it sent before closing that was not read as an answer."""
        deadline = time.monotonic() + GIVE_UP_SECONDS
        while True:
            if time.monotonic() > deadline:
                pytest.fail(f"the connection was still open after {GIVE_UP_SECONDS} s")
            data = self._receive(TRICKLE_SECONDS if trickle else GIVE_UP_SECONDS)
            if data is None:
                self.send(trickle[:1])
                trickle = trickle[1:] or trickle
                continue
            if not data:
                return self._pending
            self._pending += data

    def close(self) -> None:
        self.socket.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    settings = {
        "PETRECORDS_BODY_TIMEOUT_SECONDS": str(DEADLINE_SECONDS),
        "PETRECORDS_IDLE_TIMEOUT_SECONDS": str(DEADLINE_SECONDS),
    }
    with running_server(
        tmp_path_factory.mktemp("edge") / "data", workers=2, users=[ALICE], settings=settings
    ) as started:
        yield started


@pytest.fixture
def connection(server: Server) -> Iterator[Connection]:
    opened = Connection(server)
    yield opened
    opened.close()


def _post_head(server: Server, length: int = 1000) -> bytes:
    return (
        f"POST /v1/pets HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {server.tokens[ALICE]}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def _assert_service_error(answer: Answer, status: int, code: int) -> None:
    assert (answer.status, answer.header("content-type")) == (status, "application/json"), answer
    body = json.loads(answer.body)
    assert body["code"] == code
    assert set(body) <= {"code", "message", "errors"}
    assert answer.header("x-request-id")
    assert answer.header("x-content-type-options") == "nosniff"
    assert answer.headers["server"] == ["petrecords"]


class TestBodyDeadline:
    def test_a_stalled_body_is_408_and_the_connection_is_closed(self, server: Server, connection: Connection) -> None:
        started = time.monotonic()
        connection.send(_post_head(server) + b'{"name": "Re')

        answer = connection.answer()
        elapsed = time.monotonic() - started
        after = connection.closed()

        _assert_service_error(answer, 408, 984)
        assert answer.header("connection") == "close"
        assert answer.header("cache-control") == "no-store"
        assert elapsed >= DEADLINE_SECONDS
        assert after == b""

    def test_a_trickling_body_is_408_although_bytes_keep_coming(self, server: Server, connection: Connection) -> None:
        """The deadline is for the whole body, not for each piece of it."""
        connection.send(_post_head(server) + b"{")

        answer = connection.answer(trickle=b" ")

        _assert_service_error(answer, 408, 984)
        assert connection.closed() == b""

    def test_a_body_in_time_is_read(self, server: Server, connection: Connection) -> None:
        body = b'{"name": "Rex", "petType": "Dog"}'
        connection.send(_post_head(server, len(body)) + body)

        assert connection.answer().status == 201


class TestHeadAndIdleDeadline:
    def test_a_connection_that_sends_nothing_is_closed(self, server: Server) -> None:
        # Taken before connecting: the server's clock for this connection can only start later.
        started = time.monotonic()
        connection = Connection(server)
        try:
            assert connection.closed() == b""
        finally:
            connection.close()
        assert time.monotonic() - started >= DEADLINE_SECONDS

    def test_an_incomplete_head_is_closed_without_an_answer(self, connection: Connection) -> None:
        connection.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")

        assert connection.closed() == b""

    def test_a_trickling_head_is_closed_although_bytes_keep_coming(self, connection: Connection) -> None:
        connection.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")

        assert connection.closed(trickle=b"a") == b""

    def test_an_idle_keep_alive_connection_is_closed_after_its_answers(self, connection: Connection) -> None:
        for _ in range(2):
            # Taken before asking: the server's clock for the idle time starts after it answered.
            asked = time.monotonic()
            connection.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert connection.answer().status == 200

        assert connection.closed() == b""
        assert time.monotonic() - asked >= DEADLINE_SECONDS


def _request(target: bytes = b"/healthz", *headers: bytes, line: bytes | None = None, body: bytes = b"") -> bytes:
    request_line = line if line is not None else b"GET " + target + b" HTTP/1.1"
    return b"\r\n".join([request_line, b"Host: 127.0.0.1", *headers, b"", body])


def _post(*headers: bytes, body: bytes = b"{}") -> bytes:
    return _request(b"/v1/pets", b"Content-Type: application/json", *headers, line=b"POST /v1/pets HTTP/1.1", body=body)


# What the HTTP server refuses itself, before the service runs: an empty body, none of the contract's headers,
# and the connection closed. docs/explanation/slow-clients.md and the OpenAPI document list the same.
REFUSED_BY_THE_HTTP_SERVER = {
    "0xff byte in the target": (_request(b"/v1/pets?name=\xff"), 400),
    "NUL byte in the target": (_request(b"/v1/pets?name=\x00"), 400),
    "space in the target": (_request(b"/v1/pets?name=a b"), 400),
    "101 header lines": (_request(b"/healthz", *(b"X-H%d: v" % n for n in range(100))), 431),
    "header line without a colon": (_request(b"/healthz", b"Foo bar"), 400),
    "space before a colon": (_request(b"/healthz", b"Foo : bar"), 400),
    "folded header line": (_request(b"/healthz", b"Foo: bar", b" baz"), 400),
    "NUL byte in a header value": (_request(b"/healthz", b"Foo: a\x00b"), 400),
    "negative Content-Length": (_post(b"Content-Length: -1", body=b""), 400),
    "Content-Length not a number": (_post(b"Content-Length: two", body=b""), 400),
    "two different Content-Length": (_post(b"Content-Length: 2", b"Content-Length: 3"), 400),
    "Content-Length as a list": (_post(b"Content-Length: 2, 2"), 400),
    "Transfer-Encoding other than chunked": (_post(b"Transfer-Encoding: gzip"), 400),
    "target of 65,535 bytes": (_request(b"/v1/pets?name=" + b"a" * (65535 - 14)), 414),
    "request head over 160 KiB": (_request(b"/healthz", b"X-Big: " + b"a" * 170_000), 431),
    "malformed method": (_request(line=b"G(T /healthz HTTP/1.1"), 400),
    "unknown HTTP version": (_request(line=b"GET /healthz HTTP/1.2"), 400),
    "request line without a version": (_request(line=b"GET /healthz"), 400),
    "not HTTP at all": (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64, 400),
}


class TestRefusedByTheHttpServer:
    @pytest.mark.parametrize(("raw", "status"), REFUSED_BY_THE_HTTP_SERVER.values(), ids=REFUSED_BY_THE_HTTP_SERVER)
    def test_is_a_bare_answer_and_a_closed_connection(self, connection: Connection, raw: bytes, status: int) -> None:
        connection.send(raw)

        answer = connection.answer()

        assert answer.status == status
        assert set(answer.headers) == {"connection", "content-length", "date"}, answer.headers
        assert (answer.header("connection"), answer.body) == ("close", b"")
        assert connection.closed() == b""

    def test_http2_prior_knowledge_is_closed_without_an_answer(self, connection: Connection) -> None:
        connection.send(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")

        assert connection.closed() == b""


class TestAnsweredByTheService:
    """Requests near those limits, or that other servers refuse, that the service itself answers."""

    def test_100_header_lines(self, connection: Connection) -> None:
        connection.send(_request(b"/healthz", *(b"X-H%d: v" % n for n in range(99))))

        assert connection.answer().status == 200

    def test_target_of_65534_bytes(self, connection: Connection, server: Server) -> None:
        auth = f"Authorization: Bearer {server.tokens[ALICE]}".encode()
        connection.send(_request(b"/v1/pets?name=" + b"a" * (65534 - 14), auth))

        _assert_service_error(connection.answer(), 400, 994)

    def test_websocket_upgrade(self, connection: Connection) -> None:
        upgrade = (b"Upgrade: websocket", b"Connection: Upgrade", b"Sec-WebSocket-Version: 13")
        connection.send(_request(b"/nowhere", *upgrade, b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="))

        _assert_service_error(connection.answer(), 404, 995)

    def test_two_equal_content_lengths(self, connection: Connection, server: Server) -> None:
        auth = f"Authorization: Bearer {server.tokens[ALICE]}".encode()
        connection.send(_post(auth, b"Content-Length: 2", b"Content-Length: 2"))

        _assert_service_error(connection.answer(), 400, 994)

    def test_content_length_with_chunked(self, connection: Connection, server: Server) -> None:
        """The chunked body is read and the Content-Length ignored; the connection is closed after."""
        auth = f"Authorization: Bearer {server.tokens[ALICE]}".encode()
        connection.send(_post(auth, b"Content-Length: 2", b"Transfer-Encoding: chunked", body=b"2\r\n{}\r\n0\r\n\r\n"))

        answer = connection.answer()

        _assert_service_error(answer, 400, 994)
        assert answer.header("connection") == "close"

    def test_malformed_chunked_body(self, connection: Connection, server: Server) -> None:
        auth = f"Authorization: Bearer {server.tokens[ALICE]}".encode()
        connection.send(_post(auth, b"Transfer-Encoding: chunked", body=b"zz\r\n{}\r\n0\r\n\r\n"))

        _assert_service_error(connection.answer(), 400, 994)


class TestServerHeader:
    @pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics", "/openapi.json", "/docs", "/v1/pets", "/x"])
    def test_names_the_service_not_a_library(self, connection: Connection, path: str) -> None:
        connection.send(_request(path.encode()))

        answer = connection.answer()

        assert answer.headers["server"] == ["petrecords"]
        assert not any("granian" in value.lower() for values in answer.headers.values() for value in values)
