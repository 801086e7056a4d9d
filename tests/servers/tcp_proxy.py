"""A TCP proxy owned by a test, between the service and a server (PostgreSQL, NATS, Redis), that fails on command.

It runs its own event loop in a thread, so that it keeps working whatever the service's loop does.
  - `cut()`: every proxied connection is closed and new ones are refused (the listening port is closed);
  - `refuse()`: new connections are refused, those open go on;
  - `reset()`: every proxied connection is reset, as when a router restarts; new ones are accepted;
  - `black_hole()`: connections stay open and new ones are accepted, but nothing is forwarded any more, as when
    the network drops every packet;
  - `delay(seconds)`: everything is forwarded that much later (latency added; 0 for none);
  - `strand()`: the client's end of every proxied connection is closed and the server's end left open and
    silent, as when the client's host is lost: the server learns of it from its own bounds alone (until
    `restore()`, when the network is back and the server's end is reset, as the client's host would);
  - `restore()`: as it was (what was held during a black hole is delivered, as TCP would).

And two faults of one PostgreSQL statement, on the connection that sends it, for a proxy made with `postgres`
(which reads the PostgreSQL protocol as it passes: the simple queries, and the statements that the extended
protocol binds):
  - `lose_answer_to(text)`: the next statement whose SQL holds `text` runs, and once the server has answered
    it in full (ready for the next query), its connection is reset, the answer not forwarded: the client
    cannot tell what happened;
  - `hold(text)`: the next statement whose SQL holds `text`, and everything after it on its connection, is
    held, not forwarded (a black hole for that connection alone), until `restore()` delivers it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

# What a client may send before its startup message, each without a type byte: the requests of an encrypted
# connection (answered by one byte, `S` or `N`) and of a cancellation (answered by nothing).
_SSL_REQUEST, _GSS_REQUEST, _CANCEL_REQUEST = 80877103, 80877104, 80877102


def _typed_message(pending: bytes) -> tuple[bytes, bytes, bytes] | None:
    """The first message of `pending`, once it is whole: its type, its body, and what follows it."""
    if len(pending) < 5:
        return None
    length = struct.unpack("!i", pending[1:5])[0]
    if len(pending) < 1 + length:
        return None
    return pending[:1], pending[5 : 1 + length], pending[1 + length :]


@dataclass
class _Statements:
    """The PostgreSQL messages a client sent on one connection, read as they pass: which run a statement, and
    that statement's SQL. It gives up (`lost`) on a connection it cannot read, an encrypted one."""

    started: bool = False
    lost: bool = False
    one_byte_answers: int = 0
    """Answers of one untyped byte that the server owes (to requests of encryption)."""
    prepared: dict[bytes, bytes] = field(default_factory=dict)
    """The SQL of each statement prepared on the connection, by its name."""
    pending: bytes = b""

    def read(self, data: bytes) -> list[bytes]:
        """The SQL of each statement that `data` (and what came before) runs."""
        self.pending += data
        ran: list[bytes] = []
        while not self.lost:
            if not self.started:
                if len(self.pending) < 8:
                    break
                length, code = struct.unpack("!ii", self.pending[:8])
                if len(self.pending) < length:
                    break
                if code in (_SSL_REQUEST, _GSS_REQUEST):
                    self.one_byte_answers += 1
                elif code != _CANCEL_REQUEST:
                    self.started = True
                self.pending = self.pending[length:]
                continue
            if (message := _typed_message(self.pending)) is None:
                break
            kind, body, self.pending = message
            if kind == b"Q":
                ran.append(body.rstrip(b"\0"))
            elif kind == b"P":
                name, _, rest = body.partition(b"\0")
                self.prepared[name] = rest.partition(b"\0")[0]
            elif kind == b"B":
                _portal, _, rest = body.partition(b"\0")
                ran.append(self.prepared.get(rest.partition(b"\0")[0], b""))
        return ran


@dataclass
class _Answers:
    """The PostgreSQL messages a server sent on one connection, read as they pass: whether one said that it is
    ready for the next query."""

    statements: _Statements
    pending: bytes = b""

    def ready_for_query(self, data: bytes) -> bool:
        self.pending += data
        ready = False
        while not self.statements.lost:
            if self.statements.one_byte_answers:
                if not self.pending:
                    break
                if self.pending[:1] == b"S":
                    self.statements.lost = True  # encrypted from here on
                self.statements.one_byte_answers -= 1
                self.pending = self.pending[1:]
                continue
            if (message := _typed_message(self.pending)) is None:
                break
            kind, _, self.pending = message
            ready = ready or kind == b"Z"
        return ready


@dataclass(eq=False)
class _Link:
    """One proxied connection: its two ends, and what the PostgreSQL faults know of it."""

    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    statements: _Statements = field(default_factory=_Statements)
    answers: _Answers | None = None
    losing_answer: bool = False
    """The answer to a statement is being lost: nothing more is forwarded to the client, and the connection is
    reset once the server is ready for the next query."""
    released: asyncio.Event = field(default_factory=asyncio.Event)
    """Set unless this connection alone is held (see `TcpProxy.hold`)."""
    stranded: bool = False
    """Its client's end is gone and its server's end left open (see `TcpProxy.strand`)."""

    def __post_init__(self) -> None:
        self.answers = _Answers(self.statements)
        self.released.set()


