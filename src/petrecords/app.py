"""The application: create_app(settings) wires settings, storage, auth, routes and the duties of an instance."""

from __future__ import annotations

import functools
import gc
import math
import os
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, NamedTuple, cast

from litestar import Litestar, Router

from petrecords.auth import LocalTokenVerifier, TokenVerifier, VerifiedTokenCache, load_or_create_secret
from petrecords.certificates.public import public_endpoints
from petrecords.certificates.signing import Signer, load_signer
from petrecords.changes.feed import feed_endpoints
from petrecords.changes.horizon import HorizonWatch
from petrecords.changes.live import ChangeHub, new_instance_id
from petrecords.changes.retention import Retention
from petrecords.changes.streams import StreamSlots
from petrecords.config import READY_FILE_VARIABLE, STOPPING_FILE_VARIABLE, Settings
from petrecords.db import is_sqlite
from petrecords.due import due_endpoints
from petrecords.duties import Duties, StoreLookup, every
from petrecords.endpoints import EndpointTable
from petrecords.http import ASGIApp, CorsPolicy, ServiceEdge
from petrecords.jwks import JwksTokenVerifier
from petrecords.logs import configure_logging
from petrecords.metrics import Metrics
from petrecords.openapi_document import build_openapi
from petrecords.ops import ops_endpoints
from petrecords.ratelimit import RedisRateLimiter, create_rate_limiter
from petrecords.registry import RESOURCES
from petrecords.reminders import Reminders
from petrecords.resources.declaration import ResourceSet
from petrecords.resources.handlers import resource_endpoints
from petrecords.resources.sharing import GrantExpiry
from petrecords.routes import DirectRoutes, exception_handler, framework_routes
from petrecords.sealing import Sealer
from petrecords.services import Services
from petrecords.store.postgres import PostgresStore
from petrecords.store.sql import SqlStore
from petrecords.store.sqlite import SqliteStore
from petrecords.store.turns import LongReadTurns
from petrecords.webhooks.deliverer import WebhookDeliveries


def instance_duties(
    settings: Settings, store: StoreLookup, *, resources: ResourceSet, instance: str, metrics: Metrics
) -> dict[str, Callable[[], Coroutine[Any, Any, None]]]:
    """What each instance does besides answering requests, by name, for `Duties` to run."""
    jobs: dict[str, Callable[[], Coroutine[Any, Any, None]]] = {
        "retention": Retention(settings, store, instance=instance, metrics=metrics).run,
        "grant expiry": GrantExpiry(store, resources=resources, metrics=metrics).run,
        "horizon": HorizonWatch(store, metrics=metrics).run,
        "webhooks": WebhookDeliveries(settings, store, resources=resources, instance=instance, metrics=metrics).run,
    }
    if settings.reminders_interval_seconds > 0:
        reminders = Reminders(settings, store)
        jobs["reminders"] = functools.partial(
            every,
            reminders.interval_seconds,
            reminders.remind,
            metrics,
            "reminders",
            "writing reminders",
            pause=reminders.next_wait,
        )
    if settings.nats_url:
        # Here rather than at the top: the NATS client is imported only by the instances that publish.
        from petrecords.changes.publisher import Publisher

        jobs["publisher"] = Publisher(settings, store, instance=instance, metrics=metrics).run
    return jobs


