from __future__ import annotations

import asyncio
from typing import Any

import aiosqlite
import pytest

import studio_outbox
import studio_state
from studio_outbox import DispatchEnvelope, TransportResult

ZERO = {"attempted": 0, "delivered": 0, "retried": 0, "dead_letter": 0, "expired": 0}


async def _deliver(conn: aiosqlite.Connection, clock: Any, recorder: Any) -> dict[str, int]:
    return await studio_outbox.deliver_due_dispatches(
        conn, notify_template=recorder.template(), clock=clock
    )


async def test_ack_flow_with_the_token_the_consumer_received(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, probe: Any, recorder: Any
) -> None:
    dispatch_id = await studio_outbox.enqueue_dispatch(
        conn, kind="k", deliver_to="ok", ack_required=True, clock=clock
    )
    counts = await _deliver(conn, clock, recorder)
    assert counts == {**ZERO, "attempted": 1, "delivered": 1}
    row = await probe.row(dispatch_id)
    assert row["status"] == "pending"  # sent, awaiting the ack
    assert row["next_attempt_at"] == clock() + 60
    token = recorder.payloads()[0]["ack_token"]
    clock.advance(5)
    assert await studio_outbox.ack_dispatch(conn, dispatch_id, token, clock=clock) is True
    row = await probe.row(dispatch_id)
    assert row["status"] == "acked"
    assert await probe.reasons(dispatch_id) == [
        "dispatch.pending.enqueued",
        "dispatch.delivering.claimed",
        "dispatch.pending.awaiting_ack",
        "dispatch.acked.consumer",
    ]
    # Acked rows are never resent.
    clock.advance(10_000)
    assert await _deliver(conn, clock, recorder) == ZERO
    assert len(recorder.sends()) == 1


async def test_wrong_token_is_refused_and_writes_nothing(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, probe: Any
) -> None:
    dispatch_id = await studio_outbox.enqueue_dispatch(
        conn, kind="k", deliver_to="ok", ack_required=True
    )
    real = (await probe.row(dispatch_id))["ack_token"]
    before = await probe.snapshot()
    for wrong in ("0" * 32, "", real[:-1], real + "0", real.upper()):
        with pytest.raises(studio_outbox.AckTokenMismatch) as caught:
            await studio_outbox.ack_dispatch(conn, dispatch_id, wrong)
        assert real not in str(caught.value)
    with pytest.raises(studio_outbox.AckTokenMismatch):
        await studio_outbox.ack_dispatch(conn, dispatch_id, None)  # type: ignore[arg-type]
    assert await probe.snapshot() == before


async def test_ack_of_a_row_that_does_not_require_it(
    conn: aiosqlite.Connection, probe: Any
) -> None:
    dispatch_id = await studio_outbox.enqueue_dispatch(conn, kind="k", deliver_to="ok")
    before = await probe.snapshot()
    with pytest.raises(studio_outbox.AckNotRequired, match=dispatch_id):
        await studio_outbox.ack_dispatch(conn, dispatch_id, "anything")
    assert await probe.snapshot() == before
    with pytest.raises(studio_outbox.DispatchNotFound, match="nope"):
        await studio_outbox.ack_dispatch(conn, "nope", "anything")


async def test_repeated_ack_returns_true_and_writes_one_transition(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, probe: Any
) -> None:
    dispatch_id = await studio_outbox.enqueue_dispatch(
        conn, kind="k", deliver_to="ok", ack_required=True, clock=clock
    )
    token = (await probe.row(dispatch_id))["ack_token"]
    assert await studio_outbox.ack_dispatch(conn, dispatch_id, token, clock=clock)
    after_first = await probe.snapshot()
    clock.advance(30)
    for _ in range(3):
        assert await studio_outbox.ack_dispatch(conn, dispatch_id, token, clock=clock) is True
    assert await probe.snapshot() == after_first
    assert (await probe.reasons(dispatch_id)).count("dispatch.acked.consumer") == 1
    # Concurrent acks from several tasks: still one transition.
    other = await studio_outbox.enqueue_dispatch(conn, kind="k", deliver_to="ok", ack_required=True)
    other_token = (await probe.row(other))["ack_token"]
    results = await asyncio.gather(
        *(studio_outbox.ack_dispatch(conn, other, other_token) for _ in range(5))
    )
    assert results == [True] * 5
    assert (await probe.reasons(other)).count("dispatch.acked.consumer") == 1


