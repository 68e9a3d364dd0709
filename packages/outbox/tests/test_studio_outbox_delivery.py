from __future__ import annotations

import asyncio
import json
from typing import Any

import aiosqlite
import pytest

import studio_outbox
import studio_state
from studio_outbox import DispatchEnvelope, TransportResult

ZERO = {"attempted": 0, "delivered": 0, "retried": 0, "dead_letter": 0, "expired": 0}


async def _enqueue(conn: aiosqlite.Connection, clock: Any, **kwargs: Any) -> str:
    args: dict[str, Any] = {"kind": "notice", "deliver_to": "ok"}
    args.update(kwargs)
    return await studio_outbox.enqueue_dispatch(conn, clock=clock, **args)


async def test_success_delivers_once_with_the_payload_and_attempt(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, probe: Any, recorder: Any
) -> None:
    dispatch_id = await _enqueue(conn, clock, body={"n": 1}, deliver_to="ok:team")
    counts = await studio_outbox.deliver_due_dispatches(
        conn, notify_template=recorder.template(), clock=clock
    )
    assert counts == {**ZERO, "attempted": 1, "delivered": 1}
    sends = recorder.sends()
    assert len(sends) == 1
    assert sends[0]["argv"][0] == "ok:team"
    payload = json.loads(sends[0]["argv"][1])
    assert payload["dispatch_id"] == dispatch_id and payload["attempt"] == 1
    assert payload["body"] == {"n": 1}
    row = await probe.row(dispatch_id)
    assert row["status"] == "delivered" and row["attempt"] == 1
    assert json.loads(row["payload"]) == payload  # what is stored is what was sent
    assert await probe.reasons(dispatch_id) == [
        "dispatch.pending.enqueued",
        "dispatch.delivering.claimed",
        "dispatch.delivered.transport_ok",
    ]
    # Delivered rows are never sent again.
    clock.advance(10_000)
    again = await studio_outbox.deliver_due_dispatches(
        conn, notify_template=recorder.template(), clock=clock
    )
    assert again == ZERO and len(recorder.sends()) == 1


async def test_failure_backs_off_then_dead_letters_at_max_attempts(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, probe: Any, recorder: Any
) -> None:
    dispatch_id = await _enqueue(conn, clock, deliver_to="fail:boom", max_attempts=4)
    template = recorder.template()
    delays = []
    for attempt in (1, 2, 3):
        counts = await studio_outbox.deliver_due_dispatches(
            conn, notify_template=template, clock=clock
        )
        assert counts == {**ZERO, "attempted": 1, "retried": 1}
        row = await probe.row(dispatch_id)
        assert row["status"] == "pending" and row["attempt"] == attempt
        assert row["last_error"] == "boom"
        delays.append(row["next_attempt_at"] - clock())
        # Not due before the backoff has passed.
        clock.advance(row["next_attempt_at"] - clock() - 1)
        assert (
            await studio_outbox.deliver_due_dispatches(conn, notify_template=template, clock=clock)
            == ZERO
        )
        clock.advance(1)
    assert delays == [60, 120, 240]
    counts = await studio_outbox.deliver_due_dispatches(conn, notify_template=template, clock=clock)
    assert counts == {**ZERO, "attempted": 1, "dead_letter": 1}
    row = await probe.row(dispatch_id)
    assert row["status"] == "dead_letter" and row["attempt"] == 4
    assert len(recorder.sends()) == 4
    assert [p["attempt"] for p in recorder.payloads()] == [1, 2, 3, 4]
    history = await probe.history(dispatch_id)
    assert [h["reason_code"] for h in history] == [
        "dispatch.pending.enqueued",
        *["dispatch.delivering.claimed", "dispatch.pending.retry_backoff"] * 3,
        "dispatch.delivering.claimed",
        "dispatch.dead_letter.max_attempts",
    ]
    assert "boom" in history[-1]["reason_summary"]
    clock.advance(100_000)
    assert (
        await studio_outbox.deliver_due_dispatches(conn, notify_template=template, clock=clock)
        == ZERO
    )


