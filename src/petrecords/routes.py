"""The two ways a request reaches its endpoint, both made from the one table of endpoints: the framework's
routes, and the direct routes below the framework. Both let a request in the same way (`enter`: the caller,
its rate, its body) and hand it to the same handler; they differ only in how they find the endpoint and send
the answer. What every answer carries besides (the request id, the security headers, CORS) is added around both
by the edge, petrecords.http.ServiceEdge, so a request with an Origin is answered directly too."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl

from litestar import HttpMethod, Request, Response, route
from litestar.handlers import HTTPRouteHandler
from litestar.response import Stream

from petrecords.auth import Caller
from petrecords.changes.feed import wants_event_stream
from petrecords.endpoints import Access, Answer, Call, Endpoint, EndpointTable
from petrecords.errors import MethodNotAllowed, RateLimited, Unauthenticated
from petrecords.http import ASGIApp, Receive, Scope, Send, admit, error_answer, read_request_body, send_answer
from petrecords.responses import answer_failure
from petrecords.services import Services


async def enter(endpoint: Endpoint, scope: Scope, receive: Receive, params: dict[str, str], services: Services) -> Call:
    """Let a request in, in the contract's order: a valid bearer token (401), the caller's rate (429), and, for an
    endpoint that reads a body, its size (413), its deadline (408), its media type (415)."""
    scope["path_template"] = endpoint.path
    caller = None
    if endpoint.access is Access.API:
        ticket = _ticket_in(scope["query_string"])
        if ticket is None:
            caller = await admit(
                scope, verifier=services.verifier, limiter=services.limiter, refusals=services.refusals
            )
        else:
            caller = await _admit_by_ticket(endpoint, scope, ticket, services)
        scope["user"] = caller
    body = b""
    if endpoint.reads_body:
        settings = services.settings
        body = await read_request_body(
            scope,
            receive,
            limit=settings.max_body_bytes,
            timeout_seconds=settings.body_timeout_seconds,
            media_types=endpoint.body_media_types,
        )
    return Call(
        caller=caller,
        params=params,
        query=scope["query_string"],
        headers=scope["headers"],
        body=body,
        state=scope.setdefault("state", {}),
        peer=client[0] if (client := scope.get("client")) else None,
    )


def _ticket_in(query: bytes) -> str | None:
    """The stream ticket a query names, if it names one (a query without the word costs one look)."""
    if b"ticket" not in query:
        return None
    try:
        pairs = parse_qsl(query.decode("utf-8"), keep_blank_values=True, errors="strict")
    except (UnicodeDecodeError, ValueError):
        return None  # the endpoint's own parsing answers for that
    return next((value for name, value in pairs if name == "ticket"), None)


async def _admit_by_ticket(endpoint: Endpoint, scope: Scope, ticket: str, services: Services) -> Caller:
    """The caller of a stream ticket, in place of a token: only for a live stream, never with a token as well.
    Any use consumes the ticket, a refused one too."""
    caller = await services.tickets.redeem(ticket)
    stream = endpoint.opens_with_ticket and wants_event_stream(_header_text(scope, b"accept"))
    if not stream or _header_text(scope, b"authorization") is not None:
        raise Unauthenticated(
            "A stream ticket opens one live change stream (GET /v1/changes with Accept: text/event-stream), and "
            "takes the place of the bearer token there.",
            token_sent=True,
        )
    if services.limiter is not None and (retry_after := await services.limiter.hit(caller.email)) is not None:
        raise RateLimited(retry_after)
    return caller


def _header_text(scope: Scope, name: bytes) -> str | None:
    return next((bytes(value).decode("latin-1") for key, value in scope["headers"] if key == name), None)


# --- through the framework -------------------------------------------------------------------------


def _framework_path(path: str) -> str:
    return path.replace("}", ":str}")


def _response(answer: Answer) -> Response[Any]:
    if answer.stream is not None:
        return Stream(
            answer.stream, status_code=answer.status, media_type=answer.media_type, headers=dict(answer.headers)
        )
    return Response(
        content=answer.content,
        status_code=answer.status,
        media_type=answer.media_type,
        headers=dict(answer.headers),
    )


def _route_of(endpoint: Endpoint, services: Services) -> HTTPRouteHandler:
    async def handle(request: Request[Any, Any, Any]) -> Response[Any]:
        scope: Any = request.scope
        receive: Any = request.receive
        call = await enter(endpoint, scope, receive, dict(request.path_params), services)
        return _response(await endpoint.handle(call))

    return route(
        [_framework_path(path) for path in (endpoint.path, *endpoint.aliases)],
        http_method=HttpMethod(endpoint.method),
        name=endpoint.operation_id,
        # The answer says its own status; this one only keeps the framework from refusing a body (a DELETE's
        # default, 204, has none).
        status_code=200,
    )(handle)


def _options_of(path: str, table: EndpointTable, services: Services) -> HTTPRouteHandler:
    allow = table.allow(path)
    access = table.access(path)

    async def options(request: Request[Any, Any, Any]) -> Response[bytes]:
        scope: Any = request.scope
        scope["path_template"] = path
        if access is Access.API:
            scope["user"] = await admit(
                scope, verifier=services.verifier, limiter=services.limiter, refusals=services.refusals
            )
        return Response(content=b"", status_code=204, headers={"Allow": allow})

    return route(_framework_path(path), http_method=HttpMethod.OPTIONS, name=f"options {path}")(options)


def framework_routes(table: EndpointTable, services: Services) -> list[HTTPRouteHandler]:
    """A route for every endpoint, and for every path its OPTIONS. Those come first: Litestar makes its own
    OPTIONS handler for a path whose first handler is not one, and its Allow lists only that first handler's
    methods (litestar-org/litestar#4169)."""
    return [
        *(_options_of(path, table, services) for path in table.paths),
        *(_route_of(endpoint, services) for endpoint in table.endpoints),
    ]


# --- below the framework ---------------------------------------------------------------------------


class DirectRoutes:
    """The endpoints the table marks direct, answered without the framework's routing, dependency injection and
    response machinery, which cost more than a primary-key lookup. They are the same requests as through the
    framework: the same `enter`, the same handler, the same failure answers. Anything else goes on to the
    framework, whose routes answer alike (PETRECORDS_DIRECT_ROUTES=false sends everything there)."""

    def __init__(self, app: ASGIApp, table: EndpointTable, services: Services) -> None:
        self.app = app
        self._match = table.direct_matcher().match
        self._services = services

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = self._match(scope["method"], scope["path"]) if scope["type"] == "http" else None
        if found is None:
            await self.app(scope, receive, send)
            return
        endpoint, params = found
        try:
            answer = await endpoint.handle(await enter(endpoint, scope, receive, params, self._services))
        except Exception as exc:
            answer = error_answer(answer_failure(exc, scope.setdefault("state", {})))
        await send_answer(send, answer)


def exception_handler(table: EndpointTable) -> Callable[[Request[Any, Any, Any], Exception], Response[bytes]]:
    """How the framework answers every failure: a ServiceError body; a 405 with the `Allow` of the path's
    endpoints."""

    def handle(request: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
        scope: Any = request.scope
        error = answer_failure(exc, scope.setdefault("state", {}))
        if isinstance(error, MethodNotAllowed):
            found = table.template_of(scope["path"])
            if found is not None:
                scope["path_template"] = found[0]
                error = MethodNotAllowed(headers={"Allow": table.allow(found[0])})
        return _response(error_answer(error))

    return handle
