"""A schedule's runs page reads its exact total from trigger-kept counts, not by counting."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from studio_scheduler_core import ScheduleService
from studio_scheduler_core import ensure_schema as ensure_core_schema
from studio_scheduler_core._schema import MIGRATIONS, PACKAGE
from studio_state import ManualClock, connect, ensure_schema, fetch_all, migrate

_INSERT = (
    "INSERT INTO schedule_runs (id, schedule_id, trigger_context, action_kind, action_args, "
    "status, fired_at, created_at) VALUES (?, ?, '{}', 'command', '{}', ?, ?, ?)"
)
_STATUSES = ("completed", "failed", "timed_out", "running")


async def _add(conn: Any, schedule_id: str | None, prefix: str, n: int, t0: float) -> None:
    await conn.executemany(
        _INSERT,
        [(f"{prefix}{i:04d}", schedule_id, _STATUSES[i % 4], t0 + i, t0 + i) for i in range(n)],
    )
    await conn.commit()


async def _exact(conn: Any) -> dict[tuple[str, str], int]:
    rows = await fetch_all(
        conn,
        "SELECT schedule_id, status, count(*) AS n FROM schedule_runs "
        "WHERE schedule_id IS NOT NULL GROUP BY schedule_id, status",
    )
    return {(r["schedule_id"], r["status"]): r["n"] for r in rows}


async def _kept(conn: Any) -> dict[tuple[str, str], int]:
    rows = await fetch_all(conn, "SELECT schedule_id, status, n FROM schedule_run_counts")
    return {(r["schedule_id"], r["status"]): r["n"] for r in rows}


async def test_counts_follow_inserts_status_changes_deletes_and_cascades(
    conn: Any, service: ScheduleService, clock: ManualClock, h: Any
) -> None:
    one = await service.create(h.command_schedule("x.py"))
    two = await service.create(h.command_schedule("y.py", name="two"))
    await _add(conn, one.id, "a", 40, clock())
    await _add(conn, two.id, "b", 10, clock())
    await _add(conn, None, "c", 5, clock())  # ad-hoc runs belong to no schedule
    assert await _kept(conn) == await _exact(conn)

    await conn.execute("UPDATE schedule_runs SET status = 'completed' WHERE status = 'running'")
    await conn.execute("UPDATE schedule_runs SET schedule_id = ? WHERE id = 'a0001'", (two.id,))
    await conn.execute("DELETE FROM schedule_runs WHERE id IN ('a0002', 'b0003', 'c0001')")
    await conn.commit()
    assert await _kept(conn) == await _exact(conn)

    runs, total = await service.list_runs(one.id, limit=5)
    assert total == 38 and len(runs) == 5
    failed, failed_total = await service.list_runs(one.id, status="failed", limit=100)
    assert failed_total == len(failed) == sum(1 for r in failed if r.status == "failed")
    assert (await service.list_runs(one.id, status="running"))[1] == 0

    await service.delete(one.id)  # its runs go with it (ON DELETE CASCADE)
    kept = await _kept(conn)
    assert kept == await _exact(conn)
    assert not [key for key in kept if key[0] == one.id]
    assert all(n > 0 for n in kept.values())


async def test_the_migration_counts_the_runs_already_there(tmp_path: Path, h: Any) -> None:
    path = tmp_path / "old.db"
    async with connect(path) as conn:
        await ensure_schema(conn)
        before = MIGRATIONS[:6]  # the schema before the run counts
        await migrate(conn, PACKAGE, before)
        await conn.execute(
            "INSERT INTO schedules (id, name, trigger_type, interval_sec, action_kind, "
            "created_at, updated_at) VALUES ('s1', 'old', 'interval', 60, 'command', 1.0, 1.0)"
        )
        await _add(conn, "s1", "r", 30, 1.0)
        await conn.commit()
        await ensure_core_schema(conn)  # every later migration, the policies' rebuild too
        assert await _kept(conn) == await _exact(conn) != {}
        await _add(conn, "s1", "n", 3, 100.0)
        assert await _kept(conn) == await _exact(conn)


@pytest.mark.sqlite_only("reads SQLite's query plan")
async def test_the_adhoc_run_list_reads_its_order_from_an_index(
    conn: Any, clock: ManualClock
) -> None:
    await conn.executemany(
        "INSERT INTO schedule_runs (id, trigger_context, action_kind, action_args, status, "
        "fired_at, created_at, queued_at) VALUES (?, '{}', 'command', '{}', 'completed', ?, ?, ?)",
        [(f"q{i:03d}", clock() + i, clock() + i, clock() + i // 2) for i in range(60)],
    )
    await conn.commit()
    sql = (
        "SELECT * FROM schedule_runs WHERE schedule_id IS NULL AND queued_at IS NOT NULL "
        "ORDER BY queued_at DESC, id DESC LIMIT 10 OFFSET 0"
    )
    plan = " | ".join(r["detail"] for r in await fetch_all(conn, f"EXPLAIN QUERY PLAN {sql}"))
    assert "idx_schedule_runs_adhoc_page" in plan and "TEMP B-TREE" not in plan, plan
    rows = await fetch_all(conn, sql)
    assert [r["id"] for r in rows] == [f"q{i:03d}" for i in range(59, 49, -1)]
