"""JSON log lines on standard output."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from typing import Any

import msgspec

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


class AccessLog:
    """One JSON line per request, with the fields of the JSON log format.

    Under `configure_logging` (as `petrecords serve` runs), lines are formatted here and written in batches:
    every request that ends in one turn of the event loop shares one write. The logging module's work for a
    record (a LogRecord, its formatting, a flush) costs several times what the line itself does. Elsewhere
    (the app embedded, or under test), the lines go through the logging module like any other record.
    """

    def __init__(self) -> None:
        self._lines: list[bytes] = []
        self._flush_scheduled = False
        self._second = -1
        self._second_text = ""

    def write(self, message: str, fields: dict[str, Any]) -> None:
        handler = _json_handler
        if handler is None or handler not in logging.getLogger().handlers:
            _access.info(message, extra={"fields": fields})
            return
        if not _access.isEnabledFor(logging.INFO):
            return
        now = time.time()
        second = int(now)
        if second != self._second:
            self._second, self._second_text = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        line: dict[str, Any] = {
            "time": f"{self._second_text}.{int(now * 1000) % 1000:03d}Z",
            "level": "info",
            "logger": "petrecords.access",
            "message": message,
        }
        line.update(fields)
        self._lines.append(_encoder.encode(line))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self._flush_scheduled = False
        handler = _json_handler
        if not self._lines or handler is None:
            return
        text = b"\n".join(self._lines).decode() + "\n"
        self._lines.clear()
        with handler.lock or contextlib.nullcontext():
            handler.stream.write(text)
            handler.flush()
