"""`petrecords <resource> <action>`: a client of a running server, for operators and scripts, one command per
registered resource. `--json` prints the server's answers as they are; otherwise lists print as tables and
records as `field: value` lines. Standard-library HTTP only, and each resource as `client_resources` names it
rather than its declaration (which brings the server's code along), so that a command starts fast."""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from petrecords.config import ConfigurationError

if TYPE_CHECKING:
    from petrecords.config import Settings

DEFAULT_URL = "http://127.0.0.1:8000"
TIMEOUT_SECONDS = 30.0
_COLUMN_WIDTH = 40
RESOURCES_FILE = Path(__file__).with_name("client_resources.json")
"""Every registered resource as a ClientResource, written from petrecords.registry by `make reference`."""


_ACTIONS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("list", "a page of records; NAME=VALUE are list parameters (petType=Dog, pageIndex=2, …)", ("parameters",)),
    ("get", "one record", ("id",)),
    ("history", "a record's changes, oldest first", ("id",)),
    ("create", "create a record from NAME=VALUE fields (a value is JSON when it parses as JSON)", ("fields",)),
    ("replace", "replace a record with NAME=VALUE fields", ("id", "fields")),
    ("delete", "delete a record", ("id",)),
)


class ClientResource(NamedTuple):
    """What a client command knows of a registered resource: its declaration's command, title, path and
    description."""

    command: str
    title: str
    path: str
    description: str


def client_resources() -> list[ClientResource]:
    return [ClientResource(**entry) for entry in json.loads(RESOURCES_FILE.read_text(encoding="utf-8"))]


def client_resources_json(resources: Sequence[ClientResource]) -> str:
    """RESOURCES_FILE's text for `resources`."""
    return json.dumps([resource._asdict() for resource in resources], indent=2, ensure_ascii=False) + "\n"


def add_client_commands(commands: Any, resources: Sequence[ClientResource]) -> None:
    for resource in resources:
        command = commands.add_parser(
            resource.command,
            help=f"{resource.title} records of a running server",
            description=f"{resource.description} Talks to the server at --url with --token.",
        )
        actions = command.add_subparsers(dest="action", required=True, metavar="ACTION")
        for name, help_text, arguments in _ACTIONS:
            action = actions.add_parser(name, help=help_text, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
            action.add_argument("--url", default=os.environ.get("PETRECORDS_URL", DEFAULT_URL), help="the server")
            action.add_argument(
                "--token",
                default=os.environ.get("PETRECORDS_TOKEN"),
                help="bearer token (default: PETRECORDS_TOKEN; `petrecords token --user …` prints one)",
            )
            action.add_argument("--json", action="store_true", help="print the server's JSON as it is")
            if "id" in arguments:
                action.add_argument("id", help="the record's id")
            if "parameters" in arguments:
                action.add_argument("parameters", nargs="*", metavar="NAME=VALUE")
            if "fields" in arguments:
                action.add_argument("fields", nargs="*", metavar="NAME=VALUE")
            if name in ("replace", "delete"):
                action.add_argument("--if-match", help="only if the record still has this ETag")
            if name == "create":
                action.add_argument("--idempotency-key", help="makes the create safe to retry")
        command.set_defaults(run=_run, resource=resource)


def _pairs(items: Sequence[str], what: str) -> list[tuple[str, str]]:
    pairs = []
    for item in items:
        name, equals, value = item.partition("=")
        if not equals or not name:
            raise ConfigurationError(f"{what} must be NAME=VALUE, not {item!r}")
        pairs.append((name, value))
    return pairs


def _json_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _run(args: argparse.Namespace, settings: Settings) -> None:
    resource: ClientResource = args.resource
    if not args.token:
        raise ConfigurationError("no token: pass --token or set PETRECORDS_TOKEN (`petrecords token --user …`)")
    base = args.url.rstrip("/") + resource.path
    headers = {"Authorization": f"Bearer {args.token}", "Accept": "application/json"}
    body: dict[str, Any] | None = None
    method, url = "GET", base
    if args.action == "list":
        url = f"{base}?{urllib.parse.urlencode(_pairs(args.parameters, 'a list parameter'))}"
    elif args.action in ("get", "history", "delete", "replace"):
        url = f"{base}/{urllib.parse.quote(args.id, safe='')}" + ("/history" if args.action == "history" else "")
        method = {"get": "GET", "history": "GET", "delete": "DELETE", "replace": "PUT"}[args.action]
    else:
        method = "POST"
    if args.action in ("create", "replace"):
        body = {name: _json_value(value) for name, value in _pairs(args.fields, "a field")}
    if getattr(args, "if_match", None):
        headers["If-Match"] = args.if_match
    if getattr(args, "idempotency_key", None):
        headers["Idempotency-Key"] = args.idempotency_key
    status, answer_headers, answer = _request(method, url, headers, body)
    if args.json:
        print(json.dumps(answer, ensure_ascii=False))
    elif status < 300:
        _print_answer(answer, etag=answer_headers.get("etag"))
    if status >= 400:
        if not args.json:
            message = answer.get("message", "") if isinstance(answer, dict) else ""
            code = answer.get("code", "") if isinstance(answer, dict) else ""
            print(f"petrecords {resource.command} {args.action}: {status} ({code}) {message}", file=sys.stderr)
        sys.exit(1)


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), parts.port or {"http": 80, "https": 443}.get(scheme)


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only within the server's origin (scheme, host and port): urllib would send the bearer
    token along to any other."""

    def redirect_request(
        self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> urllib.request.Request | None:
        target = urllib.parse.urljoin(req.full_url, newurl)
        if _origin(target) != _origin(req.full_url):
            raise ConfigurationError(
                f"--url {_origin_text(req.full_url)}: the server redirected to {_origin_text(target)}, another "
                "origin; not followed, so that the token goes nowhere else (give that URL as --url if it is meant)"
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _origin_text(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"


def _request(
    method: str, url: str, headers: dict[str, str], body: dict[str, Any] | None
) -> tuple[int, dict[str, str], Any]:
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers = {**headers, "Content-Type": "application/json"}
    request = urllib.request.Request(url, data=data, headers=headers, method=method)  # noqa: S310 - http(s) URL
    try:
        with urllib.request.build_opener(_SameOriginRedirects).open(request, timeout=TIMEOUT_SECONDS) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, _decoded(response.read())
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}, _decoded(error.read())
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise ConfigurationError(f"--url {url.split('/v1/')[0]}: cannot reach the server: {reason}") from None


def _decoded(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw.decode("utf-8", "replace")


def _cell(value: Any) -> str:
    if isinstance(value, dict):
        value = value.get("name", value.get("id", ""))
    text = "" if value is None else str(value)
    return text if len(text) <= _COLUMN_WIDTH else text[: _COLUMN_WIDTH - 1] + "…"


def _print_answer(answer: Any, *, etag: str | None) -> None:
    if isinstance(answer, dict) and "items" in answer:
        items = answer["items"]
        columns = list(items[0]) if items else []
        rows = [[_cell(item.get(column)) for column in columns] for item in items]
        widths = [max([len(column), *(len(row[index]) for row in rows)]) for index, column in enumerate(columns)]
        for row in [columns, *rows]:
            print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
        if "totalCount" in answer:
            print(f"page {answer['pageIndex']} of {answer['totalPages']}, {answer['totalCount']} in all")
        return
    if isinstance(answer, dict):
        for name, value in answer.items():
            print(
                f"{name}: {_cell(value) if isinstance(value, dict) else json.dumps(value) if value is None else value}"
            )
        if etag:
            print(f"etag: {etag}")
