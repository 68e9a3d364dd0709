"""``studio_deliveries_total{outcome,transport}``: delivery outcomes counted per transport.

A delivery pass reports one total per outcome for every row it handled, argv and webhook
alike. Each outcome is also a ``status_transitions`` row of its dispatch, written in the same
transaction as the outcome itself; this tally reads the rows written since the last scrape
and labels each with the transport its ``deliver_to`` routes to (``http(s)://`` → ``webhook``,
anything else → ``argv``), the same rule the outbox sends by.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from prometheus_client import Counter

from studio_outbox import DispatchReason, is_webhook_url
from studio_scheduler_core import latest_transition_seq, read_dispatch_outcomes

from ._sync_reads import open_sync_reader

logger = logging.getLogger("studio_api")

T = TypeVar("T")

#: The outcome each counted reason code is (as the outbox's delivery pass counts them).
OUTCOME_OF = {
    DispatchReason.TRANSPORT_OK: "delivered",
    DispatchReason.AWAITING_ACK: "delivered",
    DispatchReason.RETRY_BACKOFF: "retried",
    DispatchReason.MAX_ATTEMPTS: "dead_letter",
    DispatchReason.ACK_TIMEOUT: "dead_letter",
    DispatchReason.GONE: "dead_letter",
    DispatchReason.EXPIRED_TTL: "expired",
}
OUTCOMES = ("delivered", "retried", "dead_letter", "expired")
TRANSPORTS = ("argv", "webhook")
#: A row purged before the scrape read its outcome: its destination is no longer known.
UNKNOWN = "unknown"
#: Transitions read per query (a scrape after a long pause reads in several batches).
BATCH = 5000


def transport_of(deliver_to: str | None) -> str:
    """``webhook`` for an ``http(s)://`` destination, ``argv`` otherwise (``unknown``: gone)."""
    if deliver_to is None:
        return UNKNOWN
    return "webhook" if is_webhook_url(deliver_to) else "argv"


class DeliveryTally:
    """Adds the delivery outcomes recorded since it started to ``counter``, per transport."""

    def __init__(self, db_path: Path | str, counter: Counter) -> None:
        self._db = db_path
        self._counter = counter
        self._seen: int | None = None
        self._lock = threading.Lock()
        for outcome in OUTCOMES:
            for transport in TRANSPORTS:
                counter.labels(outcome=outcome, transport=transport)

    def start(self) -> None:
        """Count from now on (outcomes recorded before this process started are not its own)."""
        with self._lock:
            try:
                self._seen = self._query(latest_transition_seq)
            except (sqlite3.Error, OSError) as exc:
                logger.warning("metrics: reading the delivery outcomes failed: %s", exc)

    def refresh(self) -> None:
        """Count the outcomes recorded since the last call (a scrape calls it)."""
        with self._lock:
            if self._seen is None:
                return
            try:
                self._query(self._count_new)
            except (sqlite3.Error, OSError) as exc:
                logger.warning("metrics: reading the delivery outcomes failed: %s", exc)

    def _count_new(self, db: sqlite3.Connection) -> None:
        assert self._seen is not None
        while True:
            rows = read_dispatch_outcomes(
                db, after=self._seen, reason_codes=tuple(OUTCOME_OF), limit=BATCH
            )
            for seq, reason, deliver_to in rows:
                self._counter.labels(
                    outcome=OUTCOME_OF[reason], transport=transport_of(deliver_to)
                ).inc()
                self._seen = int(seq)
            if len(rows) < BATCH:
                return

    def _query(self, read: Callable[[sqlite3.Connection], T]) -> T:
        db = open_sync_reader(self._db)
        try:
            return read(db)
        finally:
            db.close()
