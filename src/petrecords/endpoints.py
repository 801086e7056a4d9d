"""The service's endpoints, declared once as data: each one's method, path, operation, what it reads and how
it answers. The framework's routes, the direct routes below it, the OpenAPI document, `Allow`, the `405`s and
the metrics' route templates are all made from one table of them."""

from __future__ import annotations

import enum
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"


class Access(enum.Enum):
    """Who may call an endpoint."""

    API = "api"
    """Callers with a valid bearer token, within their rate: the `/v1` endpoints."""
    OPEN = "open"
    """Anyone, with no token: the operational endpoints."""


@dataclass
class Answer:
    """What an endpoint answers: a status, a body (or a stream of its parts) and headers but its content type."""

    status: int
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    media_type: str | None = JSON
    stream: AsyncIterator[bytes] | None = None

    @property
    def content(self) -> bytes:
        """The body as sent: a JSON body ends with a newline, so that the next prompt, or the next answer of a
        script's curl calls, starts on a line of its own. Added as it is sent, never kept: an idempotent replay of a
        kept body ends as the first answer did, and the change log's records stay as they were encoded."""
        body = self.body
        return body + b"\n" if body and self.media_type == JSON else body


@dataclass
class Call:
    """One request to an endpoint, as both ways of answering hand it over: the caller it was admitted for, the
    path's parameters, the raw query and headers, the body (read, within its limits, when the endpoint reads
    one), and the request's own state (its id)."""

    caller: Any
    params: Mapping[str, str]
    query: bytes
    headers: Sequence[tuple[bytes, bytes]]
    body: bytes
    state: dict[str, Any]
    peer: str | None = None
    """The address of the client's end of the connection, as the server gives it."""

    def header(self, name: bytes) -> str | None:
        """The first value of a request header (`name` in lower case)."""
        for key, value in self.headers:
            if key == name:
                return bytes(value).decode("latin-1")
        return None


Handler = Callable[[Call], Awaitable[Answer]]
Document = Callable[[Any], dict[str, Any]]
"""The OpenAPI operation object of an endpoint, given the document's context (petrecords.openapi_document)."""


@dataclass(frozen=True)
class Endpoint:
    """One operation the service answers: `method` on `path` (a template: `/v1/pets/{petId}`)."""

    method: str
    path: str
    operation_id: str
    tag: str
    summary: str
    handle: Handler
    document: Document
    access: Access = Access.API
    body_media_types: tuple[str, ...] = ()
    """The media types of the body it reads; none: it reads no body."""
    direct: bool = False
    """Answered below the framework (see petrecords.routes.DirectRoutes), an Origin or not: the CORS headers are
    the edge's (petrecords.http.ServiceEdge), added around both ways."""
    aliases: tuple[str, ...] = ()
    """Other paths that are the same endpoint, answered alike, never redirected (`/v1/pets/`)."""
    opens_with_ticket: bool = False
    """A live stream of it opens with a stream ticket instead of a token (a browser's EventSource)."""

    @property
    def reads_body(self) -> bool:
        return bool(self.body_media_types)

    @property
    def parameters(self) -> tuple[str, ...]:
        return tuple(_PARAMETER.findall(self.path))


_PARAMETER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class _Template:
    """A path template split at its one parameter (or with none): matched by prefix and suffix."""

    prefix: str
    parameter: str | None
    suffix: str

    @classmethod
    def of(cls, path: str) -> _Template:
        names = _PARAMETER.findall(path)
        if not names:
            return cls(path, None, "")
        if len(names) > 1:
            raise ValueError(f"{path}: a path takes at most one parameter")
        prefix, _, rest = path.partition("{" + names[0] + "}")
        return cls(prefix, names[0], rest)

    def match(self, path: str) -> dict[str, str] | None:
        if self.parameter is None:
            return {} if path == self.prefix else None
        if not (path.startswith(self.prefix) and path.endswith(self.suffix)):
            return None
        value = path[len(self.prefix) : len(path) - len(self.suffix)]
        if not value or "/" in value:
            return None
        return {self.parameter: value}


