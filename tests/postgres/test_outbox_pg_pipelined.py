"""Delivery on PostgreSQL at concurrency 1 claims the next rows while the current one is sent.

The same loop as on SQLite (``studio_outbox._loop``): claims ahead, outcomes recorded by the
step that refills, and a row that waited too long for its slot sent only on a renewed claim.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from studio_outbox import DispatchEnvelope, TransportResult
from studio_outbox import postgres as pg
from studio_outbox._constants import CLAIM_LEASE_SECONDS
from studio_outbox._loop import CLAIM_AHEAD, RENEW_AFTER_SECONDS
from studio_state import ManualClock

from .conftest import Rows

ZERO = {"attempted": 0, "delivered": 0, "retried": 0, "dead_letter": 0, "expired": 0}


class _Steered:
    """A transport whose sends run ``behaviour`` (async) and are recorded in order."""

    def __init__(self, behaviour: Callable[[DispatchEnvelope], Awaitable[None]]) -> None:
        self.behaviour = behaviour
        self.sent: list[str] = []

    async def send(self, envelope: DispatchEnvelope) -> TransportResult:
        self.sent.append(envelope.dispatch_id)
        await self.behaviour(envelope)
        return TransportResult.success()


async def _enqueued(dsn: str, clock: ManualClock, n: int) -> list[str]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await pg.ensure_schema(conn)
        ids = []
        for index in range(n):
            ids.append(
                await pg.enqueue_dispatch(
                    conn, kind="notice", deliver_to=f"ok:{index}", clock=clock
                )
            )
            clock.advance(1)
        return ids


async def _deliver(dsn: str, clock: ManualClock, transport: _Steered) -> dict[str, int]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        return await pg.deliver_due_dispatches(
            conn, transport=transport, clock=clock, concurrency=1
        )


async def _rows(pg_rows: Rows) -> dict[str, dict[str, Any]]:
    found = await pg_rows("SELECT id, status, attempt, next_attempt_at FROM dispatch_outbox")
    return {r["id"]: r for r in found}


async def _claimed_and_delivered_once(pg_rows: Rows, ids: list[str]) -> None:
    for dispatch_id in ids:
        found = await pg_rows(
            "SELECT reason_code FROM status_transitions WHERE entity_id = %s", (dispatch_id,)
        )
        assert sorted(r["reason_code"] for r in found) == [
            "dispatch.delivered.transport_ok",
            "dispatch.delivering.claimed",
            "dispatch.pending.enqueued",
        ]
        (row,) = await pg_rows("SELECT attempt FROM dispatch_outbox WHERE id = %s", (dispatch_id,))
        assert row["attempt"] == 1


async def test_the_next_rows_are_claimed_while_the_current_send_runs(
    pg_dsn: str, pg_rows: Rows
) -> None:
    clock = ManualClock()
    ids = await _enqueued(pg_dsn, clock, 6)
    seen: dict[str, dict[str, dict[str, Any]]] = {}

    async def behaviour(envelope: DispatchEnvelope) -> None:
        seen[envelope.dispatch_id] = await _rows(pg_rows)

    transport = _Steered(behaviour)
    counts = await _deliver(pg_dsn, clock, transport)
    assert counts == {**ZERO, "attempted": 6, "delivered": 6}
    assert transport.sent == ids
    # During the first send, it and the CLAIM_AHEAD rows after it were claimed (committed).
    during_first = seen[ids[0]]
    states = [(during_first[i]["status"], during_first[i]["attempt"]) for i in ids]
    claimed = 1 + CLAIM_AHEAD
    assert states == [("delivering", 1)] * claimed + [("pending", 0)] * (6 - claimed)
    await _claimed_and_delivered_once(pg_rows, ids)


async def test_a_row_that_waited_for_its_slot_is_sent_on_a_renewed_claim(
    pg_dsn: str, pg_rows: Rows
) -> None:
    clock = ManualClock()
    first, second, third = await _enqueued(pg_dsn, clock, 3)
    claimed_at = clock()
    leases: dict[str, dict[str, dict[str, Any]]] = {}

    async def behaviour(envelope: DispatchEnvelope) -> None:
        leases[envelope.dispatch_id] = await _rows(pg_rows)
        if envelope.dispatch_id == first:
            # A slow send: the rows claimed ahead wait longer than RENEW_AFTER_SECONDS.
            clock.advance(40)
            await asyncio.sleep(RENEW_AFTER_SECONDS + 0.3)

    transport = _Steered(behaviour)
    counts = await _deliver(pg_dsn, clock, transport)
    assert counts == {**ZERO, "attempted": 3, "delivered": 3}
    assert transport.sent == [first, second, third]
    # Claimed during the first send with that moment's lease, sent on a renewed one.
    assert leases[first][second]["next_attempt_at"] == claimed_at + CLAIM_LEASE_SECONDS
    assert leases[second][second]["next_attempt_at"] == claimed_at + 40 + CLAIM_LEASE_SECONDS
    assert leases[third][third]["next_attempt_at"] == claimed_at + 40 + CLAIM_LEASE_SECONDS
    # A renewal is not a status change: one claim, one outcome, attempt 1.
    await _claimed_and_delivered_once(pg_rows, [second, third])


async def test_a_waiting_claim_that_changed_meanwhile_is_not_sent(
    pg_dsn: str, pg_rows: Rows
) -> None:
    clock = ManualClock()
    first, second = await _enqueued(pg_dsn, clock, 2)

    async def behaviour(envelope: DispatchEnvelope) -> None:
        if envelope.dispatch_id == first:
            # While the second row waits, another deliverer takes it over (its next attempt).
            await pg_rows(
                "UPDATE dispatch_outbox SET attempt = 2, claimed_by = 'elsewhere' "
                "WHERE id = %s RETURNING id",
                (second,),
            )
            await asyncio.sleep(RENEW_AFTER_SECONDS + 0.3)

    transport = _Steered(behaviour)
    counts = await _deliver(pg_dsn, clock, transport)
    # The second row's claim could not be renewed: it is not sent, and nothing is written.
    assert counts == {**ZERO, "attempted": 1, "delivered": 1}
    assert transport.sent == [first]
    (row,) = await pg_rows(
        "SELECT status, attempt, claimed_by FROM dispatch_outbox WHERE id = %s", (second,)
    )
    assert (row["status"], row["attempt"], row["claimed_by"]) == ("delivering", 2, "elsewhere")
