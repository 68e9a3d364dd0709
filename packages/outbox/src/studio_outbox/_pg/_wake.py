"""A long-running deliverer on PostgreSQL, woken by ``LISTEN/NOTIFY`` instead of polling.

Every enqueue notifies :data:`CHANNEL` when its transaction commits (a trigger of the schema),
so a deliverer with nothing due sleeps until then, or until the earliest ``next_attempt_at``
(a backoff or a lease ending), or at most ``idle_seconds`` as a safety net.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

import psycopg

from studio_state import Clock, system_clock

from .._exceptions import InvalidArgument
from ..abc import Transport
from ._delivery import deliver_due_dispatches
from ._drive import PgSteps, fetch, run_async
from ._schema import CHANNEL, compact_counts

_RECHECK_SECONDS = 1.0
_COMPACT_EVERY_SECONDS = 60.0


async def next_due_at(conn: psycopg.AsyncConnection[Any]) -> float | None:
    """The earliest time a delivery pass has work on PostgreSQL, or None when there is none.

    As :func:`studio_outbox.next_due_at`: the earliest ``next_attempt_at`` of a ``pending`` or
    ``delivering`` row, or the earliest ``expires_at`` of a ``pending`` row if sooner.
    """
    return await run_async(conn, _next_due_steps())


def _next_due_steps() -> PgSteps[float | None]:
    rows = yield from fetch(
        "SELECT (SELECT min(next_attempt_at) FROM dispatch_outbox "
        "WHERE status IN ('pending', 'delivering')) AS due, "
        "(SELECT min(expires_at) FROM dispatch_outbox "
        "WHERE status = 'pending' AND expires_at IS NOT NULL) AS expiry"
    )
    times = [float(t) for t in (rows[0]["due"], rows[0]["expiry"]) if t is not None]
    return min(times) if times else None


async def _listen(conn: psycopg.AsyncConnection[Any], wake: asyncio.Event) -> None:
    async for _ in conn.notifies():
        wake.set()


async def run_deliverer(
    conn: psycopg.AsyncConnection[Any],
    listen_conn: psycopg.AsyncConnection[Any],
    *,
    stop: asyncio.Event,
    notify_template: Sequence[str] | None = None,
    transport: Transport | None = None,
    webhook_transport: Transport | None = None,
    webhook_secret: str | None = None,
    limit: int = 100,
    concurrency: int = 4,
    idle_seconds: float = 30.0,
    clock: Clock = system_clock,
    actor: str | None = None,
) -> dict[str, int]:
    """Run delivery passes on ``conn`` until ``stop`` is set; returns the summed counts.

    ``listen_conn`` is a second connection, in autocommit mode, used only to ``LISTEN`` on
    :data:`CHANNEL`: an enqueue committed anywhere wakes this deliverer at once. Between passes
    with nothing left to do it sleeps until the next due time, a notification, ``stop``, or
    ``idle_seconds`` at most. Any number of deliverers (in one process or many, on one machine
    or many) can run on one database: their claims never overlap. Once ``stop`` is set, the
    sends in flight finish and are recorded before this returns.
    """
    if isinstance(idle_seconds, bool) or not isinstance(idle_seconds, int | float):
        raise InvalidArgument("idle_seconds", "must be a number of seconds")
    if not idle_seconds > 0:
        raise InvalidArgument("idle_seconds", f"must be positive, got {idle_seconds}")
    if not listen_conn.autocommit:
        raise InvalidArgument("listen_conn", "must be in autocommit mode (LISTEN takes effect)")
    await listen_conn.execute(f"LISTEN {CHANNEL}")
    wake = asyncio.Event()
    listener = asyncio.ensure_future(_listen(listen_conn, wake))
    totals: dict[str, int] = {}
    compacted = float("-inf")
    try:
        while not stop.is_set():
            wake.clear()
            counts = await deliver_due_dispatches(
                conn,
                notify_template=notify_template,
                transport=transport,
                webhook_transport=webhook_transport,
                webhook_secret=webhook_secret,
                limit=limit,
                concurrency=concurrency,
                clock=clock,
                actor=actor,
                stop=stop,
            )
            for key, value in counts.items():
                totals[key] = totals.get(key, 0) + value
            if any(counts.values()):
                continue  # a full pass: there may be more due already
            if clock() - compacted >= _COMPACT_EVERY_SECONDS:
                await compact_counts(conn)  # idle: fold the counters' delta rows
                compacted = clock()
            due = await next_due_at(conn)
            # Work due now that this pass left alone (no transport for it, a live sender's
            # lapsed lease) is looked at again after a pause, not in a busy loop.
            floor = min(_RECHECK_SECONDS, idle_seconds)
            delay = idle_seconds if due is None else due - clock()
            delay = min(delay if delay > 0 else floor, idle_seconds)
            await _wait_any(wake, stop, listener, delay)
            if listener.done():
                listener.result()  # the listening connection failed: raise its error
    finally:
        listener.cancel()
        with contextlib.suppress(asyncio.CancelledError, psycopg.Error):
            await listener
        with contextlib.suppress(psycopg.Error):
            await listen_conn.execute(f"UNLISTEN {CHANNEL}")
    return totals


async def _wait_any(
    wake: asyncio.Event, stop: asyncio.Event, listener: asyncio.Future[None], delay: float
) -> None:
    waiters: list[asyncio.Future[Any]] = [
        asyncio.ensure_future(wake.wait()),
        asyncio.ensure_future(stop.wait()),
    ]
    try:
        await asyncio.wait([*waiters, listener], timeout=delay, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
