from __future__ import annotations

import json
from typing import Any

import aiosqlite
import pytest

import studio_outbox
import studio_state
from studio_outbox import TransportResult


async def _dead_letter(conn: aiosqlite.Connection, clock: Any, transport_factory: Any) -> str:
    dispatch_id = await studio_outbox.enqueue_dispatch(
        conn, kind="k", deliver_to="d", max_attempts=1, clock=clock
    )
    failing = transport_factory(lambda env: TransportResult.failure("down"))
    counts = await studio_outbox.deliver_due_dispatches(conn, transport=failing, clock=clock)
    assert counts["dead_letter"] == 1
    return dispatch_id


async def test_retry_from_dead_letter_starts_a_fresh_series(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, probe: Any, transport_factory: Any
) -> None:
    dispatch_id = await _dead_letter(conn, clock, transport_factory)
    clock.advance(100)
    await studio_outbox.retry_dispatch(conn, dispatch_id, clock=clock)
    row = await probe.row(dispatch_id)
    assert row["status"] == "pending" and row["attempt"] == 0
    assert row["next_attempt_at"] == clock() and row["last_error"] is None
    assert json.loads(row["payload"])["attempt"] == 0
    history = await probe.history(dispatch_id)
    assert history[-1]["reason_code"] == "dispatch.pending.operator_retry"
    assert history[-1]["previous_status"] == "dead_letter"
    ok = transport_factory()
    counts = await studio_outbox.deliver_due_dispatches(conn, transport=ok, clock=clock)
    assert counts["delivered"] == 1
    assert [e.attempt for e in ok.sent] == [1]


async def test_retry_from_expired_clears_a_past_expiry(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, probe: Any, transport_factory: Any
) -> None:
    dispatch_id = await studio_outbox.enqueue_dispatch(
        conn, kind="k", deliver_to="d", expires_at=clock() + 1, clock=clock
    )
    clock.advance(5)
    transport = transport_factory()
    assert (await studio_outbox.deliver_due_dispatches(conn, transport=transport, clock=clock))[
        "expired"
    ] == 1
    await studio_outbox.retry_dispatch(conn, dispatch_id, clock=clock)
    row = await probe.row(dispatch_id)
    assert row["status"] == "pending" and row["expires_at"] is None
    assert json.loads(row["payload"])["expires_at"] is None
    assert "expires_at was cleared" in (await probe.history(dispatch_id))[-1]["reason_summary"]
    counts = await studio_outbox.deliver_due_dispatches(conn, transport=transport, clock=clock)
    assert counts["delivered"] == 1 and counts["expired"] == 0


async def test_retry_keeps_an_expiry_still_in_the_future(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, probe: Any, transport_factory: Any
) -> None:
    dispatch_id = await studio_outbox.enqueue_dispatch(
        conn, kind="k", deliver_to="d", max_attempts=1, expires_at=clock() + 1000, clock=clock
    )
    failing = transport_factory(lambda env: TransportResult.failure("down"))
    await studio_outbox.deliver_due_dispatches(conn, transport=failing, clock=clock)
    await studio_outbox.retry_dispatch(conn, dispatch_id, clock=clock)
    assert (await probe.row(dispatch_id))["expires_at"] == clock() + 1000


@pytest.mark.parametrize("status", ["pending", "delivering", "delivered", "acked"])
async def test_retry_refuses_other_statuses(
    conn: aiosqlite.Connection, probe: Any, status: str
) -> None:
    dispatch_id = await studio_outbox.enqueue_dispatch(conn, kind="k", deliver_to="d")
    await probe.set(dispatch_id, status=status)
    before = await probe.snapshot()
    with pytest.raises(studio_outbox.InvalidDispatchState, match=status):
        await studio_outbox.retry_dispatch(conn, dispatch_id)
    assert await probe.snapshot() == before
    with pytest.raises(studio_outbox.DispatchNotFound):
        await studio_outbox.retry_dispatch(conn, "missing")


async def test_purge_refuses_a_live_delivering_lease(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, probe: Any
) -> None:
    dispatch_id = await studio_outbox.enqueue_dispatch(conn, kind="k", deliver_to="d", clock=clock)
    await probe.set(dispatch_id, status="delivering", attempt=1, next_attempt_at=clock() + 15)
    with pytest.raises(studio_outbox.InvalidDispatchState, match="in flight"):
        await studio_outbox.purge_dispatch(conn, dispatch_id, clock=clock)
    assert await probe.count() == 1
    clock.advance(15)  # the lease lapsed: the sender is gone
    await studio_outbox.purge_dispatch(conn, dispatch_id, clock=clock)
    assert await probe.count() == 0
    assert await studio_outbox.get_dispatch(conn, dispatch_id) is None
    # History survives the purge, which adds its own (audit) row.
    assert await probe.reasons(dispatch_id) == [
        "dispatch.pending.enqueued",
        "dispatch.purged.operator",
    ]
    with pytest.raises(studio_outbox.DispatchNotFound):
        await studio_outbox.purge_dispatch(conn, dispatch_id, clock=clock)


