"""Delivery on SQLite: scan, decide, then the pipelined loop's claims, sends and outcomes."""

from __future__ import annotations

import asyncio
import collections
import logging
import sqlite3
import time
from collections.abc import Callable, Sequence

import aiosqlite

import studio_state
from studio_state import Clock, system_clock

from . import _claimant as claimant
from ._constants import DELIVERING
from ._drive import Steps, TransitionRow, is_busy, record, run_sync
from ._exceptions import InvalidArgument
from ._loop import COUNT_KEYS, TRANSPORT_DEADLINE_SECONDS, Finished, Loop, Ready
from ._routing import Routes
from ._secret import parse_webhook_secret
from ._steps import (
    Change,
    Claimed,
    DueRow,
    apply_changes,
    claim,
    decide_without_send,
    outcome,
    renew,
    scan,
)
from ._transport import CommandTransport
from .abc import Transport

__all__ = ["TRANSPORT_DEADLINE_SECONDS", "deliver", "deliver_due_dispatches"]

DEFAULT_DELIVERY_ACTOR = "studio_outbox.delivery"

logger = logging.getLogger("studio_outbox")

# A write step that finds the database locked by another process waits and tries again until
# it lands: an outcome that is not written would become a second send after the lease.
_BUSY_RETRY_FIRST = 0.05
_BUSY_RETRY_MAX = 1.0
_BUSY_LOG_EVERY = 10.0

# A step that began this long after it was launched waited for the write lock: it reads the
# clock again (a claim's lease must count from when the claim lands).
_STALE_SECONDS = 0.5

# What a write step applied, renewed and claimed, and when (monotonic) its claims landed.
StepResult = tuple[list[Change], list[Claimed], list[Claimed], float]


