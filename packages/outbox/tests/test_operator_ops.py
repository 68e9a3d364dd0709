"""An operator's ack without the receiver's token, and the bulk purge (asyncio and sqlite3)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import aiosqlite
import pytest

import studio_outbox
import studio_state
from studio_outbox import sync


async def _enqueue(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, n: int, **kwargs: object
) -> list[str]:
    ids = []
    for i in range(n):
        ids.append(
            await studio_outbox.enqueue_dispatch(
                conn, kind="alert", deliver_to=f"ops-{i}", clock=clock, **kwargs
            )
        )
    return ids


async def _set_status(conn: aiosqlite.Connection, ids: list[str], status: str, at: float) -> None:
    async with studio_state.write_transaction(conn):
        for dispatch_id in ids:
            await conn.execute(
                "UPDATE dispatch_outbox SET status = ?, updated_at = ?, "
                "next_attempt_at = ? WHERE id = ?",
                (status, at, at + 300, dispatch_id),
            )


async def _transitions(conn: aiosqlite.Connection, dispatch_id: str) -> list[dict[str, object]]:
    return await studio_state.fetch_all(
        conn,
        "SELECT previous_status, status, reason_code, actor FROM status_transitions "
        "WHERE entity_id = ? ORDER BY rowid",
        (dispatch_id,),
    )


async def test_operator_ack_records_the_actor_without_a_token(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock
) -> None:
    (needs_ack,) = await _enqueue(conn, clock, 1, ack_required=True)
    (no_ack,) = await _enqueue(conn, clock, 1)

    assert await studio_outbox.operator_ack_dispatch(conn, needs_ack, actor="alice", clock=clock)
    row = await studio_outbox.get_dispatch(conn, needs_ack)
    assert row is not None and row["status"] == "acked"
    last = (await _transitions(conn, needs_ack))[-1]
    assert last == {
        "previous_status": "pending",
        "status": "acked",
        "reason_code": studio_outbox.OPERATOR_ACKED,
        "actor": "alice",
    }
    # again: nothing more is written
    assert await studio_outbox.operator_ack_dispatch(conn, needs_ack, actor="bob", clock=clock)
    assert len(await _transitions(conn, needs_ack)) == 2

    with pytest.raises(studio_outbox.AckNotRequired):
        await studio_outbox.operator_ack_dispatch(conn, no_ack, actor="alice", clock=clock)
    with pytest.raises(studio_outbox.DispatchNotFound):
        await studio_outbox.operator_ack_dispatch(conn, "000000000000", actor="a", clock=clock)
    with pytest.raises(studio_outbox.InvalidArgument, match="actor"):
        await studio_outbox.operator_ack_dispatch(conn, needs_ack, actor="", clock=clock)


async def test_operator_ack_refuses_a_dead_letter(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock
) -> None:
    (dead,) = await _enqueue(conn, clock, 1, ack_required=True)
    await _set_status(conn, [dead], "dead_letter", clock())
    with pytest.raises(studio_outbox.InvalidDispatchState):
        await studio_outbox.operator_ack_dispatch(conn, dead, actor="alice", clock=clock)


async def test_bulk_purge_counts_deletes_and_never_touches_delivering_rows(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock
) -> None:
    old_dead = await _enqueue(conn, clock, 3)
    await _set_status(conn, old_dead, "dead_letter", clock() - 7200)
    new_dead = await _enqueue(conn, clock, 2)
    await _set_status(conn, new_dead, "dead_letter", clock())
    delivering = await _enqueue(conn, clock, 2)
    await _set_status(conn, delivering, "delivering", clock() - 7200)

    cutoff = clock() - 3600
    would = await studio_outbox.purge_dispatches(
        conn, status="dead_letter", before=cutoff, actor="cli:ops", dry_run=True, clock=clock
    )
    assert would == 3
    assert await studio_outbox.count_dispatches(conn, status="dead_letter") == 5

    removed = await studio_outbox.purge_dispatches(
        conn, status="dead_letter", before=cutoff, actor="cli:ops", clock=clock
    )
    assert removed == 3
    left = {row["id"] for row in await studio_outbox.list_dispatches(conn, limit=100)}
    assert left == set(new_dead) | set(delivering)
    audit = await _transitions(conn, old_dead[0])
    assert audit[-1] == {
        "previous_status": "dead_letter",
        "status": "purged",
        "reason_code": studio_outbox.PURGED,
        "actor": "cli:ops",
    }

    with pytest.raises(studio_outbox.InvalidArgument, match="status"):
        await studio_outbox.purge_dispatches(conn, status="delivering", actor="a", clock=clock)
    with pytest.raises(studio_outbox.InvalidArgument, match="status"):
        await studio_outbox.purge_dispatches(conn, status="nope", actor="a", clock=clock)
    with pytest.raises(studio_outbox.InvalidArgument, match="before"):
        await studio_outbox.purge_dispatches(
            conn,
            status="dead_letter",
            before="yesterday",
            actor="a",
            clock=clock,  # type: ignore[arg-type]
        )
    # no time bound: every remaining dead letter goes; delivering rows stay
    assert (
        await studio_outbox.purge_dispatches(conn, status="dead_letter", actor="a", clock=clock)
        == 2
    )
    assert await studio_outbox.count_dispatches(conn, status="delivering") == 2


async def test_bulk_purge_runs_in_batches(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock
) -> None:
    ids = await _enqueue(conn, clock, 1203)
    await _set_status(conn, ids, "expired", clock())
    assert (
        await studio_outbox.purge_dispatches(conn, status="expired", actor="a", clock=clock) == 1203
    )
    assert await studio_outbox.count_dispatches(conn) == 0
    purged = await studio_state.fetch_one(
        conn,
        "SELECT count(*) AS n FROM status_transitions WHERE reason_code = ?",
        (studio_outbox.PURGED,),
    )
    assert purged is not None and purged["n"] == 1203


def test_sync_operator_ack_and_purge(tmp_path: Path) -> None:
    clock = studio_state.ManualClock(1_700_000_000.0)
    conn = sync.connect(tmp_path / "producer.db")
    try:
        sync.ensure_schema(conn)
        acked = sync.enqueue_dispatch(
            conn, kind="k", deliver_to="d", ack_required=True, clock=clock
        )
        assert sync.operator_ack_dispatch(conn, acked, actor="carol", clock=clock)
        assert (sync.get_dispatch(conn, acked) or {})["status"] == "acked"
        assert sync.purge_dispatches(conn, status="acked", actor="carol", dry_run=True) == 1
        assert sync.purge_dispatches(conn, status="acked", actor="carol", clock=clock) == 1
        assert sync.get_dispatch(conn, acked) is None
        actors = [
            row[0]
            for row in sqlite3.connect(tmp_path / "producer.db").execute(
                "SELECT actor FROM status_transitions WHERE entity_id = ? ORDER BY rowid", (acked,)
            )
        ]
        assert actors[-2:] == ["carol", "carol"]
    finally:
        conn.close()
