"""The dispatch-delivery concern of the tick: one background outbox pass at a time.

A pass (:func:`studio_outbox.deliver_due_dispatches`) runs in a task of its own, so a slow
transport never delays schedules; the tick only starts one when a dispatch is due and none is
running. Without a notify template delivery is paused: due dispatches are then only expired
and parked, at most once per ``tick_seconds``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import aiosqlite

from studio_outbox import deliver_due_dispatches, dispatch_backlog, next_due_at
from studio_state import Clock

from .._observe.summary import delivery_event
from .._settings import SchedulerSettings

logger = logging.getLogger("studio_scheduler_core")

BACKLOG_EVERY = 5.0
"""Seconds between two reads of the dispatch backlog figure (it groups the whole outbox)."""


class Delivery:
    """Starts delivery passes, reports when the next dispatch is due, and the backlog."""

    def __init__(
        self,
        conn: aiosqlite.Connection,
        *,
        settings: SchedulerSettings,
        clock: Clock,
        wake: Callable[[], None],
    ) -> None:
        self._conn = conn
        self._settings = settings
        self._clock = clock
        self._wake = wake
        self._task: asyncio.Task[Any] | None = None
        self._last_start: float | None = None
        self._backlog_at: float | None = None
        self._closing = False
        self.backlog = 0
        """Dispatches due now (read at most every :data:`BACKLOG_EVERY` seconds)."""

    @property
    def running(self) -> bool:
        """Whether a delivery pass is in progress."""
        return self._task is not None and not self._task.done()

    def pending(self) -> list[asyncio.Task[Any]]:
        """The delivery pass still running, if any (for ``wait_idle``)."""
        return [self._task] if self._task is not None and not self._task.done() else []

    async def tick(self, now: float) -> str | None:
        """Start a pass when a dispatch is due and none runs; report what happened."""
        if self.running:
            return "running"
        paused = self._settings.notify_template is None
        if (
            paused
            and self._last_start is not None
            and (now - self._last_start < self._settings.tick_seconds)
        ):
            return None
        due = await next_due_at(self._conn)
        if due is None or float(due) > now:
            return None
        self._last_start = now
        template = None if paused else list(self._settings.notify_template or ())
        self._task = asyncio.create_task(
            deliver_due_dispatches(self._conn, notify_template=template, clock=self._clock),
            name="studio-delivery",
        )
        self._task.add_done_callback(self._done)
        return "started"

    def _done(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            logger.error("dispatch delivery pass failed: %s", exc)
            return
        delivery_event(task.result(), self._settings.notify_template)
        if not self._closing:
            self._wake()

    async def next_due(self, target: float) -> float:
        """``target``, or the next dispatch's due time if earlier (while delivery is live)."""
        if self._settings.notify_template is not None and not self.running:
            due = await next_due_at(self._conn)
            if due is not None:
                target = min(target, float(due))
        return target

    async def refresh_backlog(self, now: float) -> None:
        """Re-read :attr:`backlog` when the last reading is :data:`BACKLOG_EVERY` old."""
        if self._backlog_at is None or now - self._backlog_at >= BACKLOG_EVERY:
            self._backlog_at = now
            backlog = await dispatch_backlog(self._conn, now=now)
            self.backlog = int(backlog.get("due", 0))

    async def aclose(self) -> None:
        """Cancel a running pass and wait for it (its dispatches stay claimable)."""
        self._closing = True
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)