class TcpProxy:
    def __init__(self, target_host: str, target_port: int, *, postgres: bool = False) -> None:
        self.target = (target_host, target_port)
        self.postgres = postgres
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tcp-proxy", daemon=True)
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self._stranded: set[_Link] = set()
        self._flowing: asyncio.Event | None = None
        self._refusing = False
        self._delay = 0.0
        self._lose_answer_to: bytes | None = None
        self._hold: bytes | None = None
        self.connections = 0
        """Connections accepted so far."""
        self.held = False
        """Whether a statement is held (see `hold`), until `restore()`."""

    def _call(self, coroutine: object) -> None:
        asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=10)  # type: ignore[arg-type]

    def start(self) -> None:
        self._thread.start()
        self._call(self._start())

    async def _start(self) -> None:
        self._flowing = asyncio.Event()
        self._flowing.set()
        await self._listen()

    async def _listen(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        self.port = listener.getsockname()[1]
        self._server = await asyncio.start_server(self._serve, sock=listener)

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        # Stopping cancels this task; asyncio's stream server logs an error for a handler task that ends
        # cancelled, so the cancellation ends it quietly instead.
        with contextlib.suppress(asyncio.CancelledError):
            await self._forward(client_reader, client_writer)

    async def _forward(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        assert self._flowing is not None
        self.connections += 1
        link = _Link(client_writer)
        self._links.add(link)
        try:
            if self._refusing:
                return
            await self._flowing.wait()
            upstream_reader, link.upstream = await asyncio.open_connection(*self.target)
        except OSError:
            return
        finally:
            if link.upstream is None:
                self._close(link)
        pumps = [
            asyncio.create_task(self._pump_requests(link, client_reader, link.upstream)),
            asyncio.create_task(self._pump_answers(link, upstream_reader, client_writer)),
        ]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            self._close(link)

    async def _pass(self, link: _Link) -> None:
        """Wait until what was read may be forwarded: after the added latency, while the network lets it through."""
        assert self._flowing is not None
        if self._delay:
            await asyncio.sleep(self._delay)
        await self._flowing.wait()
        await link.released.wait()

    async def _pump_requests(self, link: _Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                if self.postgres:
                    self._arm(link, link.statements.read(data))
                await self._pass(link)
                writer.write(data)
                await writer.drain()

    def _arm(self, link: _Link, ran: list[bytes]) -> None:
        for sql in ran:
            if self._lose_answer_to is not None and self._lose_answer_to in sql:
                self._lose_answer_to = None
                link.losing_answer = True
            if self._hold is not None and self._hold in sql:
                self._hold = None
                self.held = True
                link.released.clear()

    async def _pump_answers(self, link: _Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert link.answers is not None
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                ready = self.postgres and link.answers.ready_for_query(data)
                if link.losing_answer:
                    if ready:
                        return  # the server has done it and said so: the connection goes, unanswered
                    continue
                await self._pass(link)
                writer.write(data)
                await writer.drain()

    def _close(self, link: _Link) -> None:
        self._links.discard(link)
        for writer in (link.client, None if link.stranded else link.upstream):
            if writer is not None:
                with contextlib.suppress(OSError, RuntimeError):
                    writer.transport.abort()

    def strand(self) -> None:
        self._call(self._strand())

    async def _strand(self) -> None:
        for link in list(self._links):
            link.stranded = True
            self._stranded.add(link)
            self._close(link)

    def _end_stranded(self) -> None:
        for link in self._stranded:
            link.stranded = False
            self._close(link)
        self._stranded.clear()

    def cut(self) -> None:
        self._call(self._cut())

    async def _cut(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        await self._reset()

    def reset(self) -> None:
        self._call(self._reset())

    async def _reset(self) -> None:
        for link in list(self._links):
            self._close(link)

    def refuse(self) -> None:
        self._call(self._set(refusing=True))

    def delay(self, seconds: float) -> None:
        self._call(self._set(delay=seconds))

    def lose_answer_to(self, text: str) -> None:
        assert self.postgres, "a fault of a PostgreSQL statement, for a proxy made with postgres=True"
        self._call(self._set(lose_answer_to=text.encode()))

    def hold(self, text: str) -> None:
        assert self.postgres, "a fault of a PostgreSQL statement, for a proxy made with postgres=True"
        self._call(self._set(hold=text.encode()))

    async def _set(
        self,
        *,
        refusing: bool | None = None,
        delay: float | None = None,
        lose_answer_to: bytes | None = None,
        hold: bytes | None = None,
    ) -> None:
        if refusing is not None:
            self._refusing = refusing
        if delay is not None:
            self._delay = delay
        if lose_answer_to is not None:
            self._lose_answer_to = lose_answer_to
        if hold is not None:
            self._hold = hold

    async def _stop(self) -> None:
        await self._cut()
        self._end_stranded()
        tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def black_hole(self) -> None:
        self._call(self._black_hole())

    async def _black_hole(self) -> None:
        assert self._flowing is not None
        self._flowing.clear()

    def restore(self) -> None:
        self._call(self._restore())

    async def _restore(self) -> None:
        assert self._flowing is not None
        if self._server is None:
            await self._listen()
        self._refusing = False
        self._delay = 0.0
        self._lose_answer_to = self._hold = None
        self.held = False
        self._end_stranded()
        for link in self._links:
            link.released.set()
        self._flowing.set()

    def stop(self) -> None:
        self._call(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


@contextlib.contextmanager
def tcp_proxy(target_host: str, target_port: int, *, postgres: bool = False) -> Iterator[TcpProxy]:
    proxy = TcpProxy(target_host, target_port, postgres=postgres)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()
