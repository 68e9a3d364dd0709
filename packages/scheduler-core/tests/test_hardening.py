"""Hardening regressions: lease reads see committed rows only, queued runs survive a stop,
a schedule deleted mid-tick does not sink the deferral batch."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from studio_scheduler_core import AdhocWorker, SchedulerEngine
from studio_state import connect, fetch_one

_TERMINAL_STATUS_PAUSE = (
    "CREATE TEMP TRIGGER studio_test_slow_terminal AFTER UPDATE OF status ON invocations "
    "WHEN NEW.status <> 'running' BEGIN SELECT studio_test_pause(); END"
)


async def _run(conn: Any, run_id: str) -> dict[str, Any]:
    row = await fetch_one(conn, "SELECT * FROM schedule_runs WHERE id = ?", (run_id,))
    assert row is not None
    return row


@pytest.mark.sqlite_only("slows a statement down with an SQL function defined through sqlite3")
async def test_the_lease_watcher_never_sees_the_runs_own_uncommitted_terminal_write(
    settings, db_target, clock, h
) -> None:
    """The terminal write is held open (a slow SQLite trigger inside it) while the watcher
    checks the lease every 10 ms: the watcher must not read the uncommitted status, cancel
    the run mid-commit and leave it ``running``."""
    worker = AdhocWorker(settings=settings, db_path=db_target, clock=clock, watch_seconds=0.01)
    engine = SchedulerEngine(db_target, settings=settings, clock=clock, worker=worker)
    await engine.start(loop=False)
    try:
        await engine.conn.create_function("studio_test_pause", 0, lambda: time.sleep(0.3))
        await engine.conn.execute(_TERMINAL_STATUS_PAUSE)
        run = await engine.runs.enqueue({"action_kind": "command", "action_command": "true"})
        await engine.tick_once()

        async def ended() -> bool:
            # On a connection of its own: the engine's shows its open terminal transaction.
            async with connect(db_target) as reader:
                return (await _run(reader, run.id))["status"] != "running"

        await h.eventually(ended)
        done = await _run(engine.conn, run.id)
        assert (done["status"], done["status_reason_code"]) == ("completed", "run.completed.ok")
        await asyncio.sleep(0.1)  # the watcher has had every chance to revoke it
        assert (await _run(engine.conn, run.id))["status"] == "completed"
        assert worker.in_flight() == 0
    finally:
        await engine.stop()


async def test_a_schedule_deleted_before_the_deferral_flush_does_not_sink_the_batch(
    conn, service, clock, h, tmp_path
) -> None:
    from studio_scheduler_core._fire.occurrence import Deferral, write_deferrals

    kept = await service.create(h.command_schedule(h.env_dump, str(tmp_path / "a"), name="kept"))
    gone = await service.create(h.command_schedule(h.env_dump, str(tmp_path / "b"), name="gone"))

    def record(sid: str) -> Deferral:
        return Deferral(
            schedule_id=sid,
            action_kind="command",
            reason_code="schedule.deferred.capacity",
            summary="no slot free; still due, retried when a slot frees",
            metadata={},
            deferral_count=1,
        )

    # The due scan saw both; the operator deletes one before the batch is written.
    await service.delete(gone.id)
    written = await write_deferrals(conn, [record(gone.id), record(kept.id)], now=clock())
    assert written == 1
    runs = await h.runs_of(conn, kept.id)
    assert [(r.status, r.status_reason_code) for r in runs] == [
        ("skipped", "schedule.deferred.capacity")
    ]
    assert [t.status for t in await h.transitions_of(conn, runs[0].id)] == ["skipped"]
    orphans = await fetch_one(
        conn,
        "SELECT COUNT(*) AS n FROM status_transitions t WHERE t.entity_type = 'schedule_run' "
        "AND NOT EXISTS (SELECT 1 FROM schedule_runs r WHERE r.id = t.entity_id)",
    )
    assert orphans == {"n": 0}


async def test_queued_adhoc_runs_stay_queued_across_an_engine_stop(
    make_engine, db_target, h, tmp_path
) -> None:
    from studio_state import connect

    engine = await make_engine(loop=True, max_adhoc_concurrent=1, tick_seconds=0.05)
    flag = tmp_path / "never"
    first = await engine.runs.enqueue(
        {
            "action_kind": "command",
            "action_command": h.PY,
            "action_command_args": [h.blocker, str(flag)],
        }
    )
    rest = [
        await engine.runs.enqueue(
            {
                "action_kind": "command",
                "action_command": h.PY,
                "action_command_args": [h.blocker, str(flag)],
            }
        )
        for _ in range(3)
    ]

    async def first_started() -> bool:
        return (await _run(engine.conn, first.id))["child_pid"] is not None

    await h.eventually(first_started)
    pgid = int((await _run(engine.conn, first.id))["child_pid"])
    await engine.stop()
    async with connect(db_target) as conn:
        stopped = await _run(conn, first.id)
        assert (stopped["status"], stopped["status_reason_code"]) == (
            "cancelled",
            "run.cancelled.shutdown",
        )
        for run in rest:
            row = await _run(conn, run.id)
            assert (row["status"], row["leased_by"], row["invocation_id"]) == ("queued", None, None)
    assert not h.group_has_live_member(pgid)


async def test_runs_claimed_but_not_started_go_back_to_queued_on_stop(
    settings, db_target, clock, h
) -> None:
    """The stop lands right after the worker claimed and launched two runs, before either
    launch task ran (no child exists): they are queued again, not cancelled."""
    from studio_state import connect

    worker = AdhocWorker(settings=settings, db_path=db_target, clock=clock)
    engine = SchedulerEngine(db_target, settings=settings, clock=clock, worker=worker)
    await engine.start(loop=False)
    action = {"action_kind": "command", "action_command": "true"}
    runs = [await engine.runs.enqueue(action) for _ in range(2)]
    claimed = await worker.claim(engine.conn, now=clock())
    assert len(claimed) == 2
    for fire, attempt in claimed:
        worker.launch(fire, attempt)
    await engine.stop()
    async with connect(db_target) as conn:
        for run in runs:
            row = await _run(conn, run.id)
            assert (row["status"], row["leased_by"], row["lease_attempts"]) == ("queued", None, 0)
            steps = await h.transitions_of(conn, run.id)
            assert (steps[-1].status, steps[-1].reason_code) == (
                "queued",
                "run.queued.shutdown",
            )
    # A restarted engine runs them.
    again = SchedulerEngine(db_target, settings=settings, clock=clock)
    await again.start(loop=False)
    try:
        await again.tick_once()

        async def all_done() -> bool:
            rows = [await _run(again.conn, r.id) for r in runs]
            return all(r["status"] == "completed" for r in rows)

        await h.eventually(all_done)
    finally:
        await again.stop()
