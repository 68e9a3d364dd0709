"""Delivery at concurrency 1 claims the next rows while the current one is sent."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import aiosqlite

import studio_outbox
import studio_state
from studio_outbox import DispatchEnvelope, TransportResult
from studio_outbox._constants import CLAIM_LEASE_SECONDS
from studio_outbox._delivery import deliver
from studio_outbox._loop import OUTCOME_WAIT_SECONDS, RENEW_AFTER_SECONDS

ZERO = {"attempted": 0, "delivered": 0, "retried": 0, "dead_letter": 0, "expired": 0}


def _statuses(path: Path) -> dict[str, tuple[str, int]]:
    # A second, independent connection: what another process would see committed.
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT id, status, attempt FROM dispatch_outbox").fetchall()
    return {row[0]: (row[1], row[2]) for row in rows}


async def _enqueue_n(conn: aiosqlite.Connection, clock: Any, n: int) -> list[str]:
    ids = []
    for index in range(n):
        ids.append(
            await studio_outbox.enqueue_dispatch(
                conn, kind="notice", deliver_to=f"ok:{index}", clock=clock
            )
        )
        clock.advance(1)
    return ids


async def _deliver_one_at_a_time(
    conn: aiosqlite.Connection, clock: Any, transport: Any
) -> tuple[dict[str, int], Any]:
    counts = await studio_outbox.deliver_due_dispatches(
        conn, transport=transport, clock=clock, concurrency=1
    )
    return counts, transport


async def _assert_claimed_and_delivered_once(probe: Any, ids: list[str]) -> None:
    for dispatch_id in ids:
        assert await probe.reasons(dispatch_id) == [
            "dispatch.pending.enqueued",
            "dispatch.delivering.claimed",
            "dispatch.delivered.transport_ok",
        ]
        assert (await probe.row(dispatch_id))["attempt"] == 1


async def test_the_next_row_is_claimed_while_the_current_send_runs(
    conn: aiosqlite.Connection,
    db_path: Path,
    clock: studio_state.ManualClock,
    probe: Any,
    transport_factory: Any,
) -> None:
    ids = await _enqueue_n(conn, clock, 5)
    seen: dict[str, dict[str, tuple[str, int]]] = {}

    def behaviour(envelope: DispatchEnvelope) -> TransportResult:
        seen[envelope.dispatch_id] = _statuses(db_path)
        return TransportResult.success()

    counts, transport = await _deliver_one_at_a_time(conn, clock, transport_factory(behaviour))
    assert counts == {**ZERO, "attempted": 5, "delivered": 5}
    assert transport.max_in_flight == 1
    assert [env.dispatch_id for env in transport.sent] == ids
    # During the first send the next CLAIM_AHEAD rows were already claimed (committed), the
    # fifth not.
    during_first = seen[ids[0]]
    assert [during_first[i] for i in ids] == [("delivering", 1)] * 4 + [("pending", 0)]
    # Each row: one claim, one outcome, each a guarded change with its transition.
    await _assert_claimed_and_delivered_once(probe, ids)


async def test_stop_sends_and_records_the_row_claimed_ahead_and_claims_nothing_more(
    conn: aiosqlite.Connection,
    db_path: Path,
    clock: studio_state.ManualClock,
    transport_factory: Any,
) -> None:
    ids = await _enqueue_n(conn, clock, 6)
    stop = asyncio.Event()

    def behaviour(envelope: DispatchEnvelope) -> TransportResult:
        stop.set()  # during the first send: the next three rows are already claimed
        return TransportResult.success()

    transport = transport_factory(behaviour)
    counts = await deliver(conn, transport=transport, clock=clock, concurrency=1, stop=stop)
    assert counts == {**ZERO, "attempted": 4, "delivered": 4}
    after = _statuses(db_path)
    # Nothing is left claimed without a send: the claimed-ahead rows were sent and recorded.
    assert [after[i] for i in ids] == [
        ("delivered", 1),
        ("delivered", 1),
        ("delivered", 1),
        ("delivered", 1),
        ("pending", 0),
        ("pending", 0),
    ]


async def test_a_failed_send_is_recorded_while_the_next_row_is_sent(
    conn: aiosqlite.Connection,
    clock: studio_state.ManualClock,
    probe: Any,
    transport_factory: Any,
) -> None:
    first, second = await _enqueue_n(conn, clock, 2)
    start = clock()

    def behaviour(envelope: DispatchEnvelope) -> TransportResult:
        if envelope.dispatch_id == first:
            return TransportResult.failure("down")
        return TransportResult.success()

    counts, _ = await _deliver_one_at_a_time(conn, clock, transport_factory(behaviour))
    assert counts == {**ZERO, "attempted": 2, "delivered": 1, "retried": 1}
    row = await probe.row(first)
    assert row["status"] == "pending" and row["attempt"] == 1 and row["last_error"] == "down"
    assert row["next_attempt_at"] == start + 60
    assert (await probe.row(second))["status"] == "delivered"


def _leases(path: Path) -> dict[str, float]:
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT id, next_attempt_at FROM dispatch_outbox").fetchall()
    return {row[0]: row[1] for row in rows}


async def test_a_row_that_waited_for_its_slot_is_sent_on_a_renewed_claim(
    conn: aiosqlite.Connection,
    db_path: Path,
    clock: studio_state.ManualClock,
    probe: Any,
    transport_factory: Any,
) -> None:
    first, second, third = await _enqueue_n(conn, clock, 3)
    claimed_at = clock()
    leases: dict[str, dict[str, float]] = {}

    async def behaviour(envelope: DispatchEnvelope) -> TransportResult:
        leases[envelope.dispatch_id] = _leases(db_path)
        if envelope.dispatch_id == first:
            # A slow send: the two rows claimed ahead wait longer than RENEW_AFTER_SECONDS.
            clock.advance(40)
            await asyncio.sleep(RENEW_AFTER_SECONDS + 0.3)
        return TransportResult.success()

    counts, transport = await _deliver_one_at_a_time(conn, clock, transport_factory(behaviour))
    assert counts == {**ZERO, "attempted": 3, "delivered": 3}
    assert [env.dispatch_id for env in transport.sent] == [first, second, third]
    # Claimed during the first send with the lease of that moment ...
    assert leases[first][second] == claimed_at + CLAIM_LEASE_SECONDS
    # ... and sent on a renewed one: same attempt, a new lease from the renewal's time.
    assert leases[second][second] == claimed_at + 40 + CLAIM_LEASE_SECONDS
    assert leases[third][third] == claimed_at + 40 + CLAIM_LEASE_SECONDS
    # A renewal is not a status change: one claim, one outcome, attempt 1.
    await _assert_claimed_and_delivered_once(probe, [second, third])


async def test_a_waiting_claim_that_changed_meanwhile_is_not_sent(
    conn: aiosqlite.Connection,
    db_path: Path,
    clock: studio_state.ManualClock,
    probe: Any,
    transport_factory: Any,
) -> None:
    first, second = await _enqueue_n(conn, clock, 2)

    async def behaviour(envelope: DispatchEnvelope) -> TransportResult:
        if envelope.dispatch_id == first:
            # While the second row waits, another sender takes it over (its next attempt).
            with sqlite3.connect(db_path) as db:
                db.execute(
                    "UPDATE dispatch_outbox SET attempt = 2, claimed_by = 'elsewhere' WHERE id = ?",
                    (second,),
                )
            await asyncio.sleep(RENEW_AFTER_SECONDS + 0.3)
        return TransportResult.success()

    counts, transport = await _deliver_one_at_a_time(conn, clock, transport_factory(behaviour))
    # The second row's claim could not be renewed: it is not sent, and not written.
    assert counts == {**ZERO, "attempted": 1, "delivered": 1}
    assert [env.dispatch_id for env in transport.sent] == [first]
    row = await probe.row(second)
    assert (row["status"], row["attempt"], row["claimed_by"]) == ("delivering", 2, "elsewhere")


async def test_an_outcome_is_written_within_the_wait_bound_while_the_next_send_is_slow(
    conn: aiosqlite.Connection,
    db_path: Path,
    clock: studio_state.ManualClock,
    transport_factory: Any,
) -> None:
    ids = await _enqueue_n(conn, clock, 6)
    seen: dict[str, tuple[str, int]] = {}

    async def behaviour(envelope: DispatchEnvelope) -> TransportResult:
        if envelope.dispatch_id == ids[1]:
            # Rows are still claimed ahead, so no claim is due: the first outcome must not
            # wait for this send's end, only OUTCOME_WAIT_SECONDS.
            await asyncio.sleep(OUTCOME_WAIT_SECONDS + 0.4)
            seen.update(_statuses(db_path))
        return TransportResult.success()

    counts, _ = await _deliver_one_at_a_time(conn, clock, transport_factory(behaviour))
    assert counts == {**ZERO, "attempted": 6, "delivered": 6}
    assert seen[ids[0]] == ("delivered", 1)
    assert seen[ids[1]] == ("delivering", 1)


async def test_each_send_starts_in_the_event_loop_turn_the_one_before_it_ended(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, probe: Any, transport_factory: Any
) -> None:
    ids = await _enqueue_n(conn, clock, 5)
    loop = asyncio.get_running_loop()
    turns = [0]  # event-loop turns so far: a callback that schedules itself once per turn
    ticking = [True]

    def tick() -> None:
        turns[0] += 1
        if ticking[0]:
            loop.call_soon(tick)

    marks: list[tuple[str, int]] = []

    async def behaviour(envelope: DispatchEnvelope) -> TransportResult:
        marks.append(("start", turns[0]))
        await asyncio.sleep(0.02)  # long enough for the rows claimed ahead to be committed
        marks.append(("end", turns[0]))
        return TransportResult.success()

    loop.call_soon(tick)
    try:
        counts, transport = await _deliver_one_at_a_time(conn, clock, transport_factory(behaviour))
    finally:
        ticking[0] = False
    assert counts == {**ZERO, "attempted": 5, "delivered": 5}
    assert [env.dispatch_id for env in transport.sent] == ids
    # The send slot went straight on to the next claimed row: no turn of the loop between
    # one send's end and the next one's start (the write steps ran beside the sends).
    ends = [turn for mark, turn in marks if mark == "end"]
    starts = [turn for mark, turn in marks if mark == "start"]
    assert starts[1:] == ends[:-1]
    await _assert_claimed_and_delivered_once(probe, ids)
