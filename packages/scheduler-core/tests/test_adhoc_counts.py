"""The ad-hoc runs list and the dashboard's runs page read their exact totals from
trigger-kept counts (``adhoc_run_counts``, ``schedule_run_counts``), not by counting runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from studio_scheduler_core import AdhocRunService, read_runs_page
from studio_scheduler_core import ensure_schema as ensure_core_schema
from studio_scheduler_core._admission.store import compact_counts
from studio_scheduler_core._records.vocab import RUN_STATUSES
from studio_scheduler_core._recovery.retention import retention_pass
from studio_scheduler_core._schema import MIGRATIONS, PACKAGE
from studio_state import connect, ensure_schema, fetch_all, fetch_value, migrate

DAY = 86400.0
_ADHOC = "schedule_id IS NULL AND queued_at IS NOT NULL"


async def _exact(conn: Any, where: str) -> dict[str, int]:
    rows = await fetch_all(
        conn, f"SELECT status, count(*) AS n FROM schedule_runs WHERE {where} GROUP BY status"
    )
    return {str(r["status"]): int(r["n"]) for r in rows}


async def _check(conn: Any, runs: AdhocRunService) -> dict[str, int]:
    """Every total the ad-hoc list and the runs page give equals a count of the rows."""
    adhoc, every = await _exact(conn, _ADHOC), await _exact(conn, "1 = 1")
    assert (await runs.list(limit=1))[1] == sum(adhoc.values())
    assert (await read_runs_page(conn, status=None, zones=False, limit=1, offset=0))[1] == sum(
        every.values()
    )
    for status in RUN_STATUSES:
        assert (await runs.list(status=status, limit=1))[1] == adhoc.get(status, 0), status
        page = await read_runs_page(conn, status=status, zones=False, limit=1, offset=0)
        assert page[1] == every.get(status, 0), status
    return adhoc


async def _status(conn: Any, run_id: str) -> str:
    return str(await fetch_value(conn, "SELECT status FROM schedule_runs WHERE id = ?", (run_id,)))


async def test_totals_stay_exact_across_enqueue_claim_end_cancel_and_retention(
    make_engine, clock, h, db_path: Path, tmp_path: Path
) -> None:
    engine = await make_engine(clock=clock, max_adhoc_concurrent=4)
    conn, runs = engine.conn, engine.runs
    ok = h.script("ok.py", "pass\n")
    flag = tmp_path / "release"

    def command(*args: str, **fields: Any) -> dict[str, Any]:
        return {"action_kind": "command", "action_command": h.PY, "action_command_args": [*args]}

    done = await runs.enqueue(command(ok))
    held = await runs.enqueue(command(h.blocker, str(flag)) | {"concurrency_key": "k"})
    waits = await runs.enqueue(command(ok) | {"concurrency_key": "k"})  # behind ``held``
    dropped = await runs.enqueue(command(ok) | {"concurrency_key": "k"})
    scheduled = await engine.service.create(h.command_schedule(ok))  # not an ad-hoc run
    assert await _check(conn, runs) == {"queued": 4}

    clock.set(float(scheduled.next_fire_at))
    await engine.tick_once()  # fires the schedule; claims ``done`` and ``held``

    async def settled() -> bool:
        return (await _status(conn, done.id), await _status(conn, held.id)) == (
            "completed",
            "running",
        )

    await h.eventually(settled)
    await engine.wait_idle()
    assert await _check(conn, runs) == {"completed": 1, "running": 1, "queued": 2}

    await runs.cancel(dropped.id)  # cancelled while queued
    assert await _check(conn, runs) == {"completed": 1, "running": 1, "queued": 1, "cancelled": 1}
    flag.write_text("go")  # ``held`` ends; its key frees ``waits``

    async def held_done() -> bool:
        return await _status(conn, held.id) == "completed"

    await h.eventually(held_done)
    await engine.tick_once()

    async def waits_done() -> bool:
        return await _status(conn, waits.id) == "completed"

    await h.eventually(waits_done)
    await engine.wait_idle()
    assert await _check(conn, runs) == {"completed": 3, "cancelled": 1}

    clock.advance(3 * DAY)
    fresh = await runs.enqueue(command(ok))
    report = await retention_pass(
        conn, now=clock(), retention_days=2, runs_dir=db_path.parent / "runs"
    )
    assert report.done and report.runs >= 5  # the four old ad-hoc runs and the scheduled one
    assert await _check(conn, runs) == {"queued": 1}
    await runs.cancel(fresh.id)
    await compact_counts(conn)  # PostgreSQL: the deltas fold into one row per status
    assert await _check(conn, runs) == {"cancelled": 1}
    kept = await fetch_all(conn, "SELECT status, n FROM adhoc_run_counts")
    assert [(r["status"], int(r["n"])) for r in kept] == [("cancelled", 1)]

    # the totals are read from the counts: a count made wrong on purpose shows in them
    await conn.execute("UPDATE adhoc_run_counts SET n = n + 100")
    await conn.commit()
    assert (await runs.list(limit=1))[1] == 101
    assert (await runs.list(status="cancelled", limit=1))[1] == 101
    assert (await read_runs_page(conn, status=None, zones=False, limit=1, offset=0))[1] == 101


_INSERT = (
    "INSERT INTO schedule_runs (id, schedule_id, trigger_context, action_kind, action_args, "
    "status, fired_at, created_at, queued_at) VALUES (?, ?, '{}', 'command', '{}', ?, ?, ?, ?)"
)


async def test_the_migration_counts_the_adhoc_runs_already_there(
    db_target: str, settings: Any, clock: Any
) -> None:
    async with connect(db_target) as conn:
        await ensure_schema(conn)
        await migrate(conn, PACKAGE, MIGRATIONS[:13])  # the schema before the ad-hoc counts
        await conn.execute(
            "INSERT INTO schedules (id, name, trigger_type, interval_sec, action_kind, "
            "created_at, updated_at) VALUES ('s1', 'old', 'interval', 60, 'command', 1.0, 1.0)"
        )
        statuses = ("completed", "failed", "queued", "running", "cancelled")
        rows = [(f"a{i:03d}", None, statuses[i % 5], i, i, float(i)) for i in range(23)]
        rows += [(f"s{i:03d}", "s1", "completed", i, i, None) for i in range(7)]
        rows.append(("orphan", None, "failed", 1.0, 1.0, None))  # neither scheduled nor ad-hoc
        await conn.executemany(_INSERT, rows)
        await conn.commit()
        await ensure_core_schema(conn)  # migration 14 counts what is there
        assert await fetch_value(
            conn, "SELECT max(version) FROM schema_migrations WHERE package = ?", (PACKAGE,)
        ) == len(MIGRATIONS)
        assert MIGRATIONS[13].version == 14  # the migration that counts ad-hoc runs ran here
        runs = AdhocRunService(conn, settings=settings, clock=clock)
        assert await _check(conn, runs) == {
            "completed": 5,
            "failed": 5,
            "queued": 5,
            "running": 4,
            "cancelled": 4,
        }
        await conn.execute(_INSERT, ("late", None, "queued", 50.0, 50.0, 50.0))
        await conn.execute("DELETE FROM schedule_runs WHERE id IN ('a000', 's000', 'orphan')")
        await conn.commit()
        assert (await _check(conn, runs))["queued"] == 6
