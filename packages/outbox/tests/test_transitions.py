from __future__ import annotations

from typing import Any

import aiosqlite

import studio_outbox
import studio_state
from studio_outbox import DispatchReason, TransportResult


async def test_every_reason_code_is_written_with_its_status_change(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, probe: Any, transport_factory: Any
) -> None:
    ok = transport_factory()
    failing = transport_factory(lambda env: TransportResult.failure("down"))
    gone_ = transport_factory(lambda env: TransportResult.permanent_failure("HTTP 410: gone"))

    async def deliver(transport: Any) -> None:
        await studio_outbox.deliver_due_dispatches(conn, transport=transport, clock=clock)

    async def enqueue(**kwargs: Any) -> str:
        return await studio_outbox.enqueue_dispatch(
            conn, kind="k", deliver_to="d", clock=clock, **kwargs
        )

    delivered = await enqueue()
    await deliver(ok)
    acked = await enqueue(ack_required=True)
    await deliver(ok)
    await studio_outbox.ack_dispatch(
        conn, acked, (await probe.row(acked))["ack_token"], clock=clock
    )
    retried = await enqueue(max_attempts=2)
    await deliver(failing)
    clock.advance(60)
    await deliver(failing)  # second failure: dead letter
    await studio_outbox.retry_dispatch(conn, retried, clock=clock)
    unacked = await enqueue(ack_required=True, max_attempts=1)
    await deliver(ok)
    clock.advance(60)
    await deliver(ok)  # ack window over: dead letter without a send
    expired = await enqueue(expires_at=clock() + 1)
    clock.advance(2)
    await deliver(ok)
    await studio_outbox.retry_dispatch(conn, expired, clock=clock)
    gone = await enqueue()
    clock.advance(1)
    await deliver(gone_)

    rows = await conn.execute_fetchall(
        "SELECT entity_id, previous_status, status, reason_code, actor FROM status_transitions "
        "WHERE entity_type = 'dispatch' ORDER BY created_at, rowid"
    )
    seen = {(r["previous_status"], r["status"], r["reason_code"]) for r in rows}
    assert seen == {
        (None, "pending", DispatchReason.ENQUEUED),
        ("pending", "delivering", DispatchReason.CLAIMED),
        ("delivering", "delivered", DispatchReason.TRANSPORT_OK),
        ("delivering", "pending", DispatchReason.AWAITING_ACK),
        ("pending", "acked", DispatchReason.ACKED),
        ("delivering", "pending", DispatchReason.RETRY_BACKOFF),
        ("delivering", "dead_letter", DispatchReason.MAX_ATTEMPTS),
        ("dead_letter", "pending", DispatchReason.OPERATOR_RETRY),
        ("pending", "dead_letter", DispatchReason.ACK_TIMEOUT),
        ("pending", "expired", DispatchReason.EXPIRED_TTL),
        ("expired", "pending", DispatchReason.OPERATOR_RETRY),
        ("delivering", "dead_letter", DispatchReason.GONE),
    }
    assert {r["reason_code"] for r in rows} == set(DispatchReason.ALL)
    actors = {r["reason_code"]: r["actor"] for r in rows}
    assert actors[DispatchReason.CLAIMED] == "studio_outbox.delivery"
    assert actors[DispatchReason.ACKED] == "consumer"
    assert actors[DispatchReason.OPERATOR_RETRY] == "operator"
    # Each row's history replays to its current status, one transition per change.
    for dispatch_id in (delivered, acked, retried, unacked, expired, gone):
        history = await probe.history(dispatch_id)
        for before, after in zip(history, history[1:], strict=False):
            assert after["previous_status"] == before["status"]
        assert history[-1]["status"] == (await probe.row(dispatch_id))["status"]


async def test_actor_is_recorded_as_given(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, probe: Any, transport_factory: Any
) -> None:
    dispatch_id = await studio_outbox.enqueue_dispatch(
        conn, kind="k", deliver_to="d", clock=clock, actor="producer-7"
    )
    await studio_outbox.deliver_due_dispatches(
        conn, transport=transport_factory(), clock=clock, actor="standalone-loop"
    )
    assert [h["actor"] for h in await probe.history(dispatch_id)] == [
        "producer-7",
        "standalone-loop",
        "standalone-loop",
    ]


async def test_transition_ids_sort_by_time_so_inserts_stay_on_recent_pages(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, transport_factory: Any
) -> None:
    # Random ids put each transition on a random page of the primary key's B-tree (a cache
    # miss per write once history outgrows the page cache); ordered ids append.
    for _ in range(5):
        await studio_outbox.enqueue_dispatch(conn, kind="k", deliver_to="d", clock=clock)
        clock.advance(1)
        await studio_outbox.deliver_due_dispatches(conn, transport=transport_factory(), clock=clock)
        clock.advance(1)
    rows = await conn.execute_fetchall(
        "SELECT id, created_at FROM status_transitions WHERE entity_type = 'dispatch' "
        "ORDER BY created_at, rowid"
    )
    assert len(rows) == 15
    ids = [r["id"] for r in rows]
    by_second: dict[int, list[str]] = {}
    for r in rows:
        by_second.setdefault(int(r["created_at"]), []).append(r["id"])
    seconds = sorted(by_second)
    assert len(seconds) == 10
    for earlier, later in zip(seconds, seconds[1:], strict=False):
        assert max(by_second[earlier]) < min(by_second[later])
    assert len(set(ids)) == len(ids)
    assert all(len(i) == 20 and int(i, 16) >= 0 for i in ids)
