"""The application: create_app(settings) wires settings, storage, auth and routes."""

from __future__ import annotations

import gc
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TypeVar, cast

from litestar import Litestar
from litestar.config.cors import CORSConfig
from litestar.datastructures import State
from litestar.di import Provide

from petrecords.auth import LocalTokenVerifier, TokenVerifier, VerifiedTokenCache, load_or_create_secret
from petrecords.config import READY_FILE_VARIABLE, STOPPING_FILE_VARIABLE, Settings
from petrecords.db import is_sqlite
from petrecords.duties import Duties
from petrecords.http import ASGIApp, ServiceEdge
from petrecords.jwks import JwksTokenVerifier
from petrecords.logs import configure_logging
from petrecords.metrics import Metrics
from petrecords.ops import OPS_ROUTES
from petrecords.ratelimit import RedisRateLimiter, create_rate_limiter
from petrecords.registry import RESOURCES
from petrecords.resources.document import build_openapi
from petrecords.resources.feed import ChangeHub, new_instance_id
from petrecords.resources.fields import PetTypes
from petrecords.resources.routes import DirectRoutes, feed_routes, routes_of
from petrecords.responses import handle_exception
from petrecords.store.base import Store
from petrecords.store.postgres import PostgresStore
from petrecords.store.sqlite import SqliteStore

T = TypeVar("T")


def open_store(settings: Settings) -> Store:
    url = settings.resolved_database_url
    if is_sqlite(url):
        return SqliteStore(
            url,
            busy_timeout_ms=settings.sqlite_busy_timeout_ms,
            statement_timeout_seconds=settings.db_statement_timeout_seconds,
        )
    return PostgresStore(settings)


def _constant(value: T) -> Provide:
    def provide() -> T:
        return value

    provide.__annotations__["return"] = type(value)
    return Provide(provide, use_cache=True, sync_to_thread=False)


def _provide_store(state: State) -> Store:
    store: Store = state.store
    return store


def create_token_verifier(settings: Settings) -> TokenVerifier:
    if settings.auth_mode == "jwks":
        return VerifiedTokenCache(JwksTokenVerifier(settings))
    return VerifiedTokenCache(LocalTokenVerifier(load_or_create_secret(settings), settings))


def create_app(settings: Settings, *, stopping_file: Path | None = None, ready_file: Path | None = None) -> ASGIApp:
    """The service. Under `petrecords serve`, `stopping_file` appears once the server shuts down, and `ready_file`
    once every one of its workers accepts connections (/readyz answers 503 until then)."""
    metrics = Metrics()
    rate_limiter = create_rate_limiter(per_minute=settings.rate_limit, redis_url=settings.redis_url)
    pet_types = PetTypes(settings.pet_types)
    openapi = build_openapi(settings, RESOURCES)

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        app.state.store = open_store(settings)
        duties = Duties(settings, lambda: app.state.store, instance=new_instance_id(), metrics=metrics)
        duties.start()
        try:
            yield
        finally:
            await app.state.change_hub.close()
            await duties.stop()
            await app.state.store.close()
            app.state.store = None
            if isinstance(rate_limiter, RedisRateLimiter):
                await rate_limiter.close()

    app = Litestar(
        route_handlers=[
            *(routes_of(resource, RESOURCES) for resource in RESOURCES.resources),
            feed_routes(RESOURCES),
            *OPS_ROUTES,
        ],
        dependencies={
            "metrics": _constant(metrics),
            "openapi": _constant(openapi),
            "store": Provide(_provide_store, sync_to_thread=False),
        },
        exception_handlers={Exception: handle_exception},
        lifespan=[lifespan],
        openapi_config=None,
        logging_config=None,
        request_max_body_size=settings.max_body_bytes,
        cors_config=CORSConfig(allow_origins=list(settings.cors_origins)) if settings.cors_origins else None,
        debug=False,
    )
    app.state.settings = settings
    app.state.stopping_file = stopping_file
    app.state.ready_file = ready_file
    app.state.pet_types = pet_types
    app.state.store = None
    app.state.rate_limiter = rate_limiter
    app.state.change_hub = ChangeHub(
        lambda: app.state.store, keep_alive_seconds=settings.events_keep_alive_seconds, stopping_file=stopping_file
    )
    app.state.verifier = create_token_verifier(settings)
    return ServiceEdge(
        cast("ASGIApp", DirectRoutes(app, RESOURCES)),
        metrics=metrics,
        store=lambda: app.state.store,
        log_requests=settings.access_log,
    )


def create_app_from_environment() -> ASGIApp:
    """The factory `petrecords serve` hands to each server worker: settings from PETRECORDS_* variables."""
    settings = Settings()
    configure_logging(settings.log_level)
    stopping_file, ready_file = os.environ.get(STOPPING_FILE_VARIABLE), os.environ.get(READY_FILE_VARIABLE)
    app = create_app(
        settings,
        stopping_file=Path(stopping_file) if stopping_file else None,
        ready_file=Path(ready_file) if ready_file else None,
    )
    # A server process's modules, app, routes and statements live as long as it does: out of the collector's
    # full passes, which walked every one of them each time (60 ms pauses under writes, 100 ms with a thousand
    # live streams attached: the p99 of a create).
    gc.collect()
    gc.freeze()
    return app
