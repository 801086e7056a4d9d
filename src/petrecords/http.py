"""The edge every HTTP request passes, and how an API request is let in: its caller, its rate, its body."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

import msgspec

from petrecords.auth import Caller, RefusalLog, TokenRefused, TokenVerifier, bearer_token
from petrecords.endpoints import Answer
from petrecords.errors import (
    BodyTimeout,
    InternalError,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    ServiceError,
    UnsupportedMediaType,
)
from petrecords.logs import AccessLog
from petrecords.metrics import Metrics
from petrecords.ratelimit import RateLimiter
from petrecords.store.base import Store

StoreLookup = Callable[[], Store | None]
# Plain ASGI types: these layers see raw messages and need no framework's view of them.
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

error_log = logging.getLogger("petrecords.errors")

_SANE_REQUEST_ID = re.compile(rb"[A-Za-z0-9._:+/=-]{1,128}")
_MEDIA_TYPE = re.compile(r'\s*([a-z0-9.+-]+/[a-z0-9.+-]+)\s*(?:;\s*charset\s*=\s*"?utf-?8"?\s*)?', re.IGNORECASE)
JSON_MEDIA_TYPE = "application/json"
# Metric labels come from closed sets, whatever a client sends: a made-up method or path must not add series.
_KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE", "CONNECT"})
OTHER_METHOD = "other"
UNMATCHED_ROUTE = "unmatched"
_LOGGED_METHOD_LENGTH = 32
# A path that the router would read as another one: empty segments (`//v1/pets` is served as `/v1/pets`) and
# encoded slashes or backslashes. A proxy rule on `/v1/` would not see them as `/v1/` paths.
_AMBIGUOUS_PATH = re.compile(rb"//|%2f|%5c|\\", re.IGNORECASE)
# Granian adds `server: granian` to every response that has no Server header of its own; this one names the
# service, which every client knows anyway, rather than the libraries it runs on.
_SERVER = (b"server", b"petrecords")
_NOSNIFF = (b"x-content-type-options", b"nosniff")
# An answer to a request with a token, or of the API, is the caller's alone: no shared cache may keep it.
_NO_STORE = (b"cache-control", b"no-store")
# Every answer under /public/ (a certificate's link: contract section 16), a 404 of a path no route matches or a
# 405 too, stays in no cache and sends no Referer: the path itself may hold a token.
_PUBLIC_PREFIX = "/public/"
_NO_REFERRER = (b"referrer-policy", b"no-referrer")
_PRIVATE_REPLACED = frozenset({b"cache-control"})
_PUBLIC_REPLACED = frozenset({b"cache-control", b"referrer-policy"})


class _RequestIds:
    """Request ids: a random prefix of the process (drawn again in every forked worker) and a count, unique
    across processes, instances and restarts, without the system call that a random UUID per request costs."""

    def __init__(self) -> None:
        self.renew()
        os.register_at_fork(after_in_child=self.renew)

    def renew(self) -> None:
        self.prefix = uuid.uuid4().hex[:16]
        self.count = itertools.count(1)

    def next(self) -> str:
        return f"{self.prefix}{next(self.count):016x}"


_request_ids = _RequestIds()


def _new_request_id() -> str:
    return _request_ids.next()


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None


ALLOWED_REQUEST_HEADERS = (
    "Authorization",
    "Content-Type",
    "Idempotency-Key",
    "If-Match",
    "If-None-Match",
    "Last-Event-ID",
    "X-Request-ID",
)
"""The request headers a page of an allowed origin may send, besides the CORS-safelisted ones: exactly these."""
EXPOSED_HEADERS = ("ETag", "Location", "X-Request-ID", "Retry-After", "Idempotent-Replayed")
"""The response headers that browser code of an allowed origin may read."""
PREFLIGHT_MAX_AGE_SECONDS = 600


class CorsPolicy:
    """Cross-origin requests from the configured origins (exact matches): a preflight is answered before the
    token check, allowing the path's methods and exactly ALLOWED_REQUEST_HEADERS whatever it asks for (never
    `*`), and every answer to such an origin says which headers its code may read."""

    def __init__(self, origins: Iterable[str], allowed_methods: Callable[[str], str | None]) -> None:
        self._origins = {origin.encode("latin-1") for origin in origins}
        self._allowed_methods = allowed_methods
        """The `Allow` of a concrete path, or None when the service has no such path."""

    def origin_of(self, scope: Scope) -> bytes | None:
        """The request's Origin when it is an allowed one."""
        origin = _header(scope, b"origin")
        return origin if origin in self._origins else None

    def preflight(self, scope: Scope, origin: bytes) -> list[tuple[bytes, bytes]] | None:
        """The headers of the answer to a preflight of a path the service has, or None when it is none."""
        if scope["method"] != "OPTIONS" or _header(scope, b"access-control-request-method") is None:
            return None
        methods = self._allowed_methods(scope["path"])
        if methods is None:
            return None
        return [
            *self.answer_headers(origin),
            (b"access-control-allow-methods", methods.encode()),
            (b"access-control-allow-headers", ", ".join(ALLOWED_REQUEST_HEADERS).encode()),
            (b"access-control-max-age", str(PREFLIGHT_MAX_AGE_SECONDS).encode()),
        ]

    @staticmethod
    def answer_headers(origin: bytes) -> list[tuple[bytes, bytes]]:
        return [
            (b"access-control-allow-origin", origin),
            (b"access-control-expose-headers", ", ".join(EXPOSED_HEADERS).encode()),
        ]

    def refusal(self, scope: Scope, asked_method: bytes) -> str | None:
        """Why a browser's preflight is refused, or what it asks that the browser will then refuse; None when
        neither (a path the service does not have is no matter of CORS)."""
        origin = _header(scope, b"origin")
        if origin is None:
            return "it names no origin"
        if origin not in self._origins:
            return f"the origin {_clipped(origin)} is not one of PETRECORDS_CORS_ORIGINS"
        methods = self._allowed_methods(scope["path"])
        if methods is None:
            return None
        if asked_method.decode("latin-1").strip() not in methods.split(", "):
            return f"it asks for the method {_clipped(asked_method)}, which the path does not allow ({methods})"
        asked = _header(scope, b"access-control-request-headers") or b""
        names = {name.strip().lower() for name in asked.decode("latin-1").split(",")} - {""}
        others = sorted(names - _MAY_SEND)
        if others:
            return f"it asks to send {_clipped(', '.join(others).encode('latin-1'))}, which no page may send"
        return None


