"""The dispatch-delivery concern of the tick: one background outbox pass at a time.

A pass (:func:`studio_outbox.deliver_due_dispatches`) runs in a task of its own, so a slow
transport never delays schedules; the tick only starts one when a dispatch is due and none is
running.

Rows whose ``deliver_to`` is an ``http(s)://`` URL go to one long-lived webhook transport (its
keep-alive connections are reused across passes, signed with the configured secret); every
other row goes to the argv ``notify_template``, whose program gets the children's environment
(secrets stripped). A transport that is not configured pauses only its own rows: they stay
``pending`` and spend no attempt. With no transport at all, due dispatches are only expired and
parked, at most once per ``tick_seconds``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import aiosqlite

from studio_outbox import (
    CommandTransport,
    WebhookTransport,
    webhook_transport_available,
)
from studio_state import Clock

from .._observe.delivery_events import DeliveryEvents
from .._observe.summary import delivery_event
from .._settings import SchedulerSettings
from . import store
from .outbox_pg import Outbox, PostgresOutbox, SqliteOutbox
from .reports import Transports, TransportState

logger = logging.getLogger("studio_scheduler_core")

BACKLOG_EVERY = 5.0
"""Seconds between two reads of the dispatch backlog figure (it groups the whole outbox)."""


def transports_health(settings: SchedulerSettings, *, webhook: bool) -> Transports:
    """Per transport: ``active`` or ``paused``, the reason, and whether webhooks are signed."""
    argv: TransportState = (
        {"state": "paused", "reason": "no notify template (LIONAGI_STUDIO_NOTIFY_TEMPLATE)"}
        if settings.notify_template is None
        else {"state": "active", "reason": None}
    )
    hook: TransportState
    if not webhook:
        hook = {"state": "paused", "reason": "httpx is not installed", "signed": False}
    elif settings.webhook_secret is None:
        hook = {
            "state": "active",
            "reason": "unsigned: no LIONAGI_STUDIO_WEBHOOK_SECRET",
            "signed": False,
        }
    else:
        hook = {"state": "active", "reason": None, "signed": True}
    return {"argv": argv, "webhook": hook}


class Delivery:
    """Starts delivery passes, reports when the next dispatch is due, and the backlog."""

    def __init__(
        self,
        conn: aiosqlite.Connection,
        *,
        settings: SchedulerSettings,
        clock: Clock,
        wake: Callable[[], None],
        postgres_url: str | None = None,
    ) -> None:
        self._conn = conn
        # On PostgreSQL (``postgres_url``) the outbox's own PostgreSQL functions do the work.
        self._outbox: Outbox = (
            SqliteOutbox(conn) if postgres_url is None else PostgresOutbox(postgres_url)
        )
        self._settings = settings
        self._clock = clock
        self._wake = wake
        self._task: asyncio.Task[Any] | None = None
        self._last_start: float | None = None
        self._backlog_at: float | None = None
        self._closing = False
        self._argv: CommandTransport | None = None
        if settings.notify_template is not None:
            self._argv = CommandTransport(settings.notify_template, env=settings.child_env)
        self._webhook: WebhookTransport | None = None
        if webhook_transport_available():
            self._webhook = WebhookTransport(secret=settings.webhook_secret)
        # SQLite: one event per dispatch outcome, read from the outcomes' transition rows
        # after each pass (PostgreSQL's rows have no order to read them by: one per pass).
        self._events = DeliveryEvents(conn) if postgres_url is None else None
        self.backlog = 0
        """Dispatches due now (read at most every :data:`BACKLOG_EVERY` seconds)."""

    @property
    def running(self) -> bool:
        """Whether a delivery pass is in progress."""
        return self._task is not None and not self._task.done()

    def pending(self) -> list[asyncio.Task[Any]]:
        """The delivery pass still running, if any (for ``wait_idle``)."""
        return [self._task] if self._task is not None and not self._task.done() else []

    @property
    def paused(self) -> bool:
        """True when no transport can send anything."""
        return self._argv is None and self._webhook is None

    def transports(self) -> Transports:
        """Each transport's state (see :func:`transports_health`)."""
        return transports_health(self._settings, webhook=self._webhook is not None)

    async def _due_at(self) -> float | None:
        """When a pass next has sendable work (``None``: nothing, or every transport paused)."""
        if self._argv is not None:
            return await self._outbox.next_due_at()
        if self._webhook is None:
            return None
        return await store.webhook_due_at(self._conn)

    async def tick(self, now: float) -> str | None:
        """Start a pass when a dispatch is due and none runs; report what happened."""
        if self.running:
            return "running"
        paused = self.paused
        if (
            paused
            and self._last_start is not None
            and (now - self._last_start < self._settings.tick_seconds)
        ):
            return None
        due = await (self._outbox.next_due_at() if paused else self._due_at())
        if due is None or float(due) > now:
            return None
        self._last_start = now
        if self._events is not None:
            await self._events.start()
        self._task = asyncio.create_task(self._pass(), name="studio-delivery")
        self._task.add_done_callback(self._done)
        return "started"

    async def _pass(self) -> dict[str, int]:
        """One outbox pass, then the events of the outcomes it recorded."""
        counts = await self._outbox.deliver(
            clock=self._clock, transport=self._argv, webhook_transport=self._webhook
        )
        if self._events is not None:
            try:
                await self._events.report()
            except Exception as exc:  # an event must never fail the pass
                logger.warning("reading the delivery outcomes for their events failed: %s", exc)
        return counts

    def _done(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            logger.error("dispatch delivery pass failed: %s", exc)
            return
        if self._events is None:
            delivery_event(task.result(), self._settings.notify_template)
        if not self._closing:
            self._wake()

    async def next_due(self, target: float) -> float:
        """``target``, or the next dispatch's due time if earlier (while delivery is live)."""
        if not self.running:
            due = await self._due_at()
            if due is not None:
                target = min(target, float(due))
        return target

    async def refresh_backlog(self, now: float) -> None:
        """Re-read :attr:`backlog` when the last reading is :data:`BACKLOG_EVERY` old."""
        if self._backlog_at is None or now - self._backlog_at >= BACKLOG_EVERY:
            self._backlog_at = now
            self.backlog = await self._outbox.due_count(now)

    async def aclose(self) -> None:
        """Cancel a running pass and wait for it (its dispatches stay claimable)."""
        self._closing = True
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)
        await self._outbox.aclose()
        webhook, self._webhook = self._webhook, None
        if webhook is not None:
            try:
                await webhook.aclose()
            except Exception:  # closing kept-alive sockets: nothing is lost if it fails
                logger.exception("closing the webhook transport failed")
