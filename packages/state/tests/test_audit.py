"""Reading the audit trail: filters, newest first, and continuing a page."""

from __future__ import annotations

import aiosqlite

from studio_state import Transition, TransitionFilter, read_transitions, record_transitions


async def _trail(conn: aiosqlite.Connection) -> None:
    rows = [
        Transition("schedule", "s1", "enabled", "schedule.enabled.operator", 10.0, actor="ops"),
        Transition("schedule", "s1", "disabled", "schedule.disabled.operator", 20.0, actor="cli:a"),
        Transition("dispatch", "d1", "acked", "dispatch.acked.operator", 30.0, actor="ops"),
        Transition("dispatch", "d2", "acked", "dispatch.acked.operator", 30.0, actor="ops"),
    ]
    await conn.execute("BEGIN IMMEDIATE")
    await record_transitions(conn, rows)
    await conn.commit()


async def test_filters_select_by_actor_entity_and_time(conn: aiosqlite.Connection) -> None:
    await _trail(conn)

    async def ids(where: TransitionFilter) -> list[tuple[str, float]]:
        rows = await read_transitions(conn, where, limit=10)
        return [(row["entity_id"], row["created_at"]) for row in rows]

    assert [e for e, _ in await ids(TransitionFilter(actor="ops"))][-1] == "s1"
    assert len(await ids(TransitionFilter(actor="ops"))) == 3
    assert await ids(TransitionFilter(entity_type="schedule", entity_id="s1")) == [
        ("s1", 20.0),
        ("s1", 10.0),
    ]
    assert await ids(TransitionFilter(since=20.0, until=30.0)) == [("s1", 20.0)]
    assert await ids(TransitionFilter(actor="nobody")) == []


async def test_pages_continue_before_the_last_row(conn: aiosqlite.Connection) -> None:
    await _trail(conn)
    first = await read_transitions(conn, TransitionFilter(), limit=2)
    assert [row["created_at"] for row in first] == [30.0, 30.0]
    last = first[-1]
    rest = await read_transitions(
        conn, TransitionFilter(before=(last["created_at"], last["id"])), limit=10
    )
    assert [row["created_at"] for row in rest] == [20.0, 10.0]
    seen = {row["id"] for row in first} | {row["id"] for row in rest}
    assert len(seen) == 4
