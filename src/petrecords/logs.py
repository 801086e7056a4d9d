"""JSON log lines on standard output."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from typing import Any

import msgspec

from petrecords.certificates.links import redact_path

_encoder = msgspec.json.Encoder()
_json_handler: logging.StreamHandler[Any] | None = None
"""The handler `configure_logging` installed, whose stream access lines are written to directly."""
_access = logging.getLogger("petrecords.access")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            line.update(fields)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return _encoder.encode(line).decode()


def configure_logging(level: str) -> None:
    global _json_handler
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter())
    _json_handler = handler
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Alembic narrates every step at INFO; petrecords.migrations says in one line what a migration did.
    logging.getLogger("alembic").setLevel(max(logging.WARNING, root.level))


class AccessLine(msgspec.Struct, omit_defaults=True):
    """An access line: the members of every JSON log line, then the request's. Encoded from a struct, in
    this order, at a fraction of what a dict costs."""

    time: str
    level: str
    logger: str
    message: str
    request_id: str
    method: str
    route: str
    path: str
    status: int
    duration_ms: float
    caller: str | None
    database_unavailable: str | None = None
    """Only on a 503 that the database caused, naming the cause."""
    preflight_refused: str | None = None
    """Only on a browser's preflight that was refused, or whose request the browser will refuse: why."""


_Noted = tuple[float, str, str, str, str, int, float, str | None, str | None, str | None]
"""An access line's figures, as a request notes them: the time, the request's, and the two causes."""


class AccessLog:
    """One JSON line per request, with the fields of the JSON log format.

    Under `configure_logging` (as `petrecords serve` runs), a request only notes its figures; the lines of
    every request that ended in one turn of the event loop are made and written together after it, in one
    encoding call and one write of bytes. The logging module's work for a record (a LogRecord, its
    formatting, a flush) costs several times what the line itself does. Elsewhere (the app embedded, or
    under test), the lines go through the logging module like any other record.
    """

    def __init__(self) -> None:
        self._pending: list[_Noted] = []
        self._flush_scheduled = False
        self._second = -1
        self._second_text = ""

    def write(
        self,
        *,
        request_id: str,
        method: str,
        route: str,
        path: str,
        status: int,
        seconds: float,
        caller: str | None,
        database_unavailable: str | None,
        preflight_refused: str | None = None,
    ) -> None:
        # A certificate link's token opens the certificate to whoever reads it: the log shows the path without it.
        noted = (
            time.time(),
            request_id,
            method,
            route,
            redact_path(path),
            status,
            seconds,
            caller,
            database_unavailable,
            preflight_refused,
        )
        if _json_handler is None:
            self._through_logging(noted)
            return
        self._pending.append(noted)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self._flush_scheduled = False
        pending, self._pending = self._pending, []
        handler = _json_handler
        if not pending or not _access.isEnabledFor(logging.INFO):
            return
        if handler is None or handler not in logging.getLogger().handlers:
            # Logging was set up again since: its handlers decide where lines go.
            for noted in pending:
                self._through_logging(noted)
            return
        lines = [self._line(*noted) for noted in pending]
        data = _encoder.encode_lines(lines)
        stream = handler.stream
        with handler.lock or contextlib.nullcontext():
            binary = getattr(stream, "buffer", None)
            if binary is None:
                stream.write(data.decode())
                stream.flush()
                return
            stream.flush()  # whatever text the handler wrote before goes first
            binary.write(data)
            binary.flush()

    def _line(
        self,
        now: float,
        request_id: str,
        method: str,
        route: str,
        path: str,
        status: int,
        seconds: float,
        caller: str | None,
        database_unavailable: str | None,
        preflight_refused: str | None,
    ) -> AccessLine:
        second = int(now)
        if second != self._second:
            self._second, self._second_text = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        return AccessLine(
            time=f"{self._second_text}.{int(now * 1000) % 1000:03d}Z",
            level="info",
            logger="petrecords.access",
            message=_message(method, route, status, preflight_refused),
            request_id=request_id,
            method=method,
            route=route,
            path=path,
            status=status,
            duration_ms=round(seconds * 1000, 3),
            caller=caller,
            database_unavailable=database_unavailable,
            preflight_refused=preflight_refused,
        )

    @staticmethod
    def _through_logging(noted: _Noted) -> None:
        _, request_id, method, route, path, status, seconds, caller, database_unavailable, preflight_refused = noted
        fields: dict[str, Any] = {
            "request_id": request_id,
            "method": method,
            "route": route,
            "path": path,
            "status": status,
            "duration_ms": round(seconds * 1000, 3),
            "caller": caller,
        }
        if database_unavailable is not None:
            fields["database_unavailable"] = database_unavailable
        if preflight_refused is not None:
            fields["preflight_refused"] = preflight_refused
        _access.info(_message(method, route, status, preflight_refused), extra={"fields": fields})


def _message(method: str, route: str, status: int, preflight_refused: str | None) -> str:
    if preflight_refused is None:
        return f"{method} {route} {status}"
    # Not "OPTIONS … 401", which reads as a token's fault: no browser sends a token with a preflight.
    return f"preflight of {route} refused (answered {status}): {preflight_refused}"
