"""The store layer: all SQL lives here, behind one :class:`Store` facade."""

from __future__ import annotations

from .batcher import Batcher
from .db import Database, Row
from .events import EventQueries
from .history import HistoryQueries
from .identity import IdentityQueries
from .once import OnceQueries
from .outcome import DeliveryOutcome, OnceClaim, StaleResolution
from .overview import OverviewQueries
from .pending import PendingQueries
from .refusals import DEFAULT_REFUSALS_KEPT, Refusal, RefusalQueries, RefusalWriter
from .reroute import RerouteQueries
from .rescache import ResolutionCache
from .retention import RetentionQueries
from .rings import Rings
from .todos import TodoQueries
from .versions import VersionQueries
from .webhooks import WebhookQueries


class Store(
    IdentityQueries,
    WebhookQueries,
    EventQueries,
    TodoQueries,
    HistoryQueries,
    RefusalQueries,
    PendingQueries,
    VersionQueries,
    RerouteQueries,
    OnceQueries,
    OverviewQueries,
    RetentionQueries,
):
    """Every query the service layer may run, over one pool."""

    def __init__(
        self,
        db: Database,
        *,
        batch_max: int = 256,
        writes_in_flight: int = 1,
        refusals_kept: int = DEFAULT_REFUSALS_KEPT,
        rings: Rings | None = None,
    ) -> None:
        self.db = db
        # The sinks PostgreSQL rings from the statements that create todos (``at_commit``).
        self.rings = rings or Rings()
        # Refused deliveries are recorded off the response path, the last N per webhook.
        self.refusals = RefusalWriter(db, refusals_kept)
        # Token lookups of concurrent deliveries share one query (resolve_webhook).
        self.resolver = Batcher(self.resolve_webhooks, max_size=batch_max, step="resolve")
        # ... and while nothing behind them changed, not looked up again (rescache).
        self.resolutions = ResolutionCache()
        # Group commit: concurrent deliveries of this worker share one write transaction
        # (``writes_in_flight`` of them under way at once).
        self.writes = Batcher(
            self._flush_writes, max_size=batch_max, step="write", flights=writes_in_flight
        )


__all__ = ["Database", "DeliveryOutcome", "OnceClaim", "Refusal", "Row", "StaleResolution", "Store"]
