"""One ``delivery`` event per dispatch outcome, read from the outcomes' transition rows.

The outbox writes every outcome of a send (delivered, put back for retry, dead-lettered,
expired) as a ``status_transitions`` row of its dispatch, in the same transaction as the
outcome itself. After each delivery pass the engine reads the rows written since the last
look (SQLite's ``rowid`` orders them) and emits one event per outcome, with the dispatch's
id, kind, run, transport and reason code: what the pass did, dispatch by dispatch, and never
an outcome that did not commit.
"""

from __future__ import annotations

import logging

import aiosqlite

from studio_outbox import DispatchReason, is_webhook_url

from .events import emit
from .store import DeliveryOutcome, read_delivery_outcomes, transition_position

OUTCOME_OF = {
    DispatchReason.TRANSPORT_OK: "delivered",
    DispatchReason.AWAITING_ACK: "delivered",
    DispatchReason.RETRY_BACKOFF: "retried",
    DispatchReason.MAX_ATTEMPTS: "dead_letter",
    DispatchReason.ACK_TIMEOUT: "dead_letter",
    DispatchReason.GONE: "dead_letter",
    DispatchReason.EXPIRED_TTL: "expired",
}
"""The outcome each delivery reason code is (as the outbox's delivery pass counts them)."""

BATCH = 1000
"""Transition rows read per query."""


def transport_of(deliver_to: str | None) -> str:
    """``webhook`` for an ``http(s)://`` destination, ``argv`` otherwise (``unknown``: purged)."""
    if deliver_to is None:
        return "unknown"
    return "webhook" if is_webhook_url(deliver_to) else "argv"


class DeliveryEvents:
    """Emits the delivery outcomes recorded after the position it started from."""

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn
        self._seen: int | None = None

    async def start(self) -> None:
        """Report from now on (outcomes recorded before are not this process's to report)."""
        if self._seen is None:
            self._seen = await transition_position(self._conn)

    async def report(self) -> int:
        """Emit one event per outcome recorded since the last call; return how many."""
        if self._seen is None:
            await self.start()
            return 0
        emitted = 0
        while True:
            rows = await read_delivery_outcomes(
                self._conn, after=self._seen, reason_codes=tuple(OUTCOME_OF), limit=BATCH
            )
            for row in rows:
                self._seen = row.seq
                _emit(row)
                emitted += 1
            if len(rows) < BATCH:
                return emitted


def _emit(row: DeliveryOutcome) -> None:
    outcome = OUTCOME_OF[row.reason_code]
    transport = transport_of(row.deliver_to)
    dispatch_id = row.entity_id
    detail = row.reason_summary
    emit(
        "delivery",
        f"dispatch {dispatch_id} ({row.kind}) {outcome} via {transport} "
        f"[{row.reason_code}]" + (f": {detail}" if detail else ""),
        level=logging.WARNING if outcome == "dead_letter" else logging.INFO,
        dispatch_id=dispatch_id,
        kind=row.kind,
        schedule_run_id=row.schedule_run_id,
        outcome=outcome,
        status=row.status,
        reason_code=row.reason_code,
        transport=transport,
        attempt=row.attempt,
    )
