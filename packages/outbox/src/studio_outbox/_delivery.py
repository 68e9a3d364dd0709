"""The delivery loop: scan, decide, claim, send concurrently, record each outcome."""

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
from ._constants import CLAIM_LEASE_SECONDS, DELIVERING, DispatchReason
from ._drive import is_busy
from ._exceptions import InvalidArgument
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
    scan,
)
from ._transport import CommandTransport
from .abc import DispatchEnvelope, Transport, TransportResult

logger = logging.getLogger("studio_outbox")

DEFAULT_DELIVERY_ACTOR = "studio_outbox.delivery"

# A write step that finds the database locked by another process waits and tries again until
# it lands: an outcome that is not written would become a second send after the lease.
_BUSY_RETRY_FIRST = 0.05
_BUSY_RETRY_MAX = 1.0
_BUSY_LOG_EVERY = 10.0

# The loop stops waiting for any transport this long after the send began, comfortably inside
# the claim lease, so no other scanner can claim the row while its send may still be running.
TRANSPORT_DEADLINE_SECONDS = CLAIM_LEASE_SECONDS - 2.0

_COUNT_KEYS = ("attempted", "delivered", "retried", "dead_letter", "expired")
_COUNTED_AS = {
    DispatchReason.TRANSPORT_OK: "delivered",
    DispatchReason.AWAITING_ACK: "delivered",  # a successful send of a row awaiting its ack
    DispatchReason.RETRY_BACKOFF: "retried",
    DispatchReason.MAX_ATTEMPTS: "dead_letter",
    DispatchReason.ACK_TIMEOUT: "dead_letter",
    DispatchReason.EXPIRED_TTL: "expired",
    DispatchReason.GONE: "dead_letter",
}


def _positive_int(field: str, value: object) -> int:
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
    limit = _positive_int("limit", limit)
    concurrency = _positive_int("concurrency", concurrency)
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
    counts = dict.fromkeys(_COUNT_KEYS, 0)
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
    loop = _Loop(conn, routes, read, actor or DEFAULT_DELIVERY_ACTOR, counts, stop)
    scan_now = read()
    rows = [row for row in await scan(conn, scan_now, limit) if routes.can_send(row.deliver_to)]
    decided: list[Change] = []
    sendable: list[DueRow] = []
    for row in rows:
        if _still_held(row, scan_now):
            continue
        change = decide_without_send(row, scan_now)
        if change is not None:
            decided.append(change)
        elif not row.sweep:
            sendable.append(row)
    try:
        await loop.run(decided, sendable, concurrency)
    finally:
        await routes.aclose()
    return counts


def _still_held(row: DueRow, now: float) -> bool:
    """A lapsed lease whose sender is still running (its outcome write may be waiting)."""
    return (
        row.status == DELIVERING
        and now - row.next_attempt_at < claimant.LIVE_SENDER_GRACE_SECONDS
        and claimant.sender_alive(row.claimed_by, row.id, row.attempt)
    )


