"""Service configuration: one Settings object, read from PETRECORDS_* variables and passed in.

One file above 600 lines on purpose: it is one subject, every setting with its bound, default and description and
the checks between settings, kept together so that a setting and the rules that name it are read in one place."""

from __future__ import annotations

import contextlib
import difflib
import ipaddress
import os
import re
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

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


DEFAULT_PAGE_SIZE = 100
"""Records per page when a list asks for none: what existing clients of this API expect."""


class ConfigurationError(Exception):
    """A setting or an environment that keeps a command from running: one line that names it and says what is
    wrong, for the operator."""


STOPPING_FILE_VARIABLE = "PETRECORDS_SERVE_STOPPING_FILE"
"""Set by `petrecords serve` for its workers, not by operators: the file that appears once the server is
shutting down."""
READY_FILE_VARIABLE = "PETRECORDS_SERVE_READY_FILE"
"""Set by `petrecords serve` for its workers, not by operators: the file that appears once every worker accepts
connections."""
MIN_SECRET_BYTES = 32
"""The shortest signing secret of local tokens: HS256's own output size."""
ASYMMETRIC_ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA"})
"""The signature algorithms an identity provider's tokens may use."""
_DATABASE_URL_FORM = "sqlite:///PATH or postgresql://user:password@host:port/db"


def _split_commas(value: object) -> object:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


def _check_url(value: str, *, schemes: tuple[str, ...], form: str) -> urllib.parse.SplitResult:
    """`value` as a URL of one of `schemes` (a `+driver` suffix aside); otherwise a ValueError that says what is
    expected, without repeating the value (it may hold a password)."""
    scheme, found, _ = value.partition("://")
    if not found:
        raise ValueError(f"is not a URL; expected {form}")
    if scheme.lower().partition("+")[0] not in schemes:
        raise ValueError(f"{scheme}:// is not supported; expected {form}")
    parts = urllib.parse.urlsplit(value)
    try:
        parts.port  # noqa: B018 - it parses the port
    except ValueError:
        raise ValueError(f"has no valid port; expected {form}") from None
    return parts


WEBHOOKS_RETRY_SECONDS = ("5", "30", "120", "600", "1800", "3600")
"""5 s, 30 s, 2 min, 10 min, 30 min, then every hour (contract, section 17)."""
MAX_WEBHOOKS_RETRY_SECONDS = 7 * 86400


def _retry_wait(text: str) -> float | None:
    """A wait of PETRECORDS_WEBHOOKS_RETRY_SECONDS as a number of seconds, or None when it is not one."""
    try:
        seconds = float(text)
    except ValueError:
        return None
    return seconds if 0 < seconds <= MAX_WEBHOOKS_RETRY_SECONDS else None  # NaN compares false


_DEFAULT_PORTS = {"http": 80, "https": 443}
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*")


def exact_origin(value: str) -> str:
    """`value` as the origin a browser sends in `Origin` (scheme://host[:port], in lower case, without the scheme's
    default port), or a ValueError that says what was meant: a trailing slash, a path or a query never match, since
    a browser sends none, and an origin listed so would be refused without a word."""
    written = value.strip()
    if written in ("*", "null"):
        raise ValueError(f"{written!r} is not an origin; list each origin whose pages may call the API")
    if "://" not in written:
        raise ValueError(f"{written!r} is not an origin; did you mean https://{written.split('/', 1)[0]}?")
    parts = urllib.parse.urlsplit(written)
    scheme, host = parts.scheme.lower(), parts.hostname
    if not _SCHEME.fullmatch(scheme) or not host:
        raise ValueError(f"{written!r} is not an origin (scheme://host[:port])")
    try:
        port = parts.port
        host = host.encode("idna").decode("ascii")  # as a browser sends a name in another script
    except (ValueError, UnicodeError):
        raise ValueError(f"{written!r} is not an origin (scheme://host[:port])") from None
    if ":" in host:
        host = f"[{host}]"
    origin = f"{scheme}://{host}" if port is None or port == _DEFAULT_PORTS.get(scheme) else f"{scheme}://{host}:{port}"
    if parts.username is not None:
        # Not repeated: what precedes the @ may be a password.
        raise ValueError(f"an origin names no user or password; did you mean {origin}?")
    if parts.path or parts.query or parts.fragment or written.endswith(("?", "#")):
        raise ValueError(
            f"{written!r} is not an origin: a browser sends scheme://host[:port] and nothing after it, not even a /; "
            f"did you mean {origin}?"
        )
    return origin


