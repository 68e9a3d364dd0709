"""Startup (cron recompute, reconciliation, missed fires), shutdown, reapers, lock, guard."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from studio_launcher import is_same_process, process_start_time
from studio_scheduler_core import EngineLocked, ScheduleService
from studio_scheduler_core._fire.commit import commit
from studio_scheduler_core._fire.env import FireEnv
from studio_scheduler_core._fire.occurrence import ScheduleClaim
from studio_scheduler_core._fire.prepare import prepare
from studio_state import connect, fetch_all, fetch_one, fetch_value


async def test_missed_fire_skip_records_once_and_advances(
    db_target, settings, clock, make_engine, h
) -> None:
    async with connect(db_target) as conn:
        from studio_scheduler_core import ensure_schema

        await ensure_schema(conn)
        svc = ScheduleService(conn, settings=settings, clock=clock)
        ok = h.script("ok.py", "pass\n")
        created = await svc.create(h.command_schedule(ok))
    clock.advance(1000)  # 16 occurrences passed while nothing ran
    engine = await make_engine(clock=clock)
    runs = await h.runs_of(engine.conn, created.id)
    assert [(r.status, r.status_reason_code) for r in runs] == [
        ("skipped", "schedule.skipped.missed_fire")
    ]
    assert runs[0].trigger_context["missed_fire_at"] == created.next_fire_at
    row = await h.schedule_row(engine.conn, created.id)
    assert row.next_fire_at == h.T0 + 1020
    await engine.tick_once()
    assert len(await h.runs_of(engine.conn, created.id)) == 1


async def test_missed_fire_run_once_fires_once(db_target, settings, clock, make_engine, h) -> None:
    async with connect(db_target) as conn:
        from studio_scheduler_core import ensure_schema

        await ensure_schema(conn)
        svc = ScheduleService(conn, settings=settings, clock=clock)
        ok = h.script("ok.py", "pass\n")
        created = await svc.create(h.command_schedule(ok, missed_fire_policy="run_once"))
    clock.advance(1000)
    engine = await make_engine(clock=clock)
    await engine.wait_idle()
    runs = await h.runs_of(engine.conn, created.id)
    assert [(r.status, r.chain_depth) for r in runs] == [("completed", 0)]
    ctx = runs[0].trigger_context
    assert ctx["missed_recovery"] is True and ctx["missed_fire_at"] == created.next_fire_at
    steps = await h.transitions_of(engine.conn, runs[0].id)
    assert steps[0].reason_code == "schedule.fired.missed_fire"
    await engine.tick_once()
    assert len(await h.runs_of(engine.conn, created.id)) == 1


async def test_startup_recomputes_cron_in_the_current_zone(
    db_target, settings, clock, make_engine, h
) -> None:
    async with connect(db_target) as conn:
        from studio_scheduler_core import ensure_schema

        await ensure_schema(conn)
        svc = ScheduleService(conn, settings=settings, clock=clock)
        created = await svc.create(
            h.command_schedule(
                h.blocker, "/x", trigger_type="cron", interval_sec=None, cron_expr="0 3 * * *"
            )
        )
    engine = await make_engine(clock=clock, timezone="America/New_York")
    row = await h.schedule_row(engine.conn, created.id)
    local = datetime.fromtimestamp(row.next_fire_at, ZoneInfo("America/New_York"))
    assert (local.hour, local.minute) == (3, 0)
    assert row.next_fire_at != created.next_fire_at


CRASHING_ENGINE = """
import asyncio, sqlite3, sys
from studio_scheduler_core import SchedulerEngine, SchedulerSettings

