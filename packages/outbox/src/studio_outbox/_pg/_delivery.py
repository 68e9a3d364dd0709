"""Delivery on PostgreSQL: the SQLite outbox's loop, with claims that several deliverers share.

The loop (claims ahead, send slots, renewals: ``studio_outbox._loop``) and the decisions
(expiry, exhausted attempts, the outcome of a send, backoff, ``Retry-After``, dead letters:
``studio_outbox._steps``) are the SQLite path's own; what differs is how rows are taken.
Instead of scanning and then racing for the same rows, each write step locks the due rows it
is about to claim with ``FOR UPDATE SKIP LOCKED``, so deliverers on other connections take the
rows after them, and records the outcomes of the sends that finished since the previous step,
in one short transaction.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from studio_state import Clock, system_clock

from .. import _claimant as claimant
from .._delivery import DEFAULT_DELIVERY_ACTOR, positive_int, still_held
from .._exceptions import InvalidArgument
from .._loop import COUNT_KEYS, TRANSPORT_DEADLINE_SECONDS, Finished, Loop, Ready
from .._routing import Routes
from .._secret import parse_webhook_secret
from .._steps import Change, Claimed, DueRow, decide_without_send, outcome
from .._transport import CommandTransport
from ..abc import Transport
from ._claims import apply_changes, claim, lock_due, lock_expiring, record_transitions, renew
from ._drive import in_transaction, run_async

# A step that loses a deadlock (two steps updating rows of a lapsed lease in opposite order)
# is rolled back whole; running it again is safe, every write in it is guarded.
_STEP_RETRIES = 5

Connection = psycopg.AsyncConnection[Any]


async def deliver_due_dispatches(
    conn: Connection,
    *,
    now: float | None = None,
    notify_template: Sequence[str] | None = None,
    limit: int = 100,
    concurrency: int = 4,
    clock: Clock = system_clock,
    transport: Transport | None = None,
    actor: str | None = None,
    webhook_secret: str | None = None,
    webhook_transport: Transport | None = None,
    stop: asyncio.Event | None = None,
) -> dict[str, int]:
    """Deliver the dispatches that are due on PostgreSQL; returns counts of what happened.

    The arguments, the transitions and the returned counts are those of
    :func:`studio_outbox.deliver_due_dispatches`. ``conn`` is a psycopg ``AsyncConnection``
    with no transaction open (each step commits its own short transaction). At most ``limit``
    due rows are looked at per pass; each is locked with ``FOR UPDATE SKIP LOCKED`` as it is
    claimed, so any number of deliverers (connections, processes, machines) can run passes
    over one table at once: each takes rows the others do not hold, and every status change
    is still guarded on ``(id, status, attempt)``. Once ``stop`` is set nothing new is claimed
    and the sends in flight finish and are recorded before returning.
    """
    limit = positive_int("limit", limit)
    concurrency = positive_int("concurrency", concurrency)
    if now is not None and (isinstance(now, bool) or not isinstance(now, int | float)):
        raise InvalidArgument("now", f"must be epoch seconds, got {type(now).__name__}")
    if not isinstance(conn, psycopg.AsyncConnection):
        raise InvalidArgument("conn", f"must be a psycopg AsyncConnection, got {conn!r}")
    if transport is None and notify_template is not None:
        transport = CommandTransport(list(notify_template))
    for field, value in (("transport", transport), ("webhook_transport", webhook_transport)):
        if value is not None and not isinstance(value, Transport):
            raise InvalidArgument(
                field, f"must implement studio_outbox.abc.Transport, got {value!r}"
            )
    if webhook_secret is not None:
        parse_webhook_secret(webhook_secret, field="webhook_secret")
    counts = dict.fromkeys(COUNT_KEYS, 0)
    routes = Routes(transport, webhook_transport, webhook_secret=webhook_secret, clock=clock)
    if routes.paused:
        return counts
    if in_transaction(conn):
        raise InvalidArgument(
            "conn",
            "delivery must not run inside an open transaction (transports run between "
            "its own short transactions)",
        )
    read: Callable[[], float] = clock if now is None else (lambda: float(now))
    loop = _Pass(conn, limit, routes, read, actor or DEFAULT_DELIVERY_ACTOR, counts, stop)
    try:
        await loop.run([], concurrency)
    finally:
        await routes.aclose()
    return counts


class _Pass(Loop[int]):
    """The pipelined loop on PostgreSQL: each write step records the outcomes that finished,
    renews claims that waited and locks and claims up to the count the loop asks for."""

    def __init__(
        self,
        conn: Connection,
        limit: int,
        routes: Routes,
        read: Callable[[], float],
        actor: str,
        counts: dict[str, int],
        stop: asyncio.Event | None,
    ) -> None:
        super().__init__(routes, read, actor, counts, stop)
        self._conn = conn
        self._routes = routes
        self._budget = limit  # due rows this pass may still look at
        self._exhausted = False
        self._passed: list[str] = []  # ids looked at and left alone in this pass
        self._swept = False

    def _left(self) -> int:
        return 0 if self._exhausted else self._budget

    def _take(self, count: int) -> int:
        return count

    async def _step(
        self,
        decided: list[Change],
        finished: Finished,
        batch: int,
        stale: list[Claimed],
        at: tuple[float, float],
    ) -> tuple[list[Ready], list[Ready]]:
        for retry in range(_STEP_RETRIES):
            passed = len(self._passed)
            claimed_at = time.monotonic()
            try:
                async with self._conn.transaction():
                    # Read inside the transaction: a lease starts when its claim is written.
                    now = self._read()
                    applied, renewed, claimed, seen = await self._write(
                        now, decided, finished, batch, stale
                    )
            except (pg_errors.DeadlockDetected, pg_errors.SerializationFailure):
                del self._passed[passed:]
                if retry == _STEP_RETRIES - 1:
                    raise
                await asyncio.sleep(0.01 * (retry + 1))
                continue
            self._swept = True
            self._budget -= seen
            if seen < batch or self._budget <= 0:
                self._exhausted = True
            self._count(applied)
            deadline = claimed_at + TRANSPORT_DEADLINE_SECONDS
            return [(item, deadline) for item in renewed], [(item, deadline) for item in claimed]
        raise AssertionError("unreachable")  # pragma: no cover

    async def _write(
        self, now: float, decided: list[Change], finished: Finished, free: int, stale: list[Claimed]
    ) -> tuple[list[Change], list[Claimed], list[Claimed], int]:
        conn = self._conn
        changes = list(decided)
        changes += [outcome(item, result, ended) for item, result, ended in finished]
        if not self._swept:
            for row in await run_async(conn, lock_expiring(now, 100)):
                change = decide_without_send(row, now)
                if change is not None:
                    changes.append(change)
        to_claim: list[DueRow] = []
        seen = 0
        if free > 0:
            rows = await run_async(conn, lock_due(now, free, self._passed))
            seen = len(rows)
            for row in rows:
                if not self._routes.can_send(row.deliver_to) or still_held(row, now):
                    self._passed.append(row.id)
                    continue
                change = decide_without_send(row, now)
                if change is None:
                    to_claim.append(row)
                else:
                    changes.append(change)
        applied, transitions = (
            await run_async(conn, apply_changes(changes, now, self._actor)) if changes else ([], [])
        )
        renewed = await run_async(conn, renew(stale, now)) if stale else []
        claimed, claim_transitions = (
            await run_async(conn, claim(to_claim, now, self._actor, claimant.identity()))
            if to_claim
            else ([], [])
        )
        await run_async(conn, record_transitions(transitions + claim_transitions))
        return applied, renewed, claimed, seen
