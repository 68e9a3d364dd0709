"""The reads the API and the CLI show, straight from scheduler-core (no SQL in the hosts)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from studio_scheduler_core import (
    HeldSlot,
    RunState,
    latest_transition_seq,
    read_dispatch_counts,
    read_overview,
    read_run_status,
    read_runs_page,
    read_slot_holders,
    schedules_have_zones,
)
from studio_scheduler_core.testing import T0
from studio_state import write_transaction


async def _insert_run(conn: Any, run_id: str, *, schedule_id: str | None, status: str) -> None:
    async with write_transaction(conn):
        await conn.execute(
            "INSERT INTO schedule_runs (id, schedule_id, trigger_context, action_kind, "
            "action_args, status, fired_at, created_at, chain_depth) "
            "VALUES (?, ?, '{}', 'command', '{}', ?, ?, ?, 0)",
            (run_id, schedule_id, status, T0, T0),
        )


async def test_run_status_and_slots(conn: Any, service: Any, h: Any) -> None:
    assert await read_run_status(conn, "nope") is None
    assert await read_slot_holders(conn) == ([], 0)
    created = await service.create(h.command_schedule("holder", h.blocker))
    await _insert_run(conn, "r-sched", schedule_id=created.id, status="running")
    await _insert_run(conn, "r-adhoc", schedule_id=None, status="running")
    await _insert_run(conn, "r-done", schedule_id=created.id, status="completed")
    assert await read_run_status(conn, "r-sched") == RunState(
        id="r-sched",
        status="running",
        status_reason_code=None,
        status_reason_summary=None,
        node_id=None,
    )
    holders, adhoc = await read_slot_holders(conn)
    assert holders == [HeldSlot(created.id, "r-sched", T0, created.name)]
    assert adhoc == 1
    assert await schedules_have_zones(conn) is True
    overview = await read_overview(conn, zones=True)
    assert {row.id for row in overview.in_flight} == {"r-sched", "r-adhoc"}
    assert overview.schedules_enabled == 1 and overview.schedules_disabled == 0
    rows, total = await read_runs_page(conn, status="running", zones=True, limit=10, offset=0)
    assert total == 2 and {row.id for row in rows} == {"r-sched", "r-adhoc"}


@pytest.mark.sqlite_only("reads the SQLite file or its schema itself")
async def test_metric_reads_on_a_plain_sqlite3_connection(conn: Any, db_path: Path) -> None:
    db = sqlite3.connect(f"{db_path.absolute().as_uri()}?mode=ro", uri=True)
    try:
        assert read_dispatch_counts(db) == {}
        seq = latest_transition_seq(db)
    finally:
        db.close()
    assert seq >= 0
