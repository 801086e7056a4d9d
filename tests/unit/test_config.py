"""Settings from PETRECORDS_* variables (petrecords.config). The one place tests touch the environment:
reading it is what Settings does."""

from __future__ import annotations

import os

import pydantic
import pytest

from petrecords.config import (
    DEFAULT_PET_TYPES,
    STOPPING_FILE_VARIABLE,
    ConfigurationError,
    Settings,
    check_environment,
)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("PETRECORDS_"):
            monkeypatch.delenv(name)


def _settings() -> Settings:
    return Settings(_env_file=None)  # type: ignore[call-arg]


class TestDefaults:
    def test_contract_defaults(self) -> None:
        settings = _settings()
        assert settings.pet_types == DEFAULT_PET_TYPES
        assert settings.pet_types[:4] == ("Dog", "Cat", "Capybara", "Other")
        assert len(settings.pet_types) == 12
        assert settings.changes_retention_days == 0  # changes are kept forever unless told otherwise (section 11)
        assert settings.default_page_size == 100
        assert settings.max_page_size == 100
        assert settings.max_body_bytes == 16 * 1024
        assert settings.rate_limit == 6000
        assert settings.idempotency_ttl_seconds >= 24 * 3600
        assert settings.auth_secret is None
        assert settings.auth_user_claim == "sub"
        assert settings.auth_roles_claim == "roles"
        assert settings.auth_admin_role == "admin"
        assert settings.auth_leeway_seconds <= 60
        assert settings.body_timeout_seconds == 10

    def test_slow_client_bounds(self) -> None:
        settings = _settings()
        assert settings.idle_timeout_seconds == 5
        assert settings.max_connections_per_worker == 10000


