"""Webhook receivers of the tests' own: an HTTP/1.1 server on 127.0.0.1, plain or TLS, in a thread with its own
event loop (so that what it does never shows in the delivering loop's timing), whose paths answer as their names
say, well or badly; and self-signed certificates for its TLS."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import socket
import ssl
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

HUGE_BYTES = 1024 * 1024
TRICKLE_SECONDS = 0.1
"""Between the bytes of /trickle's answer."""


@dataclass(frozen=True)
class Received:
    method: str
    target: str
    headers: dict[str, str]
    """Names in lower case."""
    body: bytes


class Receiver:
    """Paths (a query string is ignored, so that each test can mark its own requests):

    - /ok: 200 with a short body; /sized/N: 200 with a body of N bytes;
    - /status/N: status N, no body; /redirect: 302 to /ok;
    - /hang: reads the request, never answers; /trickle: 200, then a byte of its body every TRICKLE_SECONDS;
    - /huge: 200 with a body of HUGE_BYTES; /reset: reads the request, then resets the connection."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self._tls = tls
        self.requests: list[Received] = []
        self.connections = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="webhook receiver", daemon=True)
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._stopping = asyncio.Event()

    def requests_marked(self, mark: str) -> list[Received]:
        return [request for request in self.requests if request.target.endswith(f"?{mark}")]

    @contextlib.contextmanager
    def running(self) -> Iterator[Receiver]:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(5)
        self.port = self._server.sockets[0].getsockname()[1]
        try:
            yield self
        finally:
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(5)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
            self._loop.close()

    async def _start(self) -> asyncio.Server:
        return await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self._tls)

    async def _stop(self) -> None:
        """Ends every connection, and lets each handler end by itself (asyncio's streams log a handler that is
        cancelled as an error)."""
        assert self._server is not None
        self._server.close()
        self._stopping.set()
        for writer in list(self._writers):
            writer.transport.abort()
        await asyncio.wait_for(asyncio.gather(*self._handlers, return_exceptions=True), 5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self._writers.add(writer)
        try:
            while not self._stopping.is_set() and await self._answer_one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass  # the client went away, or refused our certificate
        finally:
            self._handlers.discard(task)
            self._writers.discard(writer)
            writer.close()

    async def _answer_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; whether the connection may carry another."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return False
        request_line, *lines = head.decode("latin-1").split("\r\n")
        method, target, _ = request_line.split(" ", 2)
        headers = {}
        for line in lines:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        self.requests.append(Received(method, target, headers, body))
        path = target.partition("?")[0]
        if path == "/ok":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        elif path.startswith("/sized/"):
            size = int(path.removeprefix("/sized/"))
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size + b"x" * size)
        elif path.startswith("/status/"):
            writer.write(b"HTTP/1.1 %s Status\r\nContent-Length: 0\r\n\r\n" % path.removeprefix("/status/").encode())
        elif path == "/redirect":
            writer.write(b"HTTP/1.1 302 Found\r\nLocation: /ok\r\nContent-Length: 0\r\n\r\n")
        elif path == "/hang":
            await self._stopping.wait()
            return False
        elif path == "/trickle":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
            for _ in range(1000):
                if self._stopping.is_set():
                    return False
                writer.write(b"x")
                await writer.drain()
                await asyncio.sleep(TRICKLE_SECONDS)
        elif path == "/huge":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % HUGE_BYTES)
            for _ in range(HUGE_BYTES // 4096):
                writer.write(b"x" * 4096)
                await writer.drain()
        elif path == "/reset":
            raw = writer.get_extra_info("socket")
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return False
        else:
            writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        return True


@dataclass(frozen=True)
class Certificate:
    authority_pem: bytes
    """The certificate of the authority that signed it, which a client trusts."""
    cert_file: Path
    key_file: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert_file, self.key_file)
        return context

    def trusted_by_a_client(self) -> ssl.SSLContext:
        """A client's context that trusts this certificate's authority alone, checking host names as every client
        does."""
        return ssl.create_default_context(cadata=self.authority_pem.decode("ascii"))


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def certificate_for(directory: Path, name: str) -> Certificate:
    """A certificate for the DNS name `name` only (no IP address), signed by an authority of its own."""
    now = datetime.datetime.now(datetime.UTC)
    authority_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    authority_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"test authority for {name}")])
    authority = (
        x509.CertificateBuilder()
        .subject_name(authority_name)
        .issuer_name(authority_name)
        .public_key(authority_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )  # certificate and CRL signing
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(authority_key.public_key()), critical=False)
        .sign(authority_key, hashes.SHA256())
    )
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(authority_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(authority_key.public_key()), critical=False)
        .sign(authority_key, hashes.SHA256())
    )
    cert_file, key_file = directory / f"{name}.crt", directory / f"{name}.key"
    cert_file.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(_key_pem(key))
    return Certificate(authority.public_bytes(serialization.Encoding.PEM), cert_file, key_file)