def default_long_reads_at_once() -> int:
    """Half the machine's cores, at least 1.

    The other half stays with the quick requests while long reads run."""
    return max(1, (os.cpu_count() or 2) // 2)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PETRECORDS_", extra="ignore", frozen=True)

    data_dir: Path = Field(
        default=Path("data"), description="where the SQLite database and the generated local signing secret live"
    )
    database_url: str | None = Field(
        default=None,
        description="sqlite:///PATH or postgresql://user:password@host:port/db; default: SQLite in the data directory",
    )
    db_pool_size: int = Field(default=10, ge=1, le=200, description="PostgreSQL connections per process")
    db_connect_timeout_seconds: float = Field(
        default=5.0, gt=0, le=60, description="how long to wait for a PostgreSQL connection, pooled or new"
    )
    db_statement_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        le=300,
        description="PostgreSQL cancels any statement past it; on SQLite a read's statement is interrupted",
    )
    db_idle_in_transaction_timeout_seconds: float = Field(
        default=5.0,
        gt=0,
        le=3600,
        description="PostgreSQL ends a session of the service that stays idle inside a transaction this long (its "
        "client gone mid-transaction), which would hold back the change feed and keep its locks; above the longest "
        "pause the service makes inside a transaction",
    )
    db_tcp_timeout_seconds: int = Field(
        default=10,
        ge=2,
        le=3600,
        description="PostgreSQL ends a connection of the service whose other end has gone silent after about this "
        "long: the server's TCP keepalives and tcp_user_timeout (behind PgBouncer, its own settings of those do it)",
    )
    long_reads_at_once: int = Field(
        default_factory=default_long_reads_at_once,
        ge=1,
        le=1000,
        description="searches that no index serves, over 10,000 records or more, that an instance runs at once; "
        "more wait their turn up to the statement timeout",
    )
    long_read_share: float = Field(
        # A quarter, not half: at half, a get by id's p99 beside two one-letter searches of a million pets was over
        # twice its p99 alone in 8 of 10 rounds; at a quarter, in 4 (bench/results/2026-12-02-long-reads-quarter.md).
        default=0.25,
        gt=0,
        le=1,
        description="PostgreSQL: the share of a database core that the long reads of each turn may take; a count "
        "reads 512 of the table's blocks (or 20,000 matching records, where an index narrows its scope) at a time and "
        "rests between slices in proportion, and a long read's turn rests "
        "after it for the rest of its time (1: a count in one statement, no rests)",
    )
    db_pooler: Literal["none", "session", "transaction"] = Field(
        default="none",
        description="what sits between the service and PostgreSQL: nothing, or PgBouncer in that pool mode",
    )
    database_read_urls: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="postgresql://… of streaming replicas that may answer gets, lists and histories, "
        "comma-separated; needs PETRECORDS_REDIS_URL",
    )
    database_read_max_lag_seconds: float = Field(
        default=5.0, gt=0, le=3600, description="a replica further behind the primary than this answers no read"
    )
    sqlite_busy_timeout_ms: int = Field(
        default=5000, ge=0, le=60000, description="how long an SQLite write waits for another process's write lock"
    )

    auth_mode: Literal["local", "jwks"] = Field(
        default="local",
        description="local: HS256 tokens from petrecords token; jwks: the tokens of an identity provider",
    )
    auth_secret: SecretStr | None = Field(
        default=None,
        description="HS256 secret of local tokens, at least 32 bytes; when unset, a random one is made in the data "
        "directory (mode 0600) on first start",
    )
    auth_previous_secrets: Annotated[tuple[SecretStr, ...], NoDecode] = Field(
        default=(),
        description="local mode: earlier secrets whose tokens are still accepted while a new secret takes over, "
        "comma-separated, each at least 32 bytes; new tokens are signed with the current one",
    )
    auth_jwks_url: str | None = Field(default=None, description="jwks mode: where the provider publishes its keys")
    auth_issuer: str | None = Field(default=None, description="jwks mode: the exact iss that tokens must carry")
    auth_audience: str | None = Field(default=None, description="jwks mode: the aud that tokens must name")
    auth_algorithms: Annotated[tuple[str, ...], NoDecode] = Field(
        default=("RS256", "ES256", "EdDSA"),
        description="jwks mode: the accepted signature algorithms, comma-separated (asymmetric only)",
    )
    auth_jwks_cache_seconds: int = Field(
        default=300, ge=1, description="how long fetched keys are used before they are fetched again"
    )
    auth_jwks_refresh_cooldown_seconds: float = Field(
        default=30.0,
        ge=0,
        description="at most one fetch per this interval when a token names an unknown key, or /readyz finds no key "
        "set fetched yet",
    )
    auth_jwks_timeout_seconds: float = Field(default=5.0, gt=0, le=5, description="how long a key fetch may take")
    auth_user_claim: str = Field(
        default="sub",
        description="the claim that names the caller (an e-mail address; email with most providers): a claim's name, "
        "taken whole when the token has it, or a dotted path into nested objects",
    )
    auth_roles_claim: str = Field(
        default="roles",
        description="the claim that lists the caller's roles, by name or dotted path (realm_access.roles: Keycloak's)",
    )
    auth_admin_role: str = Field(default="admin", description="the role that makes a caller an administrator")
    auth_groups_claim: str = Field(
        default="groups",
        description="the claim that lists the caller's groups (an identity provider's organizations), by name or "
        "dotted path",
    )
    auth_leeway_seconds: int = Field(default=30, ge=0, le=60, description="clock-skew allowance for exp, nbf and iat")
    auth_max_token_lifetime_seconds: int = Field(
        default=86400, ge=60, description="longest accepted token lifetime (exp - iat, or exp - now without iat)"
    )

    pet_types: Annotated[tuple[str, ...], NoDecode] = Field(
        default=DEFAULT_PET_TYPES,
        description="the allowed pet types, comma-separated, matched case-insensitively and returned as spelt here",
    )
    default_page_size: int = Field(
        default=DEFAULT_PAGE_SIZE,  # or the maximum when that is lower (_default_page_size_within_the_maximum)
        ge=1,
        description="records per page when a list asks for none (100, as existing clients expect; at most the maximum)",
    )
    max_page_size: int = Field(
        default=100, ge=1, le=10000, description="a larger pageSize is reduced to this (the answer's pageSize says so)"
    )
    due_soon_days: int = Field(
        default=30,
        ge=0,
        le=3650,
        description="a group's latest dose is due-soon when its dueAt is within this many days after now (the status "
        "endpoint's state; reminders' due-soon moment is dueAt minus these days)",
    )
    reminders_interval_seconds: float = Field(
        default=10.0,
        ge=0,
        le=30,
        description="the longest between an instance's passes that write the reminders whose moment has come (each "
        "within 60 s of it; a pass also runs when the next moment it knows of comes); 0: this instance writes none, "
        "and another instance must",
    )
    max_body_bytes: int = Field(default=16384, ge=256, le=10 * 1024 * 1024, description="a larger request body is 413")
    body_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        le=300,
        description="a request body must arrive within this time once the service starts to read it, or the answer "
        "is 408 and the connection is closed",
    )
    idle_timeout_seconds: float = Field(
        default=5.0,
        ge=0.1,
        le=3600,
        description="a request head must be complete this long after the connection opened or after the previous "
        "answer, or the connection is closed without an answer (idle keep-alive connections too)",
    )
    max_connections_per_worker: int = Field(
        default=10000,
        ge=16,
        description="connections each server process holds at once; more wait in the kernel's queue (lowered, with "
        "a warning, when the open-file limit cannot hold them)",
    )
    idempotency_ttl_seconds: int = Field(
        default=86400, ge=86400, description="how long Idempotency-Key answers are kept (at least a day)"
    )
    shutdown_drain_seconds: float = Field(
        default=0.0,
        ge=0,
        le=300,
        description="on SIGTERM, keep serving this long with /readyz answering 503, before refusing connections",
    )

    rate_limit: int = Field(default=6000, ge=0, description="requests per minute per caller; 0 turns it off")
    redis_url: str | None = Field(
        default=None,
        description="redis://host:6379/0: one rate-limit budget for every instance, and where each caller's reads "
        "must start when there are read replicas",
    )
    cors_origins: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="the origins (https://app.example, scheme://host[:port]) whose pages may call the API, "
        "comma-separated; a path, even a trailing slash, is refused at start",
    )
    direct_routes: bool = Field(
        default=True,
        description="answer the busiest requests below the framework's router; false sends every request through "
        "it (the same answers, slower: for comparisons)",
    )

    changes_retention_days: int = Field(
        default=0,
        ge=0,
        le=1_000_000,
        description="how long changes are kept; 0 (the default) keeps them forever, as medical records are",
    )
    events_max_streams_per_caller: int = Field(
        default=10, ge=1, le=10_000, description="live change streams each caller may hold at once in an instance"
    )
    events_keep_alive_seconds: float = Field(
        default=10.0, gt=0, le=15, description="how often a quiet live change stream sends a comment"
    )
    nats_url: str | None = Field(default=None, description="nats://host:4222: publish every change to JetStream")
    nats_stream: str = Field(
        default="PETRECORDS",
        pattern=r"^[A-Za-z0-9_-]{1,255}$",
        description="the JetStream stream the changes are published to (made when missing); deployments that share "
        "one NATS each need their own",
    )

    signing_key: SecretStr | None = Field(
        default=None,
        description="the PEM private key (Ed25519 or EC P-256) that signs certificates; every instance of a deployment "
        "needs the same; when unset, an Ed25519 key is made in the data directory (mode 0600) on first start",
    )
    signing_previous_keys: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="keys that signed certificates before the current one, comma-separated, each a PEM key (private "
        "or public) or the path of a file of PEM keys: their public keys stay in /.well-known/jwks.json so that what "
        "they signed still verifies; drop one once the last certificate it signed has expired (366 days at most)",
    )
    public_rate_limit: int = Field(
        default=60,
        ge=0,
        description="requests per minute per client address to /public/… and /.well-known/jwks.json (an IPv6 "
        "address counts with its /64); 0 turns it off",
    )
    trusted_proxies: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="addresses and CIDR ranges of the proxies in front of the service, comma-separated: a request "
        "from one of them is counted against the right-most X-Forwarded-For entry that is not one of them",
    )
    webhooks_allow_private: bool = Field(
        default=False,
        description="let webhooks deliver over plain http and to hosts that are, or resolve to, loopback, private, "
        "link-local or other non-public addresses (for private networks and tests); refused otherwise",
    )
    webhooks_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        le=60,
        description="how long a webhook delivery may take, from connecting to the end of the answer; longer is a "
        "failure",
    )
    webhooks_retry_seconds: Annotated[tuple[str, ...], NoDecode] = Field(
        default=WEBHOOKS_RETRY_SECONDS,
        description="the waits, in seconds, before a failed webhook delivery is tried again: the first after the "
        "first failure, the second after the second, and so on, the last again and again (each above 0, at most a "
        "week)",
    )
    webhooks_disable_after_hours: float = Field(
        default=72.0,
        gt=0,
        le=8760,
        description="a webhook whose deliveries have failed for this long (in hours, a decimal number) without a "
        "success is disabled",
    )

    access_log: bool = Field(default=True, description="one JSON line per request on standard output")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        default="INFO", description="the least severe log lines written"
    )

    _split_lists = field_validator(
        "pet_types",
        "cors_origins",
        "auth_algorithms",
        "auth_previous_secrets",
        "database_read_urls",
        "signing_previous_keys",
        "trusted_proxies",
        "webhooks_retry_seconds",
        mode="before",
    )(_split_commas)

    @field_validator("database_url")
    @classmethod
    def _database_url_is_sqlite_or_postgresql(cls, value: str | None) -> str | None:
        if value is not None:
            _check_url(value, schemes=("sqlite", "postgresql", "postgres"), form=_DATABASE_URL_FORM)
        return value

    @field_validator("database_read_urls")
    @classmethod
    def _read_urls_are_postgresql(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for number, url in enumerate(value, 1):
            try:
                _check_url(url, schemes=("postgresql", "postgres"), form="postgresql://user:password@host:port/db")
            except ValueError as exc:
                raise ValueError(f"URL {number} of {len(value)} {exc}") from None
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_url_parses(cls, value: str | None) -> str | None:
        if value is not None:
            # Only when one is set: the commands that never need Redis start without importing it.
            from redis.connection import parse_url

            try:
                parse_url(value)  # type: ignore[no-untyped-call]
            except ValueError as exc:
                raise ValueError(f"{exc}; expected redis://host:6379/0, rediss://… or unix://PATH") from None
        return value

    @field_validator("nats_url")
    @classmethod
    def _nats_url_is_nats(cls, value: str | None) -> str | None:
        if value is not None:
            for url in value.split(","):
                parts = _check_url(url.strip(), schemes=("nats", "tls", "ws", "wss"), form="nats://host:4222")
                if not parts.hostname:
                    raise ValueError("names no host; expected nats://host:4222")
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _trusted_proxies_are_networks(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for entry in value:
            try:
                ipaddress.ip_network(entry, strict=True)
            except ValueError:
                raise ValueError(
                    f"{entry!r} is not an address or a CIDR range (10.0.0.0/8, 2001:db8::/32; no host bits past the "
                    "prefix)"
                ) from None
        return value

    @field_validator("webhooks_retry_seconds")
    @classmethod
    def _retry_waits_are_seconds(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("at least one wait is required")
        for number, wait in enumerate(value, 1):
            if _retry_wait(wait) is None:
                raise ValueError(
                    f"wait {number} of {len(value)} must be a number of seconds above 0 and at most "
                    f"{MAX_WEBHOOKS_RETRY_SECONDS:,}"
                )
        return value

    @field_validator("cors_origins")
    @classmethod
    def _cors_origins_are_origins(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(dict.fromkeys(exact_origin(origin) for origin in value))

    @field_validator("pet_types")
    @classmethod
    def _pet_types_distinct(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("at least one pet type is required")
        folded = [pet_type.casefold() for pet_type in value]
        if len(set(folded)) != len(folded):
            raise ValueError("pet types must differ in more than letter case")
        return value

    @model_validator(mode="before")
    @classmethod
    def _default_page_size_within_the_maximum(cls, data: Any) -> Any:
        """A maximum below 100 set alone is the default too: setting it must not make the default too large."""
        if isinstance(data, dict) and "default_page_size" not in data and "max_page_size" in data:
            with contextlib.suppress(TypeError, ValueError):
                data = {**data, "default_page_size": min(DEFAULT_PAGE_SIZE, int(data["max_page_size"]))}
        return data

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

    @field_validator("auth_previous_secrets")
    @classmethod
    def _previous_secrets_are_long_enough(cls, value: tuple[SecretStr, ...]) -> tuple[SecretStr, ...]:
        for number, secret in enumerate(value, 1):
            size = len(secret.get_secret_value().encode())
            if size < MIN_SECRET_BYTES:
                raise ValueError(
                    f"secret {number} of {len(value)} is {size} bytes long; each must be at least {MIN_SECRET_BYTES}"
                )
        return value

    @model_validator(mode="after")
    def _identity_provider_is_named(self) -> Settings:
        if self.auth_mode != "jwks":
            return self
        if self.auth_previous_secrets:
            raise ValueError(
                "PETRECORDS_AUTH_PREVIOUS_SECRETS is for local tokens; with PETRECORDS_AUTH_MODE=jwks the identity "
                "provider rotates its keys itself"
            )
        missing = [
            f"PETRECORDS_{name.upper()}"
            for name in ("auth_jwks_url", "auth_issuer", "auth_audience")
            if not getattr(self, name)
        ]
        if missing:
            named = missing[0] if len(missing) == 1 else f"{', '.join(missing[:-1])} and {missing[-1]}"
            raise ValueError(
                f"PETRECORDS_AUTH_MODE is jwks: {named} must be set too (where the identity provider's keys are, the "
                "iss and aud its tokens carry)"
            )
        _check_url(self.auth_jwks_url or "", schemes=("https", "http"), form="https://…/jwks.json")
        symmetric = sorted(set(self.auth_algorithms) - ASYMMETRIC_ALGORITHMS)
        if symmetric:
            raise ValueError(
                f"PETRECORDS_AUTH_ALGORITHMS: {', '.join(symmetric)} is not allowed in jwks mode; only asymmetric "
                f"algorithms are ({', '.join(sorted(ASYMMETRIC_ALGORITHMS))})"
            )
        return self

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{(self.data_dir / 'petrecords.sqlite3').resolve()}"

    @property
    def secret_file(self) -> Path:
        return self.data_dir / "auth-secret"

    @property
    def signing_key_file(self) -> Path:
        return self.data_dir / "signing-key.pem"

    @property
    def webhooks_retry_waits(self) -> tuple[float, ...]:
        """PETRECORDS_WEBHOOKS_RETRY_SECONDS as numbers of seconds."""
        return tuple(float(wait) for wait in self.webhooks_retry_seconds)


OTHER_VARIABLES = frozenset(
    {
        # The client commands' (petrecords pets list …).
        "PETRECORDS_URL",
        "PETRECORDS_TOKEN",
        # Set by `petrecords serve` for its workers.
        STOPPING_FILE_VARIABLE,
        READY_FILE_VARIABLE,
        # The load balancer's, in deploy/haproxy.cfg, which a deployment may set beside the service's.
        "PETRECORDS_LB_BIND",
        "PETRECORDS_LB_CERT",
        "PETRECORDS_LB_INTERNAL_BIND",
        "PETRECORDS_LB_STATS_SOCKET",
        # The tests' and the benchmarks'.
        "PETRECORDS_FUZZ_SEED",
        "PETRECORDS_MODEL_EXAMPLES",
    }
)
"""PETRECORDS_* variables that are not settings, and who reads them."""
_OTHER_PATTERN = re.compile(r"PETRECORDS_(APP[0-9]+|TEST_[A-Z0-9_]+|BENCH_[A-Z0-9_]+)")
"""The load balancer's servers of 3.0's deploy/haproxy.cfg (PETRECORDS_APP1…, which an environment written for it may
still hold), and the tests' and benchmarks' own (PETRECORDS_TEST_…)."""


def setting_names() -> list[str]:
    return sorted(f"PETRECORDS_{name.upper()}" for name in Settings.model_fields)


def check_environment(environment: Mapping[str, str]) -> None:
    """Refuse a PETRECORDS_* variable that nothing reads, such as a misspelt setting, which would otherwise be
    ignored without a word: a ConfigurationError naming it, and the closest setting's name when one is close."""
    settings = setting_names()
    known = {*settings, *OTHER_VARIABLES}
    for name in sorted(environment):
        upper = name.upper()  # settings are read whatever their case
        if not upper.startswith("PETRECORDS_") or upper in known or _OTHER_PATTERN.fullmatch(upper):
            continue
        given = upper.removeprefix("PETRECORDS_")
        close = difflib.get_close_matches(given, [setting.removeprefix("PETRECORDS_") for setting in settings], n=1)
        hint = f"did you mean PETRECORDS_{close[0]}?" if close else "see docs/reference/configuration.md"
        raise ConfigurationError(f"{name} is not a setting of this service; {hint}")


def configured_lists(settings: Settings) -> dict[str, tuple[str, ...]]:
    """The lists of values that settings configure, by the name of their setting (see resources.fields.Listed)."""
    return {"pet_types": settings.pet_types}
