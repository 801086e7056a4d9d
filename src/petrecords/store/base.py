"""The storage interface the service is written against."""

from __future__ import annotations

import abc
import enum
import uuid
from collections.abc import Sequence

import msgspec


class PetRow(msgspec.Struct, frozen=True, kw_only=True):
    id: uuid.UUID
    created_at: int
    created_by: str
    modified_at: int
    modified_by: str
    owner_id: str
    name: str
    pet_type: str
    revision: int


class SortField(enum.Enum):
    ID = "id"
    NAME = "name"
    PET_TYPE = "pet_type"
    OWNER_ID = "owner_id"
    CREATED_AT = "created_at"
    CREATED_BY = "created_by"
    MODIFIED_AT = "modified_at"
    MODIFIED_BY = "modified_by"


class SortKey(msgspec.Struct, frozen=True):
    field: SortField
    descending: bool = False


class PetFilter(msgspec.Struct, frozen=True, kw_only=True):
    """Conditions on pets; every one that is set must hold. Time bounds are epoch milliseconds."""

    owner_id: str | None = None
    ids: tuple[uuid.UUID, ...] | None = None
    pet_types: tuple[str, ...] | None = None
    name_like: tuple[str, ...] = ()
    """LIKE patterns over the lower-cased name (escape `\\`); the name must match each."""
    created_from: int | None = None
    created_before: int | None = None
    modified_from: int | None = None
    modified_before: int | None = None


class PetPageQuery(msgspec.Struct, frozen=True, kw_only=True):
    filter: PetFilter
    sort: tuple[SortKey, ...]
    """Already total: ends with the id."""
    limit: int
    offset: int
    pet_type_order: tuple[str, ...] = ()
    """The pet types in the order `petType` sorts them; others follow, by their lower-cased value."""


class StoredResponse(msgspec.Struct, frozen=True, kw_only=True):
    """A successful response kept for an Idempotency-Key."""

    request_hash: str
    status: int
    body: bytes
    location: str | None
    etag: str | None


class Transaction(abc.ABC):
    """One database transaction, used as an async context manager: it begins on the first statement and
    commits when the block ends normally, rolls back when it raises."""

    @abc.abstractmethod
    async def __aenter__(self) -> Transaction: ...

    @abc.abstractmethod
    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None: ...

    @abc.abstractmethod
    async def get_pet(self, pet_id: uuid.UUID, *, for_update: bool = False) -> PetRow | None: ...

    @abc.abstractmethod
    async def insert_pets(self, new_pets: Sequence[PetRow]) -> None: ...

    @abc.abstractmethod
    async def update_pet(self, pet: PetRow, *, previous: PetRow) -> None: ...

    @abc.abstractmethod
    async def delete_pet(self, pet: PetRow) -> None: ...

    @abc.abstractmethod
    async def count_pets(self, pet_filter: PetFilter) -> int: ...

    @abc.abstractmethod
    async def list_pets(self, query: PetPageQuery) -> Sequence[PetRow]: ...

    @abc.abstractmethod
    async def claim_idempotency_key(self, caller: str, key: str, *, now_ms: int) -> StoredResponse | None:
        """The response kept for this key, or None when the key is free and now held by this transaction.

        Raises IdempotencyInProgress while another transaction holds the key.
        """
        ...

    @abc.abstractmethod
    async def save_idempotent_response(
        self, caller: str, key: str, response: StoredResponse, *, expires_at_ms: int
    ) -> None: ...

    @abc.abstractmethod
    async def purge_expired_idempotency_keys(self, *, now_ms: int, limit: int) -> None: ...


class Store(abc.ABC):
    dialect: str

    @abc.abstractmethod
    def transaction(self, *, write: bool) -> Transaction: ...

    @abc.abstractmethod
    async def schema_is_current(self) -> bool: ...

    @abc.abstractmethod
    def pool_figures(self) -> dict[str, int]: ...

    @abc.abstractmethod
    async def close(self) -> None: ...