async def main():
    db, py, slow, path, logs = sys.argv[1:6]
    settings = SchedulerSettings(
        command_allowlist=(py,), child_env={"PATH": path}, run_log_dir=logs or None,
        scheduled_on_any_node=False,
    )
    engine = SchedulerEngine(db, settings=settings)
    await engine.start()
    created = await engine.service.create({
        "name": "orphan", "trigger_type": "interval", "interval_sec": 3600,
        "action_kind": "command", "action_command": py, "action_command_args": [slow],
    })
    run_id = await engine.fire_now(created.id)
    while True:
        row = await (await engine.conn.execute(
            "SELECT child_pid FROM schedule_runs WHERE id = ?", (run_id,))).fetchone()
        if row["child_pid"]:
            break
        await asyncio.sleep(0.02)
    print(run_id, row["child_pid"], flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


async def test_reconciliation_after_a_crash_terminates_the_orphan_and_never_refires(
    db_target, settings, clock, make_engine, h, tmp_path: Path
) -> None:
    slow = h.script("slow.py", "import time\ntime.sleep(120)\n")
    crash = h.script("crash.py", CRASHING_ENGINE)
    proc = subprocess.Popen(
        [
            *(sys.executable, crash, db_target, h.PY, slow),
            *(settings.child_env["PATH"], settings.run_log_dir or ""),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 30)
        run_id, pid_text = line.split()
        pid = int(pid_text)
        started = process_start_time(pid)
        assert started is not None and is_same_process(pid, started)
    finally:
        proc.send_signal(signal.SIGKILL)  # the engine dies without any cleanup
        proc.wait(10)
        proc.stdout.close()
    assert is_same_process(pid, started), "the child must survive its engine"
    engine = await make_engine(clock=clock)
    run = await fetch_one(engine.conn, "SELECT * FROM schedule_runs WHERE id = ?", (run_id,))
    assert (run["status"], run["status_reason_code"]) == ("failed", "run.failed.daemon_restart")
    invocation = await fetch_one(
        engine.conn, "SELECT * FROM invocations WHERE id = ?", (run["invocation_id"],)
    )
    assert (invocation["status"], invocation["status_reason_code"]) == (
        "failed",
        "run.failed.daemon_restart",
    )
    await engine.reaper.wait()  # start-up signals orphans and does not wait for them
    assert not is_same_process(pid, started)
    assert not h.group_has_live_member(pid)
    await engine.tick_once()
    await engine.wait_idle()
    assert await fetch_value(engine.conn, "SELECT COUNT(*) FROM schedule_runs") == 1


async def test_shutdown_cancels_fires_and_kills_their_groups(make_engine, clock, h) -> None:
    engine = await make_engine(clock=clock)
    child = h.script(
        "parent.py",
        """
        import subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        time.sleep(120)
        """,
    )
    created = await engine.service.create(h.command_schedule(child))
    run_id = await engine.fire_now(created.id)

    async def started() -> bool:
        row = await fetch_one(engine.conn, "SELECT * FROM schedule_runs WHERE id = ?", (run_id,))
        return row["child_pid"] is not None

    await h.eventually(started)
    row = await fetch_one(engine.conn, "SELECT * FROM schedule_runs WHERE id = ?", (run_id,))
    pid, at = row["child_pid"], row["child_started_at"]
    await asyncio.sleep(0.2)  # let the grandchild start
    await engine.stop()
    assert not is_same_process(pid, at)
    assert not h.group_has_live_member(pid)  # the grandchild went with it
    async with connect(engine.db_path) as conn:
        run = await fetch_one(conn, "SELECT * FROM schedule_runs WHERE id = ?", (run_id,))
        inv = await fetch_one(
            conn, "SELECT * FROM invocations WHERE id = ?", (run["invocation_id"],)
        )
    assert (run["status"], run["status_reason_code"]) == ("cancelled", "run.cancelled.shutdown")
    assert inv["status"] == "cancelled"


async def test_reaper_times_out_stale_runs_without_a_process(make_engine, clock, h) -> None:
    engine = await make_engine(clock=clock, invocation_deadline_seconds=100.0)
    conn = engine.conn
    await conn.execute(
        "INSERT INTO invocations (id, skill, status, started_at, created_at, updated_at) "
        "VALUES ('inv1', 's', 'running', ?, ?, ?)",
        (h.T0 - 500, h.T0 - 500, h.T0 - 500),
    )
    await conn.execute(
        "INSERT INTO schedule_runs (id, invocation_id, trigger_context, action_kind, action_args, "
        "status, fired_at, created_at, child_pid, child_started_at) "
        "VALUES ('run1', 'inv1', '{}', 'command', '[]', 'running', ?, ?, 999999, 1.0)",
        (h.T0 - 500, h.T0 - 500),
    )
    flag_dir = h.script("unused.py", "")
    created = await engine.service.create(h.command_schedule(h.blocker, flag_dir + ".never"))
    own = await engine.fire_now(created.id)
    clock.advance(1000)
    report = await engine.tick_once()
    assert report["reapers"] == 1
    run = await fetch_one(conn, "SELECT * FROM schedule_runs WHERE id = 'run1'")
    assert (run["status"], run["status_reason_code"]) == ("timed_out", "run.timed_out.deadline")
    inv = await fetch_one(conn, "SELECT * FROM invocations WHERE id = 'inv1'")
    assert inv["status"] == "timed_out"
    mine = await fetch_one(conn, "SELECT status FROM schedule_runs WHERE id = ?", (own,))
    assert mine["status"] == "running"  # its live child is this engine's own
    Path(flag_dir + ".never").touch()
    await engine.wait_idle()


@pytest.mark.sqlite_only("reads the SQLite file or its schema itself")
async def test_checkpoint_runs_on_its_interval(make_engine, clock) -> None:
    engine = await make_engine(clock=clock, checkpoint_interval_seconds=10.0)
    assert (await engine.tick_once())["checkpoint"] is None
    clock.advance(11)
    result = await engine.tick_once()
    done = result["checkpoint"]
    assert done is not None and done.busy is False and done.checkpointed == done.log
    assert (await engine.tick_once())["checkpoint"] is None


@pytest.mark.sqlite_only("reads the SQLite file or its schema itself")
async def test_second_engine_is_refused_naming_the_holder(make_engine, clock) -> None:
    first = await make_engine(clock=clock)
    with pytest.raises(EngineLocked) as info:
        await make_engine(clock=clock)
    assert info.value.holder_pid == os.getpid()
    assert str(os.getpid()) in str(info.value)
    await first.stop()
    again = await make_engine(clock=clock)
    assert again.health()["running"] is False  # loop=False in these tests


async def test_occurrence_guard_two_connections_fire_once(
    db_target, settings, clock, make_engine, h
) -> None:
    engine = await make_engine(clock=clock)
    created = await engine.service.create(h.command_schedule(h.blocker, "/x"))
    async with connect(db_target) as other:
        envs = [
            FireEnv(conn=engine.conn, settings=settings, clock=clock, db_path=db_target),
            FireEnv(conn=other, settings=settings, clock=clock, db_path=db_target),
        ]
        claim = ScheduleClaim(
            "occurrence",
            created.id,
            due_at=created.next_fire_at,
            next_fire_at=created.next_fire_at + 60,
        )
        fires = [prepare(env, created, {"scheduled": True}, kind="scheduled") for env in envs]
        results = await asyncio.gather(
            *(commit(e, f, claim) for e, f in zip(envs, fires, strict=True))
        )
    assert sorted(results) == [False, True]
    assert await fetch_value(engine.conn, "SELECT COUNT(*) FROM schedule_runs") == 1
    assert await fetch_value(engine.conn, "SELECT COUNT(*) FROM invocations") == 1


async def test_two_concurrent_evaluations_fire_an_occurrence_once(
    make_engine, clock, h, tmp_path: Path
) -> None:
    engine = await make_engine(clock=clock)
    ok = h.script("ok.py", "pass\n")
    created = await engine.service.create(h.command_schedule(ok, overlap_policy="allow"))
    clock.set(created.next_fire_at)
    await asyncio.gather(engine.tick_once(), engine.tick_once(), engine.tick_once())
    await engine.wait_idle()
    runs = await h.runs_of(engine.conn, created.id)
    assert [r.status for r in runs] == ["completed"]


async def test_deleting_a_schedule_under_an_inflight_fire(make_engine, clock, h, tmp_path) -> None:
    engine = await make_engine(clock=clock)
    flag = tmp_path / "go"
    created = await engine.service.create(
        h.command_schedule(
            h.blocker, str(flag), on_success={"command_args": [h.blocker, str(flag)]}
        )
    )
    run_id = await engine.fire_now(created.id)
    await engine.service.delete(created.id)
    flag.touch()
    await engine.wait_idle()
    run = await fetch_one(engine.conn, "SELECT * FROM schedule_runs WHERE id = ?", (run_id,))
    assert run is None
    rows = await fetch_all(engine.conn, "SELECT status FROM invocations")
    assert [r["status"] for r in rows] == ["completed"]
    assert engine.health()["last_tick_error"] is None


def test_crash_script_is_valid_python() -> None:
    compile(textwrap.dedent(CRASHING_ENGINE), "crash.py", "exec")