@pytest.mark.parametrize("status", ["pending", "delivered", "acked", "dead_letter", "expired"])
async def test_purge_deletes_rows_not_in_flight(
    conn: aiosqlite.Connection, probe: Any, status: str
) -> None:
    dispatch_id = await studio_outbox.enqueue_dispatch(conn, kind="k", deliver_to="d")
    await probe.set(dispatch_id, status=status, next_attempt_at=1e12)
    await studio_outbox.purge_dispatch(conn, dispatch_id)
    assert await probe.count() == 0


async def test_get_list_count_never_return_ack_tokens(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock
) -> None:
    ids = []
    for i in range(5):
        ids.append(
            await studio_outbox.enqueue_dispatch(
                conn,
                kind="alert" if i % 2 else "notice",
                deliver_to=f"d{i}",
                ack_required=True,
                clock=clock,
            )
        )
        clock.advance(1)
    listed = await studio_outbox.list_dispatches(conn)
    assert [d["id"] for d in listed] == ids[::-1]  # most recently enqueued first
    for item in [*listed, await studio_outbox.get_dispatch(conn, ids[0])]:
        assert item is not None
        assert "ack_token" not in item and "ack_token" not in item["payload"]
        assert item["ack_required"] is True and isinstance(item["payload"], dict)
    assert [d["id"] for d in await studio_outbox.list_dispatches(conn, kind="alert")] == [
        ids[3],
        ids[1],
    ]
    page = await studio_outbox.list_dispatches(conn, limit=2, offset=1)
    assert [d["id"] for d in page] == [ids[3], ids[2]]
    assert await studio_outbox.count_dispatches(conn) == 5
    assert await studio_outbox.count_dispatches(conn, kind="alert") == 2
    assert await studio_outbox.count_dispatches(conn, status="pending", kind="notice") == 3
    assert await studio_outbox.count_dispatches(conn, status="acked") == 0
    assert await studio_outbox.list_dispatches(conn, status="acked") == []
    assert await studio_outbox.get_dispatch(conn, "missing") is None


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"status": "done"}, "status"),
        ({"kind": ""}, "kind"),
        ({"limit": 0}, "limit"),
        ({"offset": -1}, "offset"),
        ({"limit": "10"}, "limit"),
    ],
)
async def test_list_rejects_bad_filters(
    conn: aiosqlite.Connection, kwargs: dict[str, Any], field: str
) -> None:
    with pytest.raises(studio_outbox.InvalidArgument) as caught:
        await studio_outbox.list_dispatches(conn, **kwargs)
    assert caught.value.field == field


async def test_backlog_and_next_due_at(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, probe: Any, transport_factory: Any
) -> None:
    assert await studio_outbox.next_due_at(conn) is None
    empty = await studio_outbox.dispatch_backlog(conn, clock=clock)
    assert empty == {
        "due": 0,
        "oldest_due_at": None,
        "by_status": dict.fromkeys(studio_outbox.DISPATCH_STATUSES, 0),
    }
    first = await studio_outbox.enqueue_dispatch(conn, kind="k", deliver_to="d", clock=clock)
    clock.advance(10)
    await studio_outbox.enqueue_dispatch(conn, kind="k", deliver_to="d", clock=clock)
    await studio_outbox.enqueue_dispatch(
        conn, kind="k", deliver_to="d", max_attempts=1, clock=clock
    )
    await probe.set(first, next_attempt_at=clock() + 50)
    backlog = await studio_outbox.dispatch_backlog(conn, clock=clock)
    assert backlog["due"] == 2 and backlog["oldest_due_at"] == clock()
    assert backlog["by_status"]["pending"] == 3
    assert await studio_outbox.next_due_at(conn) == clock()
    failing = transport_factory(lambda env: TransportResult.failure("x"))
    await studio_outbox.deliver_due_dispatches(conn, transport=failing, clock=clock)
    backlog = await studio_outbox.dispatch_backlog(conn, clock=clock)
    assert backlog["due"] == 0
    assert backlog["by_status"] == {
        "pending": 2,
        "delivering": 0,
        "delivered": 0,
        "acked": 0,
        "dead_letter": 1,
        "expired": 0,
    }
    assert await studio_outbox.next_due_at(conn) == clock() + 50