_MAY_SEND = frozenset(
    {*(name.lower() for name in ALLOWED_REQUEST_HEADERS), "accept", "accept-language", "content-language", "range"}
)
"""What a page may send: the allowed request headers and the ones CORS safelists."""
_CLIPPED_LENGTH = 100


def _clipped(value: bytes) -> str:
    """What a client sent, for a log line: no longer than a hundred characters."""
    text = value.decode("latin-1")
    return text if len(text) <= _CLIPPED_LENGTH else text[: _CLIPPED_LENGTH - 1] + "…"


def preflight_refusal(scope: Scope, cors: CorsPolicy | None) -> str | None:
    """Why a browser's preflight (`OPTIONS` with `Access-Control-Request-Method`) is refused, for the access log;
    None when the request is none, or one the browser will let through."""
    asked_method = _header(scope, b"access-control-request-method")
    if asked_method is None:
        return None
    if cors is None:
        return "no page of another origin may call the API: PETRECORDS_CORS_ORIGINS is unset"
    return cors.refusal(scope, asked_method)


_VARY_ORIGIN = (b"vary", b"Origin")


class ServiceEdge:
    """Request ids, security headers, CORS, the access log and request metrics, for every HTTP request."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        metrics: Metrics,
        store: StoreLookup,
        log_requests: bool,
        cors: CorsPolicy | None = None,
        template_of: Callable[[str], str | None] = lambda path: None,
    ) -> None:
        self.app = app
        self._metrics = metrics
        self._store = store
        self._access_log = AccessLog() if log_requests else None
        self._cors = cors
        self._template_of = template_of
        metrics.pool_figures = self._pool_figures

    def _pool_figures(self) -> dict[str, int]:
        store = self._store()
        return {} if store is None else store.pool_figures()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        path: str = scope["path"]
        # One pass over the head for the two headers the edge reads.
        sent_id = None
        private = path.startswith("/v1/")
        for key, value in scope["headers"]:
            if key == b"x-request-id":
                if sent_id is None:
                    sent_id = value
            elif key == b"authorization":
                private = True
        request_id = bytes(sent_id).decode() if sent_id and _SANE_REQUEST_ID.fullmatch(sent_id) else _new_request_id()
        added = [(b"x-request-id", request_id.encode()), _NOSNIFF, _SERVER]
        replaced: frozenset[bytes] | None = None
        if path.startswith(_PUBLIC_PREFIX):
            added += (_NO_STORE, _NO_REFERRER)
            replaced = _PUBLIC_REPLACED
        elif private:
            added.append(_NO_STORE)
            replaced = _PRIVATE_REPLACED
        preflight = None
        if self._cors is not None:
            # An answer depends on the request's Origin: no shared cache may give it to another one.
            added.append(_VARY_ORIGIN)
            origin = self._cors.origin_of(scope)
            if origin is not None:
                preflight = self._cors.preflight(scope, origin)
                if preflight is None:
                    added.extend(self._cors.answer_headers(origin))
        state = scope.get("state")
        if state is None:
            state = scope["state"] = {}
        state["request_id"] = request_id
        method = scope["method"]
        preflight_refused = preflight_refusal(scope, self._cors) if method == "OPTIONS" else None
        # HEAD is answered as GET would be (RFC 9110 9.3.2), without the body.
        head = method == "HEAD"
        if head:
            scope["method"] = "GET"
        status = 500
        responded = False

        async def send_with_headers(message: Message) -> None:
            nonlocal status, responded
            if message["type"] == "http.response.start":
                status = message["status"]
                responded = True
                headers = message.get("headers", ())
                if replaced is not None:
                    headers = [header for header in headers if header[0].lower() not in replaced]
                else:
                    headers = list(headers)
                headers += added
                message["headers"] = headers
            elif head and message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        try:
            try:
                if _ambiguous_path(scope):
                    await send_service_error(send_with_headers, NotFound())
                elif preflight is not None:
                    # Answered before the token check: a browser sends no credentials with a preflight.
                    scope["path_template"] = self._template_of(path)
                    await send_with_headers({"type": "http.response.start", "status": 204, "headers": preflight})
                    await send_with_headers({"type": "http.response.body", "body": b""})
                else:
                    await self.app(scope, receive, send_with_headers)
            except Exception:
                if responded:
                    raise
                error_log.error("request %s failed", request_id, exc_info=True)
            # Left unanswered, the HTTP server would answer a plain-text 500 of its own.
            if not responded:
                await send_service_error(send_with_headers, InternalError())
        finally:
            elapsed = time.perf_counter() - started
            route = scope.get("path_template") or UNMATCHED_ROUTE
            metrics = self._metrics
            metrics.observe(
                method=method if method in _KNOWN_METHODS else OTHER_METHOD, route=route, status=status, seconds=elapsed
            )
            # Set by the error handler when the answer was 503 because the database could not serve.
            database_unavailable = state.get("database_unavailable")
            if database_unavailable is not None:
                metrics.observe_database_unavailable(database_unavailable)
            if self._access_log is not None:
                # Never headers, the query string or bodies: they may carry tokens and personal data.
                caller = scope.get("user")
                self._access_log.write(
                    request_id=request_id,
                    method=method[:_LOGGED_METHOD_LENGTH],
                    route=route,
                    path=path,
                    status=status,
                    seconds=elapsed,
                    caller=getattr(caller, "email", None),
                    database_unavailable=database_unavailable,
                    preflight_refused=preflight_refused,
                )


def _ambiguous_path(scope: Scope) -> bool:
    # Some clients' ASGI adapters (httpx's among them) leave the query in raw_path.
    raw_path: bytes = scope.get("raw_path") or scope["path"].encode()
    if b"//" not in raw_path and b"%" not in raw_path and b"\\" not in raw_path:
        return False  # nearly every request: no need for the query's end, nor the expression
    return _AMBIGUOUS_PATH.search(raw_path.partition(b"?")[0]) is not None


_HEADER_NAMES: dict[str, bytes] = {}
"""An answer header's name -> its lower-case bytes: answers name a handful of headers, over and over."""