class EndpointTable:
    """Every endpoint, and what follows from them: the paths, the methods each allows, and which endpoint a
    request names."""

    def __init__(self, endpoints: Iterable[Endpoint]) -> None:
        self.endpoints = tuple(endpoints)
        self._templates: dict[str, _Template] = {}
        self._methods: dict[str, list[str]] = {}
        seen: set[tuple[str, str]] = set()
        operation_ids: set[str] = set()
        for endpoint in self.endpoints:
            if (endpoint.method, endpoint.path) in seen:
                raise ValueError(f"{endpoint.method} {endpoint.path} is declared twice")
            if endpoint.operation_id in operation_ids:
                raise ValueError(f"the operation id {endpoint.operation_id} is declared twice")
            seen.add((endpoint.method, endpoint.path))
            operation_ids.add(endpoint.operation_id)
            for path in (endpoint.path, *endpoint.aliases):
                self._templates.setdefault(path, _Template.of(path))
                self._methods.setdefault(path, []).append(endpoint.method)
        self._canonical = {alias: endpoint.path for endpoint in self.endpoints for alias in endpoint.aliases}
        # The exact paths first, so that `/v1/changes/tickets` is not read as a record of `/v1/changes`.
        self._ordered = sorted(self._templates.items(), key=lambda item: item[1].parameter is not None)

    @property
    def paths(self) -> tuple[str, ...]:
        """Each path template once, in the order the endpoints declare them (aliases left out)."""
        return tuple(dict.fromkeys(endpoint.path for endpoint in self.endpoints))

    def at(self, path: str) -> tuple[Endpoint, ...]:
        return tuple(endpoint for endpoint in self.endpoints if endpoint.path == self._canonical.get(path, path))

    def allow(self, path: str) -> str:
        """The `Allow` header of a path template: its methods, HEAD wherever GET is, and OPTIONS."""
        methods = set(self._methods[path])
        if "GET" in methods:
            methods.add("HEAD")
        methods.add("OPTIONS")
        return ", ".join(sorted(methods))

    def access(self, path: str) -> Access:
        return self.at(path)[0].access

    def template_of(self, path: str) -> tuple[str, dict[str, str]] | None:
        """The template a concrete path matches (an alias as its canonical path), with its parameters."""
        for template_path, template in self._ordered:
            found = template.match(path)
            if found is not None:
                return self._canonical.get(template_path, template_path), found
        return None

    def template_at(self, path: str) -> str | None:
        """The template of a concrete path, or None when the service has no such path."""
        found = self.template_of(path)
        return None if found is None else found[0]

    def allow_at(self, path: str) -> str | None:
        """The `Allow` of a concrete path, or None when the service has no such path."""
        template = self.template_at(path)
        return None if template is None else self.allow(template)

    def direct_matcher(self) -> DirectMatcher:
        return DirectMatcher([endpoint for endpoint in self.endpoints if endpoint.direct])


class DirectMatcher:
    """Finds the direct endpoint of a request in a few dictionary lookups: by method and exact path, or by
    method, the path's end and what precedes a record id (a UUID in canonical form, 36 characters: another
    form of id is not answered directly, and the framework answers it as the same endpoint would)."""

    ID_LENGTH = 36

    def __init__(self, endpoints: Sequence[Endpoint]) -> None:
        self._exact: dict[tuple[str, str], Endpoint] = {}
        self._around_id: dict[tuple[str, str, str], tuple[Endpoint, str]] = {}
        suffixes: set[str] = set()
        for endpoint in endpoints:
            for path in (endpoint.path, *endpoint.aliases):
                template = _Template.of(path)
                if template.parameter is None:
                    self._exact[(endpoint.method, path)] = endpoint
                else:
                    self._around_id[(endpoint.method, template.prefix, template.suffix)] = (
                        endpoint,
                        template.parameter,
                    )
                    suffixes.add(template.suffix)
        self._suffixes = tuple(sorted(suffixes, key=len, reverse=True))

    def match(self, method: str, path: str) -> tuple[Endpoint, dict[str, str]] | None:
        exact = self._exact.get((method, path))
        if exact is not None:
            return exact, {}
        for suffix in self._suffixes:
            if not path.endswith(suffix):
                continue
            end = len(path) - len(suffix)
            start = end - self.ID_LENGTH
            if start <= 0:
                continue
            found = self._around_id.get((method, path[:start], suffix))
            if found is not None:
                record_id = path[start:end]
                if "/" not in record_id:
                    return found[0], {found[1]: record_id}
        return None