def positive_int(field: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(field, f"must be an int, got {type(value).__name__}")
    if value < 1:
        raise InvalidArgument(field, f"must be at least 1, got {value}")
    return value


async def deliver_due_dispatches(
    conn: aiosqlite.Connection,
    *,
    now: float | None = None,
    notify_template: list[str] | None = None,
    limit: int = 100,
    concurrency: int = 4,
    clock: Clock = system_clock,
    transport: Transport | None = None,
    actor: str | None = None,
    webhook_secret: str | None = None,
    webhook_transport: Transport | None = None,
) -> dict[str, int]:
    """Deliver the dispatches that are due; returns counts of what happened.

    The scan takes at most ``limit`` due rows (``pending`` with ``next_attempt_at <= now``
    and ``delivering`` rows whose claim lease lapsed), oldest due first, plus ``pending``
    rows in backoff whose ``expires_at`` has passed. Rows past their expiry become
    ``expired`` and rows out of attempts become ``dead_letter`` before any transport runs.
    The rest are claimed (a guarded UPDATE on ``(id, status, attempt)``: only one of several
    overlapping scanners wins a row) and sent, at most ``concurrency`` at a time; each
    outcome is written by one transaction guarded on ``(id, 'delivering', attempt)``.

    ``now`` fixes the time of every decision; without it, ``clock`` is read at every claim
    and every outcome. ``transport`` (any :class:`studio_outbox.abc.Transport`) replaces the
    argv transport built from ``notify_template``. With neither, delivery of those rows is
    paused: they are not claimed, no attempt is spent and they are not counted.

    Rows whose ``deliver_to`` is an ``http://`` or ``https://`` URL go to the webhook
    transport instead: ``webhook_transport`` when given (a long-lived
    :class:`studio_outbox.WebhookTransport`, kept open, so its connections are reused across
    passes), else one built for this pass with ``webhook_secret`` (``whsec_<base64>``; the
    requests are unsigned without it) and closed at its end. Without httpx (the ``http``
    extra) and without ``webhook_transport``, URL rows are paused the same way.

    Returns ``{"attempted", "delivered", "retried", "dead_letter", "expired"}``: sends
    started, successful sends (including resends of rows awaiting an ack), failed sends put
    back for retry, rows moved to ``dead_letter`` and rows moved to ``expired``.
    """
    return await deliver(
        conn,
        now=now,
        notify_template=notify_template,
        limit=limit,
        concurrency=concurrency,
        clock=clock,
        transport=transport,
        actor=actor,
        webhook_secret=webhook_secret,
        webhook_transport=webhook_transport,
    )


async def deliver(
    conn: aiosqlite.Connection,
    *,
    now: float | None = None,
    notify_template: Sequence[str] | None = None,
    limit: int = 100,
    concurrency: int = 4,
    clock: Clock = system_clock,
    transport: Transport | None = None,
    actor: str | None = None,
    stop: asyncio.Event | None = None,
    webhook_secret: str | None = None,
    webhook_transport: Transport | None = None,
) -> dict[str, int]:
    """:func:`deliver_due_dispatches` with a ``stop`` event: once set, nothing new is
    claimed, and the sends in flight finish and are recorded before returning."""
    limit = positive_int("limit", limit)
    concurrency = positive_int("concurrency", concurrency)
    if now is not None and (isinstance(now, bool) or not isinstance(now, int | float)):
        raise InvalidArgument("now", f"must be epoch seconds, got {type(now).__name__}")
    if transport is None and notify_template is not None:
        transport = CommandTransport(notify_template)
    if transport is not None and not isinstance(transport, Transport):
        raise InvalidArgument(
            "transport", f"must implement studio_outbox.abc.Transport, got {transport!r}"
        )
    if webhook_transport is not None and not isinstance(webhook_transport, Transport):
        raise InvalidArgument(
            "webhook_transport",
            f"must implement studio_outbox.abc.Transport, got {webhook_transport!r}",
        )
    if webhook_secret is not None:
        parse_webhook_secret(webhook_secret, field="webhook_secret")
    counts = dict.fromkeys(COUNT_KEYS, 0)
    routes = Routes(transport, webhook_transport, webhook_secret=webhook_secret, clock=clock)
    if routes.paused:
        return counts
    if studio_state.in_owned_transaction(conn):
        raise InvalidArgument(
            "conn",
            "delivery must not run inside an open transaction (transports run between "
            "its own short transactions)",
        )
    read: Callable[[], float] = clock if now is None else (lambda: float(now))
    scan_now = read()
    rows = [row for row in await scan(conn, scan_now, limit) if routes.can_send(row.deliver_to)]
    decided: list[Change] = []
    sendable: list[DueRow] = []
    for row in rows:
        if still_held(row, scan_now):
            continue
        change = decide_without_send(row, scan_now)
        if change is not None:
            decided.append(change)
        elif not row.sweep:
            sendable.append(row)
    loop = _Pass(conn, sendable, routes, read, actor or DEFAULT_DELIVERY_ACTOR, counts, stop)
    try:
        await loop.run(decided, concurrency)
    finally:
        await routes.aclose()
    return counts


def still_held(row: DueRow, now: float) -> bool:
    """A lapsed lease whose sender is still running (its outcome write may be waiting)."""
    return (
        row.status == DELIVERING
        and now - row.next_attempt_at < claimant.LIVE_SENDER_GRACE_SECONDS
        and claimant.sender_alive(row.claimed_by, row.id, row.attempt)
    )


def step_steps(
    now: float,
    decided: list[Change],
    finished: Finished,
    batch: list[DueRow],
    actor: str,
    stale: Sequence[Claimed] = (),
) -> Steps[tuple[list[Change], list[Claimed], list[Claimed]]]:
    """One write step's statements (inside the step's transaction): the changes, the outcomes
    (each at the time its send ended), the renewals of ``stale`` claims and the new claims;
    returns what applied of each."""
    changes = list(decided)
    changes += [outcome(item, result, ended) for item, result, ended in finished]
    to_claim: list[DueRow] = []
    for row in batch:
        # Re-decided at claim time: a row may have expired while waiting for a slot.
        change = decide_without_send(row, now)
        if change is None:
            to_claim.append(row)
        else:
            changes.append(change)
    applied: list[Change] = []
    claimed: list[Claimed] = []
    transitions: list[TransitionRow] = []
    if changes:
        applied, transitions = yield from apply_changes(changes, now, actor)
    renewed = (yield from renew(stale, now)) if stale else []
    if to_claim:
        claimed, claim_transitions = yield from claim(to_claim, now, actor)
        transitions += claim_transitions
    yield from record(transitions)
    return applied, renewed, claimed


class _Pass(Loop[list[DueRow]]):
    """The loop over rows scanned up front; each write step is one trip to SQLite's thread."""

    def __init__(
        self,
        conn: aiosqlite.Connection,
        rows: Sequence[DueRow],
        transport: Transport,
        read: Callable[[], float],
        actor: str,
        counts: dict[str, int],
        stop: asyncio.Event | None,
    ) -> None:
        super().__init__(transport, read, actor, counts, stop)
        self._conn = conn
        self._queue = collections.deque(rows)

    def _left(self) -> int:
        return len(self._queue)

    def _take(self, count: int) -> list[DueRow]:
        return [self._queue.popleft() for _ in range(count)]

    async def _step(
        self,
        decided: list[Change],
        finished: Finished,
        batch: list[DueRow],
        stale: list[Claimed],
        at: tuple[float, float],
    ) -> tuple[list[Ready], list[Ready]]:
        """Run one write step until it lands; the renewed and the new claims, with deadlines."""
        delay = _BUSY_RETRY_FIRST
        waiting_since: float | None = None
        logged = 0.0
        while True:
            try:
                applied, renewed, claimed, claimed_at = await self._write_step(
                    decided, finished, batch, stale, at
                )
            except sqlite3.OperationalError as exc:
                if not is_busy(exc):
                    raise
                now = time.monotonic()
                if waiting_since is None:
                    waiting_since = logged = now
                elif now - logged >= _BUSY_LOG_EVERY:
                    logged = now
                    logger.warning(
                        "delivery: the database has been locked by another writer for %.0fs; "
                        "still waiting to record %d outcome(s)",
                        now - waiting_since,
                        len(finished),
                    )
                await asyncio.sleep(delay)
                delay = min(delay * 2, _BUSY_RETRY_MAX)
                at = (time.monotonic(), self._read())
                continue
            self._count(applied)
            deadline = claimed_at + TRANSPORT_DEADLINE_SECONDS
            return [(item, deadline) for item in renewed], [(item, deadline) for item in claimed]

    async def _write_step(
        self,
        decided: list[Change],
        finished: Finished,
        batch: list[DueRow],
        stale: list[Claimed],
        at: tuple[float, float],
    ) -> StepResult:
        # An outcome carries the clock of its send's end, though the next send may already
        # be running. ``at`` (monotonic, clock) was read when the step was launched; a step
        # that then waited for the write lock reads the clock again, so a claim's lease
        # starts when the claim lands.
        read, actor = self._read, self._actor
        started, now = at

        def body(db: sqlite3.Connection) -> StepResult:
            claimed_at = time.monotonic()
            at = now if claimed_at - started < _STALE_SECONDS else read()
            steps = step_steps(at, decided, finished, batch, actor, stale)
            applied, renewed, claimed = run_sync(db, steps)
            return applied, renewed, claimed, claimed_at

        return await studio_state.run_write_transaction(self._conn, body)
