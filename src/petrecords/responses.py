"""How every failure becomes an answer: a ServiceError body, whether it is one of ours, one the framework
raises itself, or a crash."""

from __future__ import annotations

import logging
from typing import Any

from litestar.exceptions import HTTPException

from petrecords.errors import (
    DatabaseUnavailable,
    InternalError,
    MalformedRequest,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    ServiceError,
)

logger = logging.getLogger("petrecords.errors")


def _from_framework(exc: HTTPException) -> ServiceError:
    """Errors that Litestar raises itself, before any of our code runs."""
    status = exc.status_code
    if status == 404:
        return NotFound()
    if status == 405:
        return MethodNotAllowed()
    if status == 413:
        return PayloadTooLarge()
    if 400 <= status < 500:
        return MalformedRequest()
    return InternalError()


def to_service_error(exc: BaseException) -> ServiceError:
    if isinstance(exc, ServiceError):
        return exc
    if isinstance(exc, HTTPException):
        return _from_framework(exc)
    return InternalError()


def answer_failure(exc: BaseException, state: dict[str, Any]) -> ServiceError:
    """The ServiceError that answers `exc`, logged as what it is: an outage in one line without a traceback
    (its cause noted in the request's state, for the access log and the metrics), a crash with its traceback."""
    error = to_service_error(exc)
    request_id = state.get("request_id", "-")
    if isinstance(error, DatabaseUnavailable):
        state["database_unavailable"] = error.cause
        logger.warning(
            "request %s: database unavailable (%s)",
            request_id,
            error.cause,
            extra={"fields": {"request_id": request_id, "cause": error.cause, "detail": error.detail}},
        )
    elif isinstance(error, InternalError) or error.status >= 500:
        logger.error("request %s failed", request_id, exc_info=exc)
    return error