async def test_ack_while_delivering_wins_over_the_send_outcome(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, probe: Any, transport_factory: Any
) -> None:
    dispatch_id = await studio_outbox.enqueue_dispatch(
        conn, kind="k", deliver_to="ok", ack_required=True, clock=clock
    )
    token = (await probe.row(dispatch_id))["ack_token"]

    async def ack_during_send(env: DispatchEnvelope) -> TransportResult:
        assert (await probe.row(dispatch_id))["status"] == "delivering"
        assert await studio_outbox.ack_dispatch(conn, dispatch_id, token, clock=clock)
        return TransportResult.success()

    counts = await studio_outbox.deliver_due_dispatches(
        conn, transport=transport_factory(ack_during_send), clock=clock
    )
    assert counts == {**ZERO, "attempted": 1}
    assert (await probe.row(dispatch_id))["status"] == "acked"
    assert (await probe.history(dispatch_id))[-1]["previous_status"] == "delivering"


async def test_unacked_row_is_resent_then_gets_an_ack_window_then_dead_letters(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, probe: Any, recorder: Any
) -> None:
    dispatch_id = await studio_outbox.enqueue_dispatch(
        conn, kind="k", deliver_to="ok", ack_required=True, max_attempts=3, clock=clock
    )
    for attempt, delay in ((1, 60), (2, 120), (3, 240)):
        counts = await _deliver(conn, clock, recorder)
        assert counts == {**ZERO, "attempted": 1, "delivered": 1}
        row = await probe.row(dispatch_id)
        assert row["status"] == "pending" and row["attempt"] == attempt
        assert row["next_attempt_at"] == clock() + delay
        clock.advance(delay)
    assert [p["attempt"] for p in recorder.payloads()] == [1, 2, 3]
    # The window after the last send has passed: dead letter, no fourth send.
    counts = await _deliver(conn, clock, recorder)
    assert counts == {**ZERO, "dead_letter": 1}
    assert len(recorder.sends()) == 3
    row = await probe.row(dispatch_id)
    assert row["status"] == "dead_letter" and row["attempt"] == 3
    assert (await probe.reasons(dispatch_id))[-2:] == [
        "dispatch.pending.awaiting_ack",
        "dispatch.dead_letter.ack_timeout",
    ]
    # A late ack of a dead letter is a state error, not a token error.
    token = recorder.payloads()[0]["ack_token"]
    with pytest.raises(studio_outbox.InvalidDispatchState, match="dead_letter"):
        await studio_outbox.ack_dispatch(conn, dispatch_id, token)


async def test_ack_inside_the_window_after_the_last_send_is_accepted(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, probe: Any, recorder: Any
) -> None:
    dispatch_id = await studio_outbox.enqueue_dispatch(
        conn, kind="k", deliver_to="ok", ack_required=True, max_attempts=1, clock=clock
    )
    assert (await _deliver(conn, clock, recorder))["delivered"] == 1
    row = await probe.row(dispatch_id)
    assert row["status"] == "pending" and row["next_attempt_at"] == clock() + 60
    assert "ack window 60s" in (await probe.history(dispatch_id))[-1]["reason_summary"]
    clock.advance(59)
    assert await _deliver(conn, clock, recorder) == ZERO
    token = recorder.payloads()[0]["ack_token"]
    assert await studio_outbox.ack_dispatch(conn, dispatch_id, token, clock=clock)
    clock.advance(1000)
    assert await _deliver(conn, clock, recorder) == ZERO
    assert (await probe.row(dispatch_id))["status"] == "acked"
    assert len(recorder.sends()) == 1


async def test_ack_of_an_expired_row_is_refused(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, probe: Any, recorder: Any
) -> None:
    dispatch_id = await studio_outbox.enqueue_dispatch(
        conn, kind="k", deliver_to="ok", ack_required=True, expires_at=clock() + 1, clock=clock
    )
    token = (await probe.row(dispatch_id))["ack_token"]
    clock.advance(2)
    assert (await _deliver(conn, clock, recorder))["expired"] == 1
    with pytest.raises(studio_outbox.InvalidDispatchState, match="expired"):
        await studio_outbox.ack_dispatch(conn, dispatch_id, token)