async def test_last_error_keeps_the_last_2000_characters(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, probe: Any, transport_factory: Any
) -> None:
    message = "".join(chr(ord("a") + i % 26) for i in range(5000)) + "END"
    transport = transport_factory(lambda env: TransportResult.failure(message))
    dispatch_id = await _enqueue(conn, clock)
    await studio_outbox.deliver_due_dispatches(conn, transport=transport, clock=clock)
    row = await probe.row(dispatch_id)
    assert row["last_error"] == message[-2000:]
    assert row["last_error"].endswith("END")


async def test_success_after_failure_clears_last_error(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, probe: Any, transport_factory: Any
) -> None:
    outcomes = [TransportResult.failure("down"), TransportResult.success()]
    transport = transport_factory(lambda env: outcomes.pop(0))
    dispatch_id = await _enqueue(conn, clock)
    await studio_outbox.deliver_due_dispatches(conn, transport=transport, clock=clock)
    assert (await probe.row(dispatch_id))["last_error"] == "down"
    clock.advance(60)
    await studio_outbox.deliver_due_dispatches(conn, transport=transport, clock=clock)
    row = await probe.row(dispatch_id)
    assert row["status"] == "delivered" and row["last_error"] is None


async def test_expired_rows_expire_before_any_transport(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, probe: Any, transport_factory: Any
) -> None:
    stale = await _enqueue(conn, clock, expires_at=clock() + 5)
    fresh = await _enqueue(conn, clock, expires_at=clock() + 500)
    clock.advance(10)
    order: list[str] = []

    async def observe(env: DispatchEnvelope) -> None:
        order.append(env.dispatch_id)
        # By the time any transport runs, the stale row is already expired (committed).
        assert (await probe.row(stale))["status"] == "expired"

    transport = transport_factory(observe)
    counts = await studio_outbox.deliver_due_dispatches(conn, transport=transport, clock=clock)
    assert counts == {**ZERO, "attempted": 1, "delivered": 1, "expired": 1}
    assert order == [fresh]
    row = await probe.row(stale)
    assert row["status"] == "expired" and row["attempt"] == 0
    assert await probe.reasons(stale) == ["dispatch.pending.enqueued", "dispatch.expired.ttl"]


async def test_a_row_in_backoff_expires_when_its_expiry_passes(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, probe: Any, transport_factory: Any
) -> None:
    transport = transport_factory(lambda env: TransportResult.failure("down"))
    dispatch_id = await _enqueue(conn, clock, expires_at=clock() + 30)
    await studio_outbox.deliver_due_dispatches(conn, transport=transport, clock=clock)
    row = await probe.row(dispatch_id)
    assert row["status"] == "pending" and row["next_attempt_at"] == clock() + 60
    assert await studio_outbox.next_due_at(conn) == clock() + 30  # the expiry comes first
    clock.advance(31)  # past expires_at, still inside the 60 s backoff
    counts = await studio_outbox.deliver_due_dispatches(conn, transport=transport, clock=clock)
    assert counts == {**ZERO, "expired": 1}
    assert (await probe.row(dispatch_id))["status"] == "expired"
    assert len(transport.sent) == 1


async def test_failure_after_expiry_ends_expired_not_retried(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, probe: Any, transport_factory: Any
) -> None:
    def slow_failure(env: DispatchEnvelope) -> TransportResult:
        clock.advance(20)  # the send outlives the row's expiry
        return TransportResult.failure("late")

    dispatch_id = await _enqueue(conn, clock, expires_at=clock() + 10)
    counts = await studio_outbox.deliver_due_dispatches(
        conn, transport=transport_factory(slow_failure), clock=clock
    )
    assert counts == {**ZERO, "attempted": 1, "expired": 1}
    row = await probe.row(dispatch_id)
    assert row["status"] == "expired" and row["last_error"] == "late"


async def test_no_template_pauses_delivery_without_spending_attempts(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, probe: Any
) -> None:
    ids = [await _enqueue(conn, clock, expires_at=clock() + 1) for _ in range(3)]
    clock.advance(3600)
    before = await probe.snapshot()
    for _ in range(3):
        assert await studio_outbox.deliver_due_dispatches(conn, clock=clock) == ZERO
    assert await probe.snapshot() == before
    for dispatch_id in ids:
        row = await probe.row(dispatch_id)
        assert row["status"] == "pending" and row["attempt"] == 0
    backlog = await studio_outbox.dispatch_backlog(conn, clock=clock)
    assert backlog["due"] == 3 and backlog["by_status"]["pending"] == 3


