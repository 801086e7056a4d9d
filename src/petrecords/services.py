"""What the endpoints of one application work with: its settings, its resources, the store (opened by the
application's lifespan), the token verifier, the rate limiter, the metrics and the live change hub."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from petrecords.auth import RefusalLog, TokenVerifier
from petrecords.changes.streams import Tickets
from petrecords.config import Settings, configured_lists
from petrecords.errors import DatabaseUnavailable
from petrecords.metrics import Metrics
from petrecords.ratelimit import RateLimiter
from petrecords.resources.declaration import ResourceSet
from petrecords.resources.fields import Context, SchemaContext
from petrecords.sealing import Sealer
from petrecords.store.base import Store
from petrecords.values import now_ms


@dataclass
class Services:
    settings: Settings
    resources: ResourceSet
    verifier: TokenVerifier
    limiter: RateLimiter | None
    metrics: Metrics
    stopping_file: Path | None = None
    """Appears when the server shuts down."""
    ready_file: Path | None = None
    """Appears once every worker of the server accepts connections."""
    store_or_none: Store | None = None
    """Open while the application runs (its lifespan opens and closes it)."""
    refusals: RefusalLog = field(default_factory=RefusalLog)
    """Why each refused token was refused, for the operator's log."""
    sealer: Sealer | None = None
    """Seals the secrets of kept create answers (see sealing.py); set with the signing key, as the app starts."""

    def __post_init__(self) -> None:
        lists = configured_lists(self.settings)
        self._reading = Context.configured(lists, now_ms=0)
        self.schema_context = SchemaContext(lists)
        self.tickets = Tickets(lambda: self.store)
        """The stream tickets: issued by the feed, redeemed as a stream opens (routes.enter)."""

    @property
    def store(self) -> Store:
        store = self.store_or_none
        if store is None:
            # Between the lifespan's end and the process's: nothing to answer from.
            raise DatabaseUnavailable("The service is not serving.", cause="closed")
        return store

    def context(self) -> Context:
        """What reading a client's values depends on, now."""
        return Context(self._reading.choices, now_ms())
