"""The engine's dispatch delivery: which transports are live, what is due, one pass.

Rows whose ``deliver_to`` is an ``http(s)://`` URL go to one long-lived webhook transport
(its keep-alive connections are reused across passes, signed with the configured secret);
every other row goes to the argv ``notify_template``. A transport that is not configured
pauses only its own rows: they stay ``pending``, spend no attempt, and health says so.
"""

from __future__ import annotations

import logging
from collections.abc import Coroutine
from typing import Any

import aiosqlite

from studio_outbox import (
    CommandTransport,
    WebhookTransport,
    deliver_due_dispatches,
    next_due_at,
    webhook_transport_available,
)
from studio_state import Clock

from .._settings import SchedulerSettings

logger = logging.getLogger("studio_scheduler_core")

# The earliest due time of webhook rows only (argv rows may be due but paused).
_WEBHOOK_DUE = (
    "SELECT min(t) AS due FROM ("
    "SELECT min(next_attempt_at) AS t FROM dispatch_outbox "
    "WHERE status IN ('pending', 'delivering') "
    "AND (deliver_to LIKE 'http://%' OR deliver_to LIKE 'https://%') "
    "UNION ALL SELECT min(expires_at) FROM dispatch_outbox "
    "WHERE status = 'pending' AND expires_at IS NOT NULL "
    "AND (deliver_to LIKE 'http://%' OR deliver_to LIKE 'https://%'))"
)


class DeliveryLane:
    """The engine's transports and its view of when delivery has work."""

    def __init__(self, settings: SchedulerSettings) -> None:
        self._settings = settings
        self._webhook: WebhookTransport | None = None
        # The argv transport's children get the children's environment (secrets stripped).
        self._argv: CommandTransport | None = None
        if settings.notify_template is not None:
            self._argv = CommandTransport(settings.notify_template, env=settings.child_env)

    def open(self) -> None:
        """Build the webhook transport (needs a running loop; httpx is a dependency here)."""
        if self._webhook is None and webhook_transport_available():
            self._webhook = WebhookTransport(secret=self._settings.webhook_secret)

    async def aclose(self) -> None:
        """Close the webhook transport's connections."""
        transport, self._webhook = self._webhook, None
        if transport is not None:
            await transport.aclose()

    @property
    def argv_paused(self) -> bool:
        return self._argv is None

    @property
    def webhook_paused(self) -> bool:
        return self._webhook is None

    @property
    def paused(self) -> bool:
        """True when no transport can send anything."""
        return self.argv_paused and self.webhook_paused

    async def due_at(self, conn: aiosqlite.Connection) -> float | None:
        """When a pass next has sendable work (``None``: nothing, or every transport paused)."""
        if not self.argv_paused:
            return await next_due_at(conn)
        if self.webhook_paused:
            return None
        rows = list(await conn.execute_fetchall(_WEBHOOK_DUE))
        value = rows[0]["due"] if rows else None
        return None if value is None else float(value)

    def deliver(self, conn: aiosqlite.Connection, clock: Clock) -> Coroutine[Any, Any, Any]:
        """One delivery pass over the due rows."""
        return deliver_due_dispatches(
            conn, clock=clock, transport=self._argv, webhook_transport=self._webhook
        )

    def health(self) -> dict[str, Any]:
        """Per transport: ``active`` or ``paused`` with the reason."""
        argv = (
            {"state": "paused", "reason": "no notify template (LIONAGI_STUDIO_NOTIFY_TEMPLATE)"}
            if self.argv_paused
            else {"state": "active", "reason": None}
        )
        if self._webhook is None:
            webhook = {"state": "paused", "reason": "httpx is not installed", "signed": False}
        elif self._settings.webhook_secret is None:
            webhook = {
                "state": "active",
                "reason": "unsigned: no LIONAGI_STUDIO_WEBHOOK_SECRET",
                "signed": False,
            }
        else:
            webhook = {"state": "active", "reason": None, "signed": True}
        return {"argv": argv, "webhook": webhook}