async def test_due_scan_is_bounded_and_oldest_first(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, probe: Any, transport_factory: Any
) -> None:
    ids = []
    for _ in range(7):
        ids.append(await _enqueue(conn, clock))
        clock.advance(1)
    transport = transport_factory()
    counts = await studio_outbox.deliver_due_dispatches(
        conn, transport=transport, clock=clock, limit=3, concurrency=1
    )
    assert counts["attempted"] == 3
    assert [e.dispatch_id for e in transport.sent] == ids[:3]
    await studio_outbox.deliver_due_dispatches(
        conn, transport=transport, clock=clock, limit=3, concurrency=1
    )
    assert [e.dispatch_id for e in transport.sent] == ids[:6]
    assert (await studio_outbox.dispatch_backlog(conn, clock=clock))["due"] == 1


async def test_at_most_concurrency_transports_in_flight(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, recorder: Any
) -> None:
    for _ in range(8):
        await _enqueue(conn, clock, deliver_to="window:0.8")
    counts = await studio_outbox.deliver_due_dispatches(
        conn, notify_template=recorder.template(), concurrency=3
    )
    assert counts["delivered"] == 8
    sends = recorder.sends()
    events = sorted([(s["start"], 1) for s in sends] + [(s["end"], -1) for s in sends])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    assert 2 <= peak <= 3


async def test_clock_is_read_per_row_not_once_per_scan(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, probe: Any, transport_factory: Any
) -> None:
    start = clock()

    def slow_failure(env: DispatchEnvelope) -> TransportResult:
        clock.advance(100)
        return TransportResult.failure("down")

    first = await _enqueue(conn, clock)
    second = await _enqueue(conn, clock)
    third = await _enqueue(conn, clock, expires_at=start + 150)
    counts = await studio_outbox.deliver_due_dispatches(
        conn, transport=transport_factory(slow_failure), clock=clock, concurrency=1
    )
    assert counts == {**ZERO, "attempted": 2, "retried": 2, "expired": 1}
    one, two = await probe.row(first), await probe.row(second)
    # Each backoff counts from the moment that row's outcome was recorded.
    assert one["next_attempt_at"] == start + 100 + 60
    assert two["next_attempt_at"] == start + 200 + 60
    claims = [h for h in await probe.history(second) if h["status"] == "delivering"]
    # Claimed ahead, with the first: at concurrency 1 the next row is claimed before the
    # current send ends, so its send starts at once.
    assert claims[0]["created_at"] == start
    # The third row, claimed ahead while the second was sent, expired before its slot came
    # free: never sent.
    assert (await probe.row(third))["status"] == "expired"


async def test_fixed_now_is_used_for_every_decision(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, probe: Any, transport_factory: Any
) -> None:
    dispatch_id = await _enqueue(conn, clock)
    fixed = clock() + 5
    await studio_outbox.deliver_due_dispatches(
        conn,
        transport=transport_factory(lambda env: TransportResult.failure("x")),
        now=fixed,
        clock=lambda: pytest.fail("clock must not be read when now is given"),
    )
    assert (await probe.row(dispatch_id))["next_attempt_at"] == fixed + 60


async def test_lapsed_lease_is_reclaimed_with_the_next_attempt(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, probe: Any, transport_factory: Any
) -> None:
    dispatch_id = await _enqueue(conn, clock)
    # A process claimed attempt 1 and died: the row is delivering with a lease.
    await probe.set(dispatch_id, status="delivering", attempt=1, next_attempt_at=clock() + 15)
    transport = transport_factory()
    assert await studio_outbox.deliver_due_dispatches(conn, transport=transport, clock=clock) == (
        ZERO
    )
    clock.advance(15)
    counts = await studio_outbox.deliver_due_dispatches(conn, transport=transport, clock=clock)
    assert counts == {**ZERO, "attempted": 1, "delivered": 1}
    assert [e.attempt for e in transport.sent] == [2]
    assert (await probe.row(dispatch_id))["attempt"] == 2