class _Loop:
    """One delivery pass: refills up to ``concurrency`` sends as earlier ones finish.

    Each write step is one transaction holding the outcomes that finished since the last
    step and the claims that refill the free slots; a step's outcomes and claims are
    independent guarded changes that merely share the commit.
    """

    def __init__(
        self,
        conn: aiosqlite.Connection,
        transport: Transport,
        read: Callable[[], float],
        actor: str,
        counts: dict[str, int],
        stop: asyncio.Event | None,
    ) -> None:
        self._conn = conn
        self._transport = transport
        self._read = read
        self._actor = actor
        self._counts = counts
        self._stop = stop

    def _stopping(self) -> bool:
        return self._stop is not None and self._stop.is_set()

    async def run(self, decided: list[Change], sendable: list[DueRow], concurrency: int) -> None:
        queue = collections.deque(sendable)
        in_flight: dict[asyncio.Future[TransportResult], Claimed] = {}
        finished: list[tuple[Claimed, TransportResult]] = []
        try:
            while True:
                free = 0 if self._stopping() else min(concurrency - len(in_flight), len(queue))
                batch = [queue.popleft() for _ in range(free)]
                if decided or finished or batch:
                    claimed = await self._step(decided, finished, batch)
                    for item, _ in finished:
                        claimant.release(item.row.id, item.attempt)
                    decided, finished = [], []
                    for item in claimed:
                        claimant.hold(item.row.id, item.attempt)
                        in_flight[asyncio.ensure_future(self._send(item))] = item
                if not in_flight:
                    if queue and not self._stopping():
                        continue
                    return
                done, _ = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                for future in done:
                    finished.append((in_flight.pop(future), future.result()))
        except BaseException:
            for future in in_flight:
                future.cancel()
            await asyncio.gather(*in_flight, return_exceptions=True)
            raise
        finally:
            # Claims whose outcome was not recorded: this loop no longer holds them, so their
            # lease alone decides when they are sent again.
            for item in [*in_flight.values(), *(item for item, _ in finished)]:
                claimant.release(item.row.id, item.attempt)

    async def _step(
        self,
        decided: list[Change],
        finished: list[tuple[Claimed, TransportResult]],
        batch: list[DueRow],
    ) -> list[Claimed]:
        delay = _BUSY_RETRY_FIRST
        waiting_since: float | None = None
        logged = 0.0
        while True:
            try:
                applied, claimed = await self._write_step(decided, finished, batch)
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
                continue
            self._count(applied, claimed)
            return claimed

    async def _write_step(
        self,
        decided: list[Change],
        finished: list[tuple[Claimed, TransportResult]],
        batch: list[DueRow],
    ) -> tuple[list[Change], list[Claimed]]:
        async with studio_state.write_transaction(self._conn):
            # Read once the write lock is held: a claim's lease then starts when the claim
            # lands, and an outcome's backoff when it is recorded, however long the wait was.
            now = self._read()
            return await self._apply_step(now, decided, finished, batch)

    async def _apply_step(
        self,
        now: float,
        decided: list[Change],
        finished: list[tuple[Claimed, TransportResult]],
        batch: list[DueRow],
    ) -> tuple[list[Change], list[Claimed]]:
        changes = list(decided)
        changes += [outcome(item, result, now) for item, result in finished]
        to_claim: list[DueRow] = []
        for row in batch:
            # Re-decided at claim time: a row may have expired while waiting for a slot.
            change = decide_without_send(row, now)
            if change is None:
                to_claim.append(row)
            else:
                changes.append(change)
        applied, transitions = (
            await apply_changes(self._conn, changes, now, self._actor) if changes else ([], [])
        )
        claimed, claim_transitions = (
            await claim(self._conn, to_claim, now, self._actor) if to_claim else ([], [])
        )
        await studio_state.record_transitions(self._conn, transitions + claim_transitions)
        return applied, claimed

    def _count(self, applied: list[Change], claimed: list[Claimed]) -> None:
        counts = self._counts
        counts["attempted"] += len(claimed)
        for change in applied:
            counts[_COUNTED_AS[change.reason_code]] += 1

    async def _send(self, item: Claimed) -> TransportResult:
        row = item.row
        envelope = DispatchEnvelope(row.id, row.kind, row.deliver_to, item.attempt, item.payload)
        try:
            async with asyncio.timeout(TRANSPORT_DEADLINE_SECONDS):
                result: object = await self._transport.send(envelope)
        except TimeoutError:
            return TransportResult.failure(
                f"transport did not finish within {TRANSPORT_DEADLINE_SECONDS:g}s"
            )
        except Exception as exc:
            return TransportResult.failure(f"transport raised {type(exc).__name__}: {exc}")
        if not isinstance(result, TransportResult):
            return TransportResult.failure(
                f"transport returned {type(result).__name__}, not a TransportResult"
            )
        return result