def _header_name(name: str) -> bytes:
    encoded = _HEADER_NAMES.get(name)
    if encoded is None:
        encoded = name.lower().encode("latin-1")
        if len(_HEADER_NAMES) < 64:
            _HEADER_NAMES[name] = encoded
    return encoded


async def send_answer(send: Send, answer: Answer) -> None:
    """Answer from below the framework: the direct routes, and the edge's own failures."""
    content = answer.content
    headers = [(_header_name(name), value.encode("latin-1")) for name, value in answer.headers.items()]
    if answer.media_type is not None and content:
        headers.append((b"content-type", answer.media_type.encode("latin-1")))
    # Content-Length too, although the HTTP server would set it: the answer to HEAD, whose body the edge leaves
    # out, says the length of GET's.
    headers.append((b"content-length", str(len(content)).encode()))
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": content})


def error_answer(error: ServiceError) -> Answer:
    """How a failure answers, whichever way the request came: its ServiceError body, status and headers."""
    return Answer(error.status, msgspec.json.encode(error.body()), error.headers)


async def send_service_error(send: Send, error: ServiceError) -> None:
    await send_answer(send, error_answer(error))


async def admit(scope: Scope, *, verifier: TokenVerifier, limiter: RateLimiter | None, refusals: RefusalLog) -> Caller:
    """The caller of an API request: a valid bearer token (401; why it is not valid goes to the log, never to the
    client), within the caller's rate (429)."""
    authorizations = [bytes(value).decode("latin-1") for key, value in scope["headers"] if key == b"authorization"]
    token = bearer_token(authorizations)
    try:
        caller = await verifier.verify(token)
    except TokenRefused as refused:
        refusals.refused(refused, request_id=scope.get("state", {}).get("request_id", "-"))
        raise
    if limiter is not None and (retry_after := await limiter.hit(caller.email)) is not None:
        raise RateLimited(retry_after)
    return caller


