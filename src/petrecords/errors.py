"""The one exception tree of the service and its translation into ServiceError bodies.

This module is the single place that knows which HTTP status goes with which ServiceError code.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import msgspec


class ServiceErrorBody(msgspec.Struct, omit_defaults=True):
    """The body of every failure. `errors` appears only on validation failures."""

    code: int
    message: str
    errors: dict[str, list[str]] | None = None


class ServiceError(Exception):
    status: ClassVar[int] = 500
    code: ClassVar[int] = 500
    default_message: ClassVar[str] = "Internal server error."
    meaning: ClassVar[str] = "Unexpected error; the message reveals no internals."
    """When the answer is given, for the API document."""

    def __init__(self, message: str | None = None, *, headers: Mapping[str, str] | None = None) -> None:
        self.message = message or self.default_message
        self.headers = dict(headers or {})
        super().__init__(self.message)

    def body(self) -> ServiceErrorBody:
        return ServiceErrorBody(code=self.code, message=self.message)


class ValidationFailed(ServiceError):
    status, code = 400, 994
    default_message = "The request is not valid."
    meaning = (
        "Malformed JSON, or a field, parameter or header that fails validation or is unknown; `errors` names each "
        "offending one."
    )

    def __init__(self, errors: Mapping[str, list[str]], *, what: str = "request") -> None:
        self.errors = {name: list(messages) for name, messages in errors.items()}
        details = "; ".join(
            f"{name} {' '.join(message.rstrip('.') for message in messages)}" for name, messages in self.errors.items()
        )
        super().__init__(f"Invalid {what}: {details}.")

    @classmethod
    def single(cls, name: str, message: str) -> ValidationFailed:
        return cls({name: [message]})

    def body(self) -> ServiceErrorBody:
        return ServiceErrorBody(code=self.code, message=self.message, errors=self.errors or None)


class MalformedRequest(ServiceError):
    """A request that cannot be read at all (bad JSON, bad header); no per-field detail."""

    status, code = 400, 994
    default_message = "The request is malformed."
    meaning = ValidationFailed.meaning


class Unauthenticated(ServiceError):
    status, code = 401, 997
    default_message = "A valid bearer token is required."
    meaning = "Missing, malformed, expired or otherwise invalid bearer token."

    def __init__(self, message: str | None = None, *, token_sent: bool) -> None:
        challenge = 'Bearer error="invalid_token"' if token_sent else "Bearer"
        super().__init__(message, headers={"WWW-Authenticate": challenge})


class Forbidden(ServiceError):
    status, code = 403, 997
    default_message = "You are not permitted to do this."
    meaning = "Authenticated but not permitted."


class NotFound(ServiceError):
    status, code = 404, 995
    default_message = "The specified resource was not found."
    meaning = "The specified resource was not found (unknown or malformed id, or a record the caller may not see)."


class MethodNotAllowed(ServiceError):
    status, code = 405, 993
    default_message = "The method is not allowed on this path."
    meaning = "Method not allowed on this path (with Allow)."


class BodyTimeout(ServiceError):
    """The request body did not arrive in time. The rest of it may still be on its way, so the connection
    cannot carry another request: it is closed after the answer."""

    status, code = 408, 984
    default_message = "The request body did not arrive in time."
    meaning = "The request body did not arrive in time; the connection is closed after this answer."

    def __init__(self, seconds: float) -> None:
        super().__init__(
            f"The request body did not arrive within {seconds:g} seconds.", headers={"Connection": "close"}
        )


class IdempotencyInProgress(ServiceError):
    status, code = 409, 991
    default_message = "A request with this Idempotency-Key is still in progress."
    meaning = "An idempotent request with the same key is still in progress."


class ReferencedRecord(ServiceError):
    status, code = 409, 985
    default_message = "The record is still referenced and cannot be deleted."
    meaning = "The record is still referenced and cannot be deleted; nothing is deleted."


class Duplicate(ServiceError):
    status, code = 409, 982
    default_message = "The value must be unique, and another record has it."
    meaning = (
        "The value must be unique and another record has it (with Location of that record when the caller may see it)."
    )

    def __init__(self, message: str | None = None, *, location: str | None) -> None:
        super().__init__(message, headers={"Location": location} if location else None)


class CursorExpired(ServiceError):
    status, code = 410, 983
    default_message = "The cursor is older than the changes still kept; start again without it."
    meaning = "A change-feed cursor older than the changes still kept."


class LinkGone(ServiceError):
    status, code = 410, 981
    default_message = "The certificate link was revoked or has expired."
    meaning = "A certificate link that was revoked or has expired."


class PreconditionFailed(ServiceError):
    status, code = 412, 992
    default_message = "The record has changed: If-Match does not match its current ETag."
    meaning = "If-Match does not match the record's current ETag; nothing is written."


class PayloadTooLarge(ServiceError):
    status, code = 413, 989
    default_message = "The request body is larger than the limit."
    meaning = "Request body larger than the limit."

    def __init__(self, limit: int | None = None) -> None:
        super().__init__(f"The request body is larger than the limit of {limit} bytes." if limit else None)


class UnsupportedMediaType(ServiceError):
    status, code = 415, 988
    default_message = "The request body must be sent as application/json (UTF-8)."
    meaning = "Request body not sent as JSON."


class IdempotencyKeyReused(ServiceError):
    status, code = 422, 990
    default_message = "This Idempotency-Key was already used with a different request."
    meaning = "Idempotency-Key reused with a different request body."


class RateLimited(ServiceError):
    status, code = 429, 987
    meaning = "Rate limit exceeded (with Retry-After)."

    def __init__(self, retry_after_seconds: int) -> None:
        super().__init__(
            f"Rate limit exceeded. Retry after {retry_after_seconds} seconds.",
            headers={"Retry-After": str(retry_after_seconds)},
        )


class DatabaseUnavailable(ServiceError):
    """The database cannot serve now. `cause` (a short word) and `detail` (the driver's message, without
    SQL or parameters) are for the logs and metrics, never for the client."""

    status, code = 503, 986
    default_message = "The database is unavailable. Retry later."
    meaning = "The database is unavailable (with Retry-After); the service recovers by itself when it returns."
    retry_after_seconds = 5

    def __init__(self, message: str | None = None, *, cause: str = "other", detail: str = "") -> None:
        super().__init__(message, headers={"Retry-After": str(self.retry_after_seconds)})
        self.cause = cause
        self.detail = detail


class InternalError(ServiceError):
    pass


ANSWERED: tuple[type[ServiceError], ...] = (
    ValidationFailed,
    Unauthenticated,
    Forbidden,
    NotFound,
    MethodNotAllowed,
    BodyTimeout,
    IdempotencyInProgress,
    ReferencedRecord,
    Duplicate,
    CursorExpired,
    LinkGone,
    PreconditionFailed,
    PayloadTooLarge,
    UnsupportedMediaType,
    IdempotencyKeyReused,
    RateLimited,
    InternalError,
    DatabaseUnavailable,
)
"""Every failure the service answers, one class for each status and code: the API document is made from it."""
