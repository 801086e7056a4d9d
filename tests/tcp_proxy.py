"""A TCP proxy owned by a test, between the service and its database, that can fail on command.

It runs its own event loop in a thread, so that it keeps working whatever the service's loop does.
  - `cut()`: every proxied connection is closed and new ones are refused (the listening port is closed);
  - `black_hole()`: connections stay open and new ones are accepted, but nothing is forwarded any more,
    as when the network drops every packet;
  - `restore()`: forwards again (what was held during a black hole is delivered, as TCP would).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tcp-proxy", daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._flowing: asyncio.Event | None = None

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
        self._writers.add(client_writer)
        try:
            await self._flowing.wait()
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
        except OSError:
            self._close(client_writer)
            return
        self._writers.add(upstream_writer)
        pumps = [
            asyncio.create_task(self._pump(client_reader, upstream_writer)),
            asyncio.create_task(self._pump(upstream_reader, client_writer)),
        ]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            self._close(client_writer)
            self._close(upstream_writer)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._flowing is not None
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                await self._flowing.wait()
                writer.write(data)
                await writer.drain()

    def _close(self, writer: asyncio.StreamWriter) -> None:
        self._writers.discard(writer)
        with contextlib.suppress(OSError, RuntimeError):
            writer.transport.abort()

    def cut(self) -> None:
        self._call(self._cut())

    async def _cut(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            self._close(writer)

    async def _stop(self) -> None:
        await self._cut()
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
        self._flowing.set()

    def stop(self) -> None:
        self._call(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


@contextlib.contextmanager
def tcp_proxy(target_host: str, target_port: int) -> Iterator[TcpProxy]:
    proxy = TcpProxy(target_host, target_port)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()