async def test_lapsed_lease_on_the_last_attempt_dead_letters_without_a_send(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, probe: Any, transport_factory: Any
) -> None:
    dispatch_id = await _enqueue(conn, clock, max_attempts=2)
    await probe.set(dispatch_id, status="delivering", attempt=2, next_attempt_at=clock())
    transport = transport_factory()
    counts = await studio_outbox.deliver_due_dispatches(conn, transport=transport, clock=clock)
    assert counts == {**ZERO, "dead_letter": 1}
    assert transport.sent == []
    row = await probe.row(dispatch_id)
    assert row["status"] == "dead_letter" and row["attempt"] == 2
    assert "lapsed" in row["last_error"]
    assert (await probe.reasons(dispatch_id))[-1] == "dispatch.dead_letter.max_attempts"


async def test_transport_exceptions_and_bad_results_are_failures(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, probe: Any, transport_factory: Any
) -> None:
    def explode(env: DispatchEnvelope) -> TransportResult:
        raise RuntimeError("socket closed")

    a = await _enqueue(conn, clock)
    await studio_outbox.deliver_due_dispatches(
        conn, transport=transport_factory(explode), clock=clock
    )
    assert (await probe.row(a))["last_error"] == "transport raised RuntimeError: socket closed"
    b = await _enqueue(conn, clock)
    await studio_outbox.deliver_due_dispatches(
        conn, transport=transport_factory(lambda env: "yes"), clock=clock
    )
    assert "not a TransportResult" in (await probe.row(b))["last_error"]


async def test_outcome_is_guarded_on_the_claimed_attempt(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, probe: Any, transport_factory: Any
) -> None:
    dispatch_id = await _enqueue(conn, clock)

    async def lose_the_claim(env: DispatchEnvelope) -> TransportResult:
        # While this send runs, another scanner (after a lapsed lease) claims attempt 2.
        await probe.set(dispatch_id, attempt=2, next_attempt_at=clock() + 999)
        return TransportResult.failure("stale")

    counts = await studio_outbox.deliver_due_dispatches(
        conn, transport=transport_factory(lose_the_claim), clock=clock
    )
    assert counts == {**ZERO, "attempted": 1}
    row = await probe.row(dispatch_id)
    assert row["status"] == "delivering" and row["attempt"] == 2 and row["last_error"] is None
    assert await probe.reasons(dispatch_id) == [
        "dispatch.pending.enqueued",
        "dispatch.delivering.claimed",
    ]


async def test_bad_delivery_arguments(conn: aiosqlite.Connection) -> None:
    for kwargs, field in (
        ({"limit": 0}, "limit"),
        ({"concurrency": 0}, "concurrency"),
        ({"limit": "5"}, "limit"),
        ({"notify_template": []}, "notify_template"),
        ({"notify_template": "notify {payload}"}, "notify_template"),
        ({"transport": object()}, "transport"),
    ):
        with pytest.raises(studio_outbox.InvalidArgument) as caught:
            await studio_outbox.deliver_due_dispatches(conn, **kwargs)
        assert caught.value.field == field


async def test_delivery_refuses_to_run_inside_an_open_transaction(
    conn: aiosqlite.Connection,
) -> None:
    await conn.execute("BEGIN")
    with pytest.raises(studio_outbox.InvalidArgument, match="open transaction"):
        await studio_outbox.deliver_due_dispatches(conn, notify_template=["/bin/true"])
    await conn.rollback()


async def test_cancelling_delivery_stops_the_sends_in_flight(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, probe: Any, transport_factory: Any
) -> None:
    started = asyncio.Event()
    cancelled: list[str] = []

    async def hang(env: DispatchEnvelope) -> TransportResult:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(env.dispatch_id)
            raise
        return TransportResult.success()

    dispatch_id = await _enqueue(conn, clock)
    task = asyncio.create_task(
        studio_outbox.deliver_due_dispatches(conn, transport=transport_factory(hang), clock=clock)
    )
    await asyncio.wait_for(started.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled == [dispatch_id]
    row = await probe.row(dispatch_id)
    # The claim stays; its lease lapses and a later pass sends attempt 2.
    assert row["status"] == "delivering" and row["attempt"] == 1
    assert row["next_attempt_at"] == clock() + 15