async def read_request_body(
    scope: Scope, receive: Receive, *, limit: int, timeout_seconds: float, media_types: tuple[str, ...]
) -> bytes:
    """The body of an API request, after its caller was admitted: its size (413), its deadline (408), its
    media type (415): one of `media_types`, with no parameter but a UTF-8 charset."""
    body = await _read_body(scope, receive, limit=limit, timeout_seconds=timeout_seconds)
    content_type = _header(scope, b"content-type")
    if content_type is None or not _accepted_media_type(content_type.decode("latin-1"), media_types):
        raise UnsupportedMediaType(_unsupported_message(media_types))
    return body


def _accepted_media_type(content_type: str, media_types: tuple[str, ...]) -> bool:
    match = _MEDIA_TYPE.fullmatch(content_type)
    return match is not None and match.group(1).lower() in media_types


def _unsupported_message(media_types: tuple[str, ...]) -> str | None:
    if media_types == (JSON_MEDIA_TYPE,):
        return None
    return f"The request body must be sent as {' or '.join(media_types)} (UTF-8)."


async def _read_body(scope: Scope, receive: Receive, *, limit: int, timeout_seconds: float) -> bytes:
    declared = _header(scope, b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(limit)
    chunks: list[bytes] = []
    size = 0
    # One deadline for the whole body: a client that sends a byte now and then must not hold the request open.
    try:
        async with asyncio.timeout(timeout_seconds):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    break
                chunk: bytes = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    raise PayloadTooLarge(limit)
                chunks.append(chunk)
                if not message.get("more_body", False):
                    break
    except TimeoutError:
        raise BodyTimeout(timeout_seconds) from None
    return b"".join(chunks)
