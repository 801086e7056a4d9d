"""Service configuration: one Settings object, read from PETRECORDS_* variables and passed in."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

DEFAULT_PET_TYPES = (
    "Dog",
    "Cat",
    "Capybara",
    "Other",
    "Bird",
    "Fish",
    "Rabbit",
    "Hamster",
    "GuineaPig",
    "Ferret",
    "Horse",
    "Reptile",
)


class ConfigurationError(Exception):
    """A setting or an environment that keeps a command from running: one line that names it and says what is
    wrong, for the operator."""


STOPPING_FILE_VARIABLE = "PETRECORDS_SERVE_STOPPING_FILE"
"""Set by `petrecords serve` for its workers, not by operators: the file that appears once the server is
shutting down."""


def _split_commas(value: object) -> object:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PETRECORDS_", extra="ignore", frozen=True)

    data_dir: Path = Path("data")
    database_url: str | None = Field(
        default=None, description="sqlite:///PATH or postgresql://…; default: SQLite in the data directory"
    )
    db_pool_size: int = Field(default=10, ge=1, le=200)
    db_connect_timeout_seconds: float = Field(default=5.0, gt=0, le=60)
    db_statement_timeout_seconds: float = Field(default=10.0, gt=0, le=300)
    db_pooler: Literal["none", "session", "transaction"] = Field(
        default="none", description="what sits between the service and PostgreSQL: nothing, or PgBouncer in that mode"
    )
    database_read_urls: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(), description="postgresql://… of streaming replicas that may answer reads, comma-separated"
    )
    database_read_max_lag_seconds: float = Field(
        default=5.0, gt=0, le=3600, description="a replica further behind the primary than this answers no read"
    )
    sqlite_busy_timeout_ms: int = Field(default=5000, ge=0, le=60000)

    auth_mode: Literal["local", "jwks"] = "local"
    auth_secret: SecretStr | None = None
    auth_jwks_url: str | None = None
    auth_issuer: str | None = None
    auth_audience: str | None = None
    auth_algorithms: Annotated[tuple[str, ...], NoDecode] = ("RS256", "ES256", "EdDSA")
    auth_jwks_cache_seconds: int = Field(default=300, ge=1)
    auth_jwks_refresh_cooldown_seconds: float = Field(default=30.0, ge=0)
    auth_jwks_timeout_seconds: float = Field(default=5.0, gt=0, le=5)
    auth_user_claim: str = "sub"
    auth_roles_claim: str = "roles"
    auth_admin_role: str = "admin"
    auth_leeway_seconds: int = Field(default=30, ge=0, le=60)
    auth_max_token_lifetime_seconds: int = Field(
        default=86400, ge=60, description="longest accepted token lifetime (exp - iat, or exp - now without iat)"
    )

    pet_types: Annotated[tuple[str, ...], NoDecode] = DEFAULT_PET_TYPES
    default_page_size: int = Field(default=20, ge=1)
    max_page_size: int = Field(default=100, ge=1, le=10000)
    max_body_bytes: int = Field(default=16384, ge=256, le=10 * 1024 * 1024)
    body_timeout_seconds: float = Field(default=10.0, gt=0, le=300)
    idle_timeout_seconds: float = Field(default=5.0, ge=0.1, le=3600)
    max_connections_per_worker: int = Field(default=10000, ge=16)
    idempotency_ttl_seconds: int = Field(default=86400, ge=86400)
    shutdown_drain_seconds: float = Field(
        default=0.0,
        ge=0,
        le=300,
        description="on SIGTERM, keep serving this long with /readyz answering 503, before refusing connections",
    )

    rate_limit: int = Field(default=6000, ge=0, description="requests per minute per caller; 0 turns it off")
    redis_url: str | None = None
    cors_origins: Annotated[tuple[str, ...], NoDecode] = ()

    changes_retention_days: int = Field(
        default=0,
        ge=0,
        description="how long changes are kept; 0 (the default) keeps them forever, as medical records are",
    )
    events_keep_alive_seconds: float = Field(
        default=10.0, gt=0, le=15, description="how often a quiet live change stream sends a comment"
    )
    nats_url: str | None = Field(default=None, description="nats://host:4222: publish every change to JetStream")

    access_log: bool = True
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    _split_lists = field_validator("pet_types", "cors_origins", "auth_algorithms", "database_read_urls", mode="before")(
        _split_commas
    )

    @field_validator("pet_types")
    @classmethod
    def _pet_types_distinct(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("at least one pet type is required")
        folded = [pet_type.casefold() for pet_type in value]
        if len(set(folded)) != len(folded):
            raise ValueError("pet types must differ in more than letter case")
        return value

    @model_validator(mode="after")
    def _page_sizes_agree(self) -> Settings:
        if self.default_page_size > self.max_page_size:
            raise ValueError("default_page_size must not exceed max_page_size")
        return self

    @model_validator(mode="after")
    def _read_replicas_have_what_they_need(self) -> Settings:
        if not self.database_read_urls:
            return self
        if not (self.database_url or "").startswith(("postgresql://", "postgresql+", "postgres://")):
            raise ValueError("PETRECORDS_DATABASE_READ_URLS needs a PostgreSQL PETRECORDS_DATABASE_URL (the primary)")
        if not self.redis_url:
            raise ValueError(
                "PETRECORDS_DATABASE_READ_URLS needs PETRECORDS_REDIS_URL: every instance keeps there where each "
                "caller's reads must start, so that a caller reads its own writes through any instance"
            )
        return self

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{(self.data_dir / 'petrecords.sqlite3').resolve()}"

    @property
    def secret_file(self) -> Path:
        return self.data_dir / "auth-secret"
