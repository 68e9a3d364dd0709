from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiosqlite
import pytest

import studio_state
from studio_state import InvalidTransition, Transition


async def _insert(conn: aiosqlite.Connection, item_id: str, status: str = "pending") -> None:
    await conn.execute("INSERT INTO items (id, status) VALUES (?, ?)", (item_id, status))


async def _claim(conn: aiosqlite.Connection, item_id: str, **kwargs: Any) -> bool:
    return await studio_state.transition(
        conn,
        table="items",
        entity_type="dispatch",
        entity_id=item_id,
        from_statuses=["pending"],
        to_status="delivering",
        reason_code="dispatch.delivering.claimed",
        now=10.0,
        **kwargs,
    )


async def test_transition_applies_and_writes_its_row(
    conn: aiosqlite.Connection, fetch_all: Any
) -> None:
    await _insert(conn, "a")
    applied = await _claim(
        conn,
        "a",
        set_fields={"attempt": 1, "note": "claimed"},
        reason_summary="claimed by test",
        evidence_refs=["run:1"],
        actor="tester",
        metadata={"k": "v"},
    )
    assert applied is True
    assert await fetch_all(conn, "SELECT status, attempt, note, updated_at FROM items") == [
        {"status": "delivering", "attempt": 1, "note": "claimed", "updated_at": 10.0}
    ]
    rows = await fetch_all(conn, "SELECT * FROM status_transitions")
    assert len(rows) == 1
    row = rows[0]
    assert row["entity_type"] == "dispatch" and row["entity_id"] == "a"
    assert row["previous_status"] == "pending" and row["status"] == "delivering"
    assert row["reason_code"] == "dispatch.delivering.claimed"
    assert row["reason_summary"] == "claimed by test" and row["actor"] == "tester"
    assert json.loads(row["evidence_refs"]) == ["run:1"]
    assert json.loads(row["metadata"]) == {"k": "v"}
    assert row["created_at"] == 10.0


async def test_a_lost_guard_writes_nothing(conn: aiosqlite.Connection, fetch_all: Any) -> None:
    await _insert(conn, "a", status="delivered")
    assert await _claim(conn, "a") is False
    assert await _claim(conn, "missing") is False
    assert await fetch_all(conn, "SELECT status FROM items") == [{"status": "delivered"}]
    assert await fetch_all(conn, "SELECT * FROM status_transitions") == []


async def test_extra_guards_are_part_of_the_condition(
    conn: aiosqlite.Connection, fetch_all: Any
) -> None:
    await _insert(conn, "a")
    assert await _claim(conn, "a", guards={"attempt": 3}) is False
    assert await _claim(conn, "a", guards={"note": None, "attempt": 0}) is True
    assert await fetch_all(conn, "SELECT count(*) AS n FROM status_transitions") == [{"n": 1}]


async def test_previous_status_is_read_when_several_are_allowed(
    conn: aiosqlite.Connection, fetch_all: Any
) -> None:
    await _insert(conn, "a", status="delivered")
    applied = await studio_state.transition(
        conn,
        table="items",
        entity_type="dispatch",
        entity_id="a",
        from_statuses=["pending", "delivering", "delivered"],
        to_status="acked",
        reason_code="dispatch.acked.consumer",
        now=1.0,
    )
    assert applied
    rows = await fetch_all(conn, "SELECT previous_status, status FROM status_transitions")
    assert rows == [{"previous_status": "delivered", "status": "acked"}]


async def test_guarded_transition_applies_once_under_two_concurrent_writers(
    db_path: Path, conn: aiosqlite.Connection, fetch_all: Any
) -> None:
    for i in range(20):
        await _insert(conn, f"i{i}")
    async with studio_state.connect(db_path) as other:
        for i in range(20):
            results = await asyncio.gather(_claim(conn, f"i{i}"), _claim(other, f"i{i}"))
            assert sorted(results) == [False, True], results
    rows = await fetch_all(
        conn, "SELECT entity_id, count(*) AS n FROM status_transitions GROUP BY entity_id"
    )
    assert len(rows) == 20 and all(r["n"] == 1 for r in rows)


async def test_transition_row_rolls_back_with_the_change(
    conn: aiosqlite.Connection, fetch_all: Any
) -> None:
    await _insert(conn, "a")
    with pytest.raises(RuntimeError, match="boom"):
        async with studio_state.write_transaction(conn):
            assert await _claim(conn, "a")
            raise RuntimeError("boom")
    assert await fetch_all(conn, "SELECT status FROM items") == [{"status": "pending"}]
    assert await fetch_all(conn, "SELECT * FROM status_transitions") == []


async def test_transition_row_commits_with_the_caller_transaction(
    db_path: Path, conn: aiosqlite.Connection, fetch_all: Any
) -> None:
    await _insert(conn, "a")
    await conn.execute("BEGIN IMMEDIATE")
    assert await _claim(conn, "a")
    assert conn.in_transaction  # joined, not committed by the helper
    async with studio_state.connect(db_path) as reader:
        assert await fetch_all(reader, "SELECT count(*) AS n FROM status_transitions") == [{"n": 0}]
        await conn.commit()
        assert await fetch_all(reader, "SELECT count(*) AS n FROM status_transitions") == [{"n": 1}]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"table": "items; DROP TABLE items"}, "table"),
        ({"from_statuses": []}, "from_statuses"),
        ({"set_fields": {"status": "x"}}, "status"),
        ({"set_fields": {"bad col": 1}}, "set_fields"),
        ({"guards": {"1=1 OR id": 1}}, "guard"),
        ({"entity_type": "widget"}, "entity_type"),
    ],
)
async def test_malformed_requests_are_refused_and_write_nothing(
    conn: aiosqlite.Connection, fetch_all: Any, kwargs: dict[str, Any], message: str
) -> None:
    await _insert(conn, "a")
    request: dict[str, Any] = {
        "table": "items",
        "entity_type": "dispatch",
        "entity_id": "a",
        "from_statuses": ["pending"],
        "to_status": "delivering",
        "reason_code": "x.y.z",
        "now": 1.0,
    }
    request.update(kwargs)
    with pytest.raises(InvalidTransition, match=message):
        await studio_state.transition(conn, **request)
    assert await fetch_all(conn, "SELECT status FROM items") == [{"status": "pending"}]
    assert await fetch_all(conn, "SELECT * FROM status_transitions") == []
    assert conn.in_transaction is False


async def test_record_transitions_writes_a_batch(
    conn: aiosqlite.Connection, fetch_all: Any
) -> None:
    rows = [
        Transition("schedule_run", f"r{i}", "skipped", "schedule.deferred.capacity", 5.0)
        for i in range(50)
    ]
    async with studio_state.write_transaction(conn):
        assert await studio_state.record_transitions(conn, rows) == 50
    assert await fetch_all(conn, "SELECT count(*) AS n FROM status_transitions") == [{"n": 50}]
    assert await studio_state.record_transitions(conn, []) == 0


async def test_record_transition_refuses_an_empty_reason(conn: aiosqlite.Connection) -> None:
    with pytest.raises(InvalidTransition, match="reason_code"):
        await studio_state.record_transition(
            conn, entity_type="schedule", entity_id="s", status="disabled", reason_code="", now=1
        )