class TestPetTypes:
    @pytest.mark.parametrize(
        ("value", "expected"),
        [
            ("Dog, Cat", ("Dog", "Cat")),
            ("Dog,Cat", ("Dog", "Cat")),
            (" Axolotl ,, T-Rex ,", ("Axolotl", "T-Rex")),
            ("Dog", ("Dog",)),
        ],
    )
    def test_comma_separated(self, monkeypatch: pytest.MonkeyPatch, value: str, expected: tuple[str, ...]) -> None:
        monkeypatch.setenv("PETRECORDS_PET_TYPES", value)
        assert _settings().pet_types == expected

    @pytest.mark.parametrize("value", ["Dog, dog", "Cat,Dog,CAT", "GuineaPig, guineapig"])
    def test_duplicates_differing_only_in_case_are_rejected(self, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
        monkeypatch.setenv("PETRECORDS_PET_TYPES", value)
        with pytest.raises(pydantic.ValidationError, match="pet_types"):
            _settings()

    @pytest.mark.parametrize("value", ["", " , ,"])
    def test_at_least_one(self, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
        monkeypatch.setenv("PETRECORDS_PET_TYPES", value)
        with pytest.raises(pydantic.ValidationError):
            _settings()

    def test_keyword_tuple(self) -> None:
        assert Settings(pet_types=("Dog", "Cat"), _env_file=None).pet_types == ("Dog", "Cat")  # type: ignore[call-arg]


class TestPageSizes:
    def test_from_environment(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("PETRECORDS_DEFAULT_PAGE_SIZE", "50")
        monkeypatch.setenv("PETRECORDS_MAX_PAGE_SIZE", "50")
        settings = _settings()
        assert (settings.default_page_size, settings.max_page_size) == (50, 50)

    def test_default_above_maximum_is_rejected(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("PETRECORDS_DEFAULT_PAGE_SIZE", "101")
        with pytest.raises(pydantic.ValidationError, match="default_page_size"):
            _settings()

    def test_default_above_configured_maximum_is_rejected(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("PETRECORDS_MAX_PAGE_SIZE", "10")
        monkeypatch.setenv("PETRECORDS_DEFAULT_PAGE_SIZE", "20")
        with pytest.raises(pydantic.ValidationError, match="default_page_size"):
            _settings()

    def test_a_lower_maximum_is_the_default_when_no_default_is_set(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("PETRECORDS_MAX_PAGE_SIZE", "10")
        assert _settings().default_page_size == 10

    @pytest.mark.parametrize(
        ("name", "value"), [("PETRECORDS_MAX_PAGE_SIZE", "0"), ("PETRECORDS_DEFAULT_PAGE_SIZE", "0")]
    )
    def test_sizes_are_positive(self, monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
        monkeypatch.setenv(name, value)
        with pytest.raises(pydantic.ValidationError):
            _settings()


class TestOtherVariables:
    def test_database_url_secret_and_data_dir(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str]
    ) -> None:
        monkeypatch.setenv("PETRECORDS_DATABASE_URL", "postgresql://pets@db.example/pets")
        monkeypatch.setenv("PETRECORDS_AUTH_SECRET", "s" * 40)
        monkeypatch.setenv("PETRECORDS_DATA_DIR", str(tmp_path))
        settings = _settings()
        assert settings.resolved_database_url == "postgresql://pets@db.example/pets"
        assert settings.auth_secret is not None
        assert settings.auth_secret.get_secret_value() == "s" * 40
        assert "s" * 40 not in repr(settings)
        assert str(settings.data_dir) == str(tmp_path)

    def test_default_database_is_sqlite_in_the_data_dir(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str]
    ) -> None:
        monkeypatch.setenv("PETRECORDS_DATA_DIR", str(tmp_path))
        url = _settings().resolved_database_url
        assert url.startswith("sqlite:///")
        assert url.removeprefix("sqlite:///").startswith(str(tmp_path))

    def test_rate_limit_zero_turns_it_off(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("PETRECORDS_RATE_LIMIT", "0")
        assert _settings().rate_limit == 0

    def test_negative_rate_limit_is_rejected(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("PETRECORDS_RATE_LIMIT", "-1")
        with pytest.raises(pydantic.ValidationError):
            _settings()

    def test_idempotency_keys_are_kept_at_least_a_day(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("PETRECORDS_IDEMPOTENCY_TTL_SECONDS", "3600")
        with pytest.raises(pydantic.ValidationError):
            _settings()

    def test_keyword_arguments_win_over_the_environment(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("PETRECORDS_RATE_LIMIT", "5")
        assert Settings(rate_limit=7, _env_file=None).rate_limit == 7  # type: ignore[call-arg]

    def test_settings_are_frozen(self) -> None:
        settings = _settings()
        with pytest.raises(pydantic.ValidationError):
            settings.rate_limit = 1  # type: ignore[misc]


class TestSlowClientBounds:
    @pytest.mark.parametrize(
        ("name", "value", "field"),
        [
            ("PETRECORDS_BODY_TIMEOUT_SECONDS", "0.5", "body_timeout_seconds"),
            ("PETRECORDS_IDLE_TIMEOUT_SECONDS", "30", "idle_timeout_seconds"),
            ("PETRECORDS_MAX_CONNECTIONS_PER_WORKER", "500", "max_connections_per_worker"),
        ],
    )
    def test_read_from_the_environment(
        self, monkeypatch: pytest.MonkeyPatch, name: str, value: str, field: str
    ) -> None:
        monkeypatch.setenv(name, value)
        assert getattr(_settings(), field) == float(value)

    @pytest.mark.parametrize(
        ("name", "value"),
        [
            ("PETRECORDS_BODY_TIMEOUT_SECONDS", "0"),
            ("PETRECORDS_BODY_TIMEOUT_SECONDS", "-1"),
            ("PETRECORDS_IDLE_TIMEOUT_SECONDS", "0"),
            ("PETRECORDS_MAX_CONNECTIONS_PER_WORKER", "0"),
        ],
    )
    def test_values_that_would_disarm_them_are_rejected(
        self, monkeypatch: pytest.MonkeyPatch, name: str, value: str
    ) -> None:
        monkeypatch.setenv(name, value)
        with pytest.raises(pydantic.ValidationError):
            _settings()


class TestDeploymentSettings:
    def test_defaults_are_a_direct_connection_without_replicas_or_drain(self) -> None:
        settings = _settings()
        assert settings.db_pooler == "none"
        assert settings.database_read_urls == ()
        assert settings.shutdown_drain_seconds == 0

    def test_read_urls_are_comma_separated(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("PETRECORDS_DATABASE_URL", "postgresql://primary/db")
        monkeypatch.setenv("PETRECORDS_REDIS_URL", "redis://127.0.0.1:6379/0")
        monkeypatch.setenv("PETRECORDS_DATABASE_READ_URLS", "postgresql://one/db, postgresql://two/db")
        monkeypatch.setenv("PETRECORDS_DB_POOLER", "transaction")
        settings = _settings()
        assert settings.database_read_urls == ("postgresql://one/db", "postgresql://two/db")
        assert settings.db_pooler == "transaction"

    def test_replicas_need_redis_and_a_postgresql_primary(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("PETRECORDS_DATABASE_READ_URLS", "postgresql://one/db")
        with pytest.raises(pydantic.ValidationError, match="PostgreSQL PETRECORDS_DATABASE_URL"):
            _settings()
        monkeypatch.setenv("PETRECORDS_DATABASE_URL", "postgresql://primary/db")
        with pytest.raises(pydantic.ValidationError, match="PETRECORDS_REDIS_URL"):
            _settings()

    def test_an_unknown_pooler_is_refused(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("PETRECORDS_DB_POOLER", "statement")
        with pytest.raises(pydantic.ValidationError):
            _settings()


class TestUrls:
    @pytest.mark.parametrize(
        ("name", "value"),
        [
            ("PETRECORDS_DATABASE_URL", "garbage"),
            ("PETRECORDS_DATABASE_URL", "mysql://pets:secret@db/pets"),
            ("PETRECORDS_DATABASE_URL", "postgresql://db:port/pets"),
            ("PETRECORDS_REDIS_URL", "garbage"),
            ("PETRECORDS_REDIS_URL", "redis://cache:port/0"),
            ("PETRECORDS_REDIS_URL", "http://cache:6379"),
            ("PETRECORDS_NATS_URL", "garbage"),
            ("PETRECORDS_NATS_URL", "http://127.0.0.1:4222"),
        ],
    )
    def test_a_malformed_url_is_refused_naming_it(self, monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
        monkeypatch.setenv(name, value)
        with pytest.raises(pydantic.ValidationError, match=name.removeprefix("PETRECORDS_").lower()) as raised:
            _settings()
        assert "secret" not in " ".join(error["msg"] for error in raised.value.errors())  # what the command shows

    @pytest.mark.parametrize("value", ["garbage", "mysql://replica/pets", "postgresql://one/db, sqlite:///x"])
    def test_a_read_url_that_is_not_postgresql_is_refused_naming_it(
        self, monkeypatch: pytest.MonkeyPatch, value: str
    ) -> None:
        monkeypatch.setenv("PETRECORDS_DATABASE_URL", "postgresql://primary/db")
        monkeypatch.setenv("PETRECORDS_REDIS_URL", "redis://127.0.0.1:6379/0")
        monkeypatch.setenv("PETRECORDS_DATABASE_READ_URLS", value)
        with pytest.raises(pydantic.ValidationError, match="database_read_urls"):
            _settings()

    @pytest.mark.parametrize(
        ("name", "value"),
        [
            ("PETRECORDS_DATABASE_URL", "sqlite:///pets.sqlite3"),
            ("PETRECORDS_DATABASE_URL", "sqlite://"),
            ("PETRECORDS_DATABASE_URL", "postgres://pets@db/pets"),
            ("PETRECORDS_DATABASE_URL", "postgresql+asyncpg://pets:pw@db:5433/pets"),
            ("PETRECORDS_REDIS_URL", "rediss://user:pw@cache:6380/2"),
            ("PETRECORDS_REDIS_URL", "unix:///run/redis.sock"),
            ("PETRECORDS_NATS_URL", "nats://127.0.0.1:4222"),
            ("PETRECORDS_NATS_URL", "tls://nats-1:4222,tls://nats-2:4222"),
        ],
    )
    def test_urls_of_each_kind_are_taken(self, monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
        monkeypatch.setenv(name, value)
        assert getattr(_settings(), name.removeprefix("PETRECORDS_").lower()) == value


class TestIdentityProvider:
    def test_jwks_mode_without_its_settings_is_refused_naming_them(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("PETRECORDS_AUTH_MODE", "jwks")
        monkeypatch.setenv("PETRECORDS_AUTH_ISSUER", "https://id.example")
        with pytest.raises(pydantic.ValidationError) as raised:
            _settings()
        message = str(raised.value)
        assert "PETRECORDS_AUTH_JWKS_URL and PETRECORDS_AUTH_AUDIENCE must be set" in message

    def test_a_symmetric_algorithm_is_refused(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("PETRECORDS_AUTH_MODE", "jwks")
        monkeypatch.setenv("PETRECORDS_AUTH_JWKS_URL", "https://id.example/jwks.json")
        monkeypatch.setenv("PETRECORDS_AUTH_ISSUER", "https://id.example")
        monkeypatch.setenv("PETRECORDS_AUTH_AUDIENCE", "pets")
        assert _settings().auth_mode == "jwks"
        monkeypatch.setenv("PETRECORDS_AUTH_ALGORITHMS", "RS256,HS256")
        with pytest.raises(pydantic.ValidationError, match="PETRECORDS_AUTH_ALGORITHMS: HS256"):
            _settings()


class TestUnknownVariables:
    @pytest.mark.parametrize(
        ("name", "closest"),
        [
            ("PETRECORDS_RATELIMIT", "PETRECORDS_RATE_LIMIT"),
            ("PETRECORDS_DATABASE_READ_URL", "PETRECORDS_DATABASE_READ_URLS"),
            ("PETRECORDS_DATA_DIRECTORY", "PETRECORDS_DATA_DIR"),
            ("petrecords_acess_log", "PETRECORDS_ACCESS_LOG"),
            ("PETRECORDS_NATS_STREAMS", "PETRECORDS_NATS_STREAM"),
        ],
    )
    def test_a_misspelt_setting_is_refused_naming_the_closest(self, name: str, closest: str) -> None:
        with pytest.raises(
            ConfigurationError, match=f"^{name} is not a setting of this service; did you mean {closest}"
        ):
            check_environment({"PETRECORDS_RATE_LIMIT": "5", name: "5"})

    def test_a_name_close_to_no_setting_is_refused(self) -> None:
        with pytest.raises(ConfigurationError, match=r"^PETRECORDS_XYZZY is not a setting"):
            check_environment({"PETRECORDS_XYZZY": "1"})

    def test_every_setting_and_what_others_read_is_taken(self) -> None:
        environment = {f"PETRECORDS_{name.upper()}": "x" for name in Settings.model_fields}
        environment.update(
            dict.fromkeys(
                (
                    "PETRECORDS_URL",
                    "PETRECORDS_TOKEN",
                    STOPPING_FILE_VARIABLE,
                    "PETRECORDS_TEST_POSTGRES_URL",
                    "PETRECORDS_TEST_SLOW_CLIENTS",
                    "PETRECORDS_BENCH_POSTGRES_URL",
                    "PETRECORDS_FUZZ_SEED",
                    "PETRECORDS_MODEL_EXAMPLES",
                    "PETRECORDS_LB_BIND",
                    "PETRECORDS_LB_CERT",
                    "PETRECORDS_LB_INTERNAL_BIND",
                    "PETRECORDS_LB_STATS_SOCKET",
                    "PETRECORDS_APP1",
                    "PETRECORDS_APP12",
                    "petrecords_rate_limit",
                    "PATH",
                    "OTHER_PETRECORDS_THING",
                ),
                "x",
            )
        )
        check_environment(environment)


class TestRetention:
    def test_days_are_bounded(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("PETRECORDS_CHANGES_RETENTION_DAYS", str(10**12))
        with pytest.raises(pydantic.ValidationError, match="changes_retention_days"):
            _settings()