def open_store(settings: Settings, *, turns_directory: Path | None = None) -> SqlStore:
    """The configured database's store. Its long reads take turns with those of every process that opens one with
    the same `turns_directory` (None: with this process's only)."""
    url = settings.resolved_database_url
    store: SqlStore
    if is_sqlite(url):
        store = SqliteStore(
            url,
            busy_timeout_ms=settings.sqlite_busy_timeout_ms,
            statement_timeout_seconds=settings.db_statement_timeout_seconds,
        )
    else:
        store = PostgresStore(settings)
    store.long_read_turns = LongReadTurns(
        settings.long_reads_at_once,
        directory=turns_directory,
        wait_seconds=settings.db_statement_timeout_seconds,
        max_waiting=max(1, store.read_connections // 2),
        share=store.long_read_share,
    )
    return store


def create_token_verifier(settings: Settings) -> TokenVerifier:
    if settings.auth_mode == "jwks":
        return VerifiedTokenCache(JwksTokenVerifier(settings))
    return VerifiedTokenCache(LocalTokenVerifier(load_or_create_secret(settings), settings))


class Parts(NamedTuple):
    """What an application is made of besides its routes."""

    services: Services
    hub: ChangeHub
    slots: StreamSlots


def _parts(settings: Settings, *, stopping_file: Path | None, ready_file: Path | None = None) -> Parts:
    RESOURCES.check()
    services = Services(
        settings=settings,
        resources=RESOURCES,
        verifier=create_token_verifier(settings),
        limiter=create_rate_limiter(per_minute=settings.rate_limit, redis_url=settings.redis_url),
        metrics=Metrics(),
        stopping_file=stopping_file,
        ready_file=ready_file,
    )
    hub = ChangeHub(
        lambda: services.store_or_none,
        keep_alive_seconds=settings.events_keep_alive_seconds,
        stopping_file=stopping_file,
    )
    # The workers of one `petrecords serve` count each caller's streams together, in the directory it gives them.
    slots = StreamSlots(
        settings.events_max_streams_per_caller,
        directory=None if stopping_file is None else stopping_file.parent / "streams",
        retry_after_seconds=math.ceil(settings.events_keep_alive_seconds),
    )
    return Parts(services, hub, slots)


def endpoint_table(parts: Parts, document: Callable[[], bytes], *, signer: Signer | None = None) -> EndpointTable:
    """Every endpoint the service answers: each resource's, the change feed's, the certificates' public ones (signing
    with `signer`) and the operational ones."""
    services = parts.services
    return EndpointTable(
        [
            *(
                endpoint
                for resource in services.resources.resources
                for endpoint in resource_endpoints(resource, services)
            ),
            *due_endpoints(services),
            *feed_endpoints(services, parts.hub, parts.slots),
            *public_endpoints(services, signer),
            *ops_endpoints(services, document),
        ]
    )


def openapi_document(settings: Settings) -> bytes:
    """The OpenAPI document that an application with these settings serves, without starting one."""
    return build_openapi(settings, RESOURCES, endpoint_table(_parts(settings, stopping_file=None), lambda: b""))


def create_app(settings: Settings, *, stopping_file: Path | None = None, ready_file: Path | None = None) -> ASGIApp:
    """The service. Under `petrecords serve`, `stopping_file` appears once the server shuts down, and `ready_file`
    once every one of its workers accepts connections (/readyz answers 503 until then)."""
    parts = _parts(settings, stopping_file=stopping_file, ready_file=ready_file)
    services, hub = parts.services, parts.hub
    rate_limiter = services.limiter
    document = b""
    # Loaded (or made, on first start) with the application, as the token secret is: a certificate signing key that
    # cannot be used stops the start-up with one line naming its setting, instead of answering 500.
    signer = load_signer(settings)
    services.sealer = Sealer(signer.secret)
    table = endpoint_table(parts, lambda: document, signer=signer)
    document = build_openapi(settings, RESOURCES, table)

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        store = open_store(settings, turns_directory=None if stopping_file is None else stopping_file.parent / "turns")
        services.store_or_none = store
        duties = Duties(
            instance_duties(
                settings,
                lambda: services.store_or_none,
                resources=RESOURCES,
                instance=new_instance_id(),
                metrics=services.metrics,
            )
        )
        duties.start()
        try:
            yield
        finally:
            await hub.close()
            await duties.stop()
            current, services.store_or_none = services.store_or_none, None
            if current is not None:
                await current.close()
            if store.long_read_turns is not None:
                store.long_read_turns.close()
            if isinstance(rate_limiter, RedisRateLimiter):
                await rate_limiter.close()

    # The routes in one Router, registered on the app at once: registered one by one, the app validated every
    # handler of a path again with each handler added to it and rebuilt its routing tree each time (a sixth of the
    # CPU of building an app, which every test app and every server worker does).
    app = Litestar(
        route_handlers=[Router("/", route_handlers=framework_routes(table, services))],
        exception_handlers={Exception: exception_handler(table)},
        lifespan=[lifespan],
        openapi_config=None,
        logging_config=None,
        request_max_body_size=settings.max_body_bytes,
        debug=False,
    )
    app.state.services = services
    app.state.hub = hub
    app.state.endpoints = table
    framework = cast("ASGIApp", app)
    return ServiceEdge(
        DirectRoutes(framework, table, services) if settings.direct_routes else framework,
        metrics=services.metrics,
        store=lambda: services.store_or_none,
        log_requests=settings.access_log,
        cors=CorsPolicy(settings.cors_origins, table.allow_at) if settings.cors_origins else None,
        template_of=table.template_at,
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
    settle_collector()
    return app


FULL_COLLECTION_EVERY = 100
"""A full collection after this many collections of the middle generation (CPython's default: 10)."""


def settle_collector() -> None:
    """The garbage collector of a server process, set for a heap that is mostly long-lived.

    The process's modules, app, routes and statements live as long as it does: frozen, out of the collector's full
    passes, which walked every one of them each time (60 ms pauses under writes). What a full pass still walks is
    what lives on beside them, as a live stream's hundred-odd objects do: 45-130 ms with a thousand streams
    attached, on a busy machine. The requests in flight at each middle collection reach the oldest generation
    and count towards the next full pass though most die a moment later, so under load the default made one every
    few seconds, enough to double get by id's p99 beside idle streams. Once every FULL_COLLECTION_EVERY middle
    collections (about 850,000 objects allocated and not freed at once, nine times CPython's spacing) still
    reclaims the cycles that outlived the younger passes, at the cost of more of them waiting: a load made of
    nothing but such cycles left up to 850,000 objects for one pass. The young and middle passes, which free most
    cycles, are as CPython sets them."""
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)
