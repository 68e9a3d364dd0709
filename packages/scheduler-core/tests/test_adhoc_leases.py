"""Ad-hoc leases (DESIGN §5.8): renewal, expiry recovery, exhaustion, cancel, crash recovery."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from studio_launcher import is_same_process
from studio_scheduler_core import AdhocRunService, AdhocWorker, ensure_schema
from studio_state import connect, fetch_all, fetch_one, fetch_value

MARKER = """
import os, sys, time
with open(sys.argv[1], "a") as out:
    out.write(f"{os.getpid()}\\n")
if len(sys.argv) > 2:
    time.sleep(float(sys.argv[2]))
"""

PARENT = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
with open(sys.argv[1], "w") as out:
    out.write("started")
time.sleep(120)
"""


def _command(py: str, path: str, *args: str) -> dict[str, Any]:
    return {"action_kind": "command", "action_command": py, "action_command_args": [path, *args]}


async def _run(conn: Any, run_id: str) -> dict[str, Any]:
    row = await fetch_one(conn, "SELECT * FROM schedule_runs WHERE id = ?", (run_id,))
    assert row is not None
    return row


async def _steps(h: Any, conn: Any, entity_id: str) -> list[tuple[str, str]]:
    return [(t.status, t.reason_code) for t in await h.transitions_of(conn, entity_id)]


async def _invocations(conn: Any, run_id: str) -> list[dict[str, Any]]:
    return await fetch_all(
        conn,
        "SELECT * FROM invocations WHERE schedule_run_id = ? ORDER BY created_at, rowid",
        (run_id,),
    )


async def _until(h: Any, conn: Any, run_id: str, *statuses: str) -> dict[str, Any]:
    async def reached() -> bool:
        return (await _run(conn, run_id))["status"] in statuses

    await h.eventually(reached)
    return await _run(conn, run_id)


async def _child_started(h: Any, conn: Any, run_id: str) -> dict[str, Any]:
    async def started() -> bool:
        return (await _run(conn, run_id))["child_pid"] is not None

    await h.eventually(started)
    return await _run(conn, run_id)


async def test_the_lease_is_renewed_while_the_child_runs(
    make_engine, clock, h, settings, db_target, tmp_path: Path
) -> None:
    engine = await make_engine(clock=clock)
    flag = tmp_path / "flag"
    run = await engine.runs.enqueue(_command(h.PY, h.blocker, str(flag)))
    await engine.tick_once()
    row = await _child_started(h, engine.conn, run.id)
    assert row["lease_expires_at"] == h.T0 + 60
    clock.advance(25)  # past the renewal interval, before expiry

    async def renewed(expected: float) -> bool:
        return (await _run(engine.conn, run.id))["lease_expires_at"] == expected

    await h.eventually(lambda: renewed(h.T0 + 85))
    clock.advance(50)  # past the first lease's expiry: only the renewal keeps it
    await h.eventually(lambda: renewed(h.T0 + 135))
    peer = AdhocWorker(settings=settings, db_path=db_target, clock=clock)
    assert await peer.recover(engine.conn, now=clock()) == {
        "requeued": 0,
        "exhausted": 0,
        "orphaned": 0,
    }
    await engine.tick_once()
    assert (await _run(engine.conn, run.id))["status"] == "running"
    flag.touch()
    done = await _until(h, engine.conn, run.id, "completed", "failed")
    assert (done["status"], done["lease_attempts"]) == ("completed", 1)


async def test_an_expired_lease_is_recovered_by_a_second_engine(
    make_engine, clock, h, settings, db_target, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    script = h.script("marker.py", MARKER)
    async with connect(db_target) as conn:
        await ensure_schema(conn)
        run = await AdhocRunService(conn, settings=settings, clock=clock).enqueue(
            _command(h.PY, script, str(marker))
        )
        # A worker claims the row and dies before launching its child (it never renews).
        dead = AdhocWorker(settings=settings, db_path=db_target, clock=clock)
        claimed = await dead.claim(conn, now=clock())
        assert [fire.run_id for fire, _ in claimed] == [run.id]
        row = await _run(conn, run.id)
        assert (row["status"], row["leased_by"], row["lease_attempts"]) == (
            "running",
            dead.worker_id,
            1,
        )
    engine = await make_engine(clock=clock)
    await engine.tick_once()
    assert (await _run(engine.conn, run.id))["status"] == "running"  # the lease still holds
    clock.advance(61)
    await engine.tick_once()
    done = await _until(h, engine.conn, run.id, "completed", "failed")
    assert (done["status"], done["lease_attempts"]) == ("completed", 2)
    assert done["leased_by"] != dead.worker_id
    assert await _steps(h, engine.conn, run.id) == [
        ("queued", "run.queued.enqueued"),
        ("running", "run.running.claimed"),
        ("queued", "run.queued.lease_expired"),
        ("running", "run.running.claimed"),
        ("completed", "run.completed.ok"),
    ]
    first, second = await _invocations(engine.conn, run.id)
    assert (first["status"], first["status_reason_code"]) == ("aborted", "run.queued.lease_expired")
    assert second["status"] == "completed" and done["invocation_id"] == second["id"]
    assert len(marker.read_text().splitlines()) == 1


async def test_three_lease_attempts_then_failed_lease_exhausted(
    make_engine, clock, h, settings, db_target, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    script = h.script("marker.py", MARKER)
    async with connect(db_target) as conn:
        await ensure_schema(conn)
        run = await AdhocRunService(conn, settings=settings, clock=clock).enqueue(
            _command(h.PY, script, str(marker))
        )
        for attempt in (1, 2, 3):
            worker = AdhocWorker(settings=settings, db_path=db_target, clock=clock)
            await worker.recover(conn, now=clock())
            claimed = await worker.claim(conn, now=clock())
            assert len(claimed) == 1 and claimed[0][1] == attempt
            clock.advance(61)  # each claimant dies before its child starts
    engine = await make_engine(clock=clock)
    await engine.tick_once()
    row = await _run(engine.conn, run.id)
    assert (row["status"], row["status_reason_code"], row["lease_attempts"]) == (
        "failed",
        "run.failed.lease_exhausted",
        3,
    )
    assert row["ended_at"] == clock() and row["child_pid"] is None
    invocations = await _invocations(engine.conn, run.id)
    assert [i["status"] for i in invocations] == ["aborted", "aborted", "failed"]
    steps = await _steps(h, engine.conn, run.id)
    assert steps.count(("queued", "run.queued.lease_expired")) == 2
    assert steps[-1] == ("failed", "run.failed.lease_exhausted")
    await engine.tick_once()
    assert (await _run(engine.conn, run.id))["status"] == "failed"
    assert not marker.exists()


async def test_cancel_a_running_run_in_process_kills_its_group(
    make_engine, clock, h, tmp_path: Path
) -> None:
    engine = await make_engine(clock=clock)
    started = tmp_path / "started"
    run = await engine.runs.enqueue(_command(h.PY, h.script("parent.py", PARENT), str(started)))
    await engine.tick_once()
    row = await _child_started(h, engine.conn, run.id)

    async def grandchild() -> bool:
        return started.exists()

    await h.eventually(grandchild)
    pid, at = row["child_pid"], row["child_started_at"]
    cancelled = await engine.runs.cancel(run.id)
    assert (cancelled.status, cancelled.status_reason_code) == (
        "cancelled",
        "run.cancelled.operator",
    )
    assert not is_same_process(pid, at) and not h.group_has_live_member(pid)
    assert engine.limits()["adhoc_in_flight"] == 0
    invocation = await fetch_one(
        engine.conn, "SELECT * FROM invocations WHERE id = ?", (row["invocation_id"],)
    )
    assert (invocation["status"], invocation["status_reason_code"]) == (
        "cancelled",
        "run.cancelled.operator",
    )
    assert (await _steps(h, engine.conn, run.id))[-1] == ("cancelled", "run.cancelled.operator")
    assert len(await _steps(h, engine.conn, run.id)) == 3  # the worker's write lost


async def test_cancel_from_another_connection_terminates_by_pid(
    make_engine, clock, h, settings, tmp_path: Path
) -> None:
    engine = await make_engine(clock=clock)
    run = await engine.runs.enqueue(_command(h.PY, h.blocker, str(tmp_path / "never")))
    await engine.tick_once()
    row = await _child_started(h, engine.conn, run.id)
    async with connect(engine.db_path) as other:  # like the CLI: no worker in this process
        cancelled = await AdhocRunService(other, settings=settings, clock=clock).cancel(run.id)
    assert cancelled.status == "cancelled"
    assert not is_same_process(row["child_pid"], row["child_started_at"])

    async def released() -> bool:
        return engine.limits()["adhoc_in_flight"] == 0

    await h.eventually(released)
    final = await _run(engine.conn, run.id)
    assert (final["status"], final["status_reason_code"], final["exit_code"]) == (
        "cancelled",
        "run.cancelled.operator",
        None,
    )


async def test_the_owner_stops_a_run_cancelled_before_its_child_was_recorded(
    make_engine, clock, h, settings, db_target, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    async with connect(db_target) as conn:
        await ensure_schema(conn)
        runs = AdhocRunService(conn, settings=settings, clock=clock)
        run = await runs.enqueue(_command(h.PY, h.script("m.py", MARKER), str(marker), "60"))
        owner = AdhocWorker(settings=settings, db_path=db_target, clock=clock, watch_seconds=0.1)
        claimed = await owner.claim(conn, now=clock())
        assert len(claimed) == 1
        await runs.cancel(run.id)  # no child recorded yet: nothing to signal from here
        for fire, attempt in claimed:
            owner.launch(fire, attempt)  # the owner launches what it claimed …

        async def stopped() -> bool:
            return owner.in_flight() == 0

        await h.eventually(stopped)  # … and its lease check stops it
        await owner.stop()
        row = await _run(conn, run.id)
        assert (row["status"], row["status_reason_code"]) == ("cancelled", "run.cancelled.operator")
        assert row["child_pid"] is None and row["exit_code"] is None
        if marker.exists():  # the child got as far as starting: its group is gone now
            assert not h.group_has_live_member(int(marker.read_text().split()[0]))


async def test_shutdown_cancels_running_rows_and_leaves_queued_ones(
    make_engine, clock, h, tmp_path: Path
) -> None:
    engine = await make_engine(clock=clock, max_adhoc_concurrent=1)
    running = await engine.runs.enqueue(_command(h.PY, h.blocker, str(tmp_path / "never")))
    waiting = await engine.runs.enqueue(_command(h.PY, h.blocker, str(tmp_path / "never")))
    await engine.tick_once()
    row = await _child_started(h, engine.conn, running.id)
    await engine.stop()
    assert not is_same_process(row["child_pid"], row["child_started_at"])
    async with connect(engine.db_path) as conn:
        stopped = await _run(conn, running.id)
        assert (stopped["status"], stopped["status_reason_code"]) == (
            "cancelled",
            "run.cancelled.shutdown",
        )
        assert (await _run(conn, waiting.id))["status"] == "queued"


ENGINE = """
import asyncio, sys
from studio_scheduler_core import SchedulerEngine, SchedulerSettings

async def main():
    db, py, path, logs = sys.argv[1:5]
    settings = SchedulerSettings(
        command_allowlist=(py,), child_env={"PATH": path}, run_log_dir=logs or None
    )
    engine = SchedulerEngine(db, settings=settings)
    await engine.start()
    await asyncio.sleep(600)

asyncio.run(main())
"""


async def test_kill_9_of_the_engine_then_restart_never_runs_the_orphan_twice(
    make_engine, settings, h, db_target, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    script = h.script("marker.py", MARKER)
    async with connect(db_target) as conn:
        await ensure_schema(conn)
        run = await AdhocRunService(conn, settings=settings).enqueue(
            _command(h.PY, script, str(marker), "120")
        )
    engine_script = h.script("engine.py", ENGINE)
    proc = subprocess.Popen(
        [
            *(sys.executable, engine_script, db_target, h.PY),
            *(settings.child_env["PATH"], settings.run_log_dir or ""),
        ]
    )
    try:
        async with connect(db_target) as conn:

            async def launched() -> bool:
                row = await _run(conn, run.id)
                return row["child_pid"] is not None and marker.exists()

            await h.eventually(launched, timeout=30)
            row = await _run(conn, run.id)
    finally:
        proc.send_signal(signal.SIGKILL)  # the engine dies without any cleanup
        await asyncio.to_thread(proc.wait, 10)
    pid, at = row["child_pid"], row["child_started_at"]
    assert row["status"] == "running" and row["leased_by"].split(":")[1] == str(proc.pid)
    assert is_same_process(pid, at), "the child must survive its engine"
    engine = await make_engine()  # the restart: same database, real clock
    await engine.tick_once()
    after = await _run(engine.conn, run.id)
    assert (after["status"], after["status_reason_code"]) == ("failed", "run.failed.daemon_restart")
    assert not is_same_process(pid, at) and not h.group_has_live_member(pid)
    (invocation,) = await _invocations(engine.conn, run.id)
    assert (invocation["status"], invocation["status_reason_code"]) == (
        "failed",
        "run.failed.daemon_restart",
    )
    await engine.tick_once()
    await asyncio.sleep(0.3)
    assert marker.read_text().splitlines() == [str(pid)]  # executed once
    steps = await _steps(h, engine.conn, run.id)
    assert steps.count(("running", "run.running.claimed")) == 1
    assert (await _run(engine.conn, run.id))["status"] == "failed"
    assert await fetch_value(engine.conn, "SELECT COUNT(*) FROM schedule_runs") == 1
    meta = (await h.transitions_of(engine.conn, run.id))[-1].metadata
    assert meta["leased_by"] == row["leased_by"]


async def test_a_stale_owner_never_overwrites_a_row_another_worker_holds(
    make_engine, clock, h, tmp_path: Path
) -> None:
    engine = await make_engine(clock=clock)
    flag = tmp_path / "flag"
    run = await engine.runs.enqueue(_command(h.PY, h.blocker, str(flag)))
    await engine.tick_once()
    row = await _child_started(h, engine.conn, run.id)
    # Another worker recovered the row and claimed it again (as after an unrenewed lease).
    async with connect(engine.db_path) as other:
        await other.execute(
            "UPDATE schedule_runs SET leased_by = 'elsewhere:1:00000000', "
            "lease_attempts = lease_attempts + 1 WHERE id = ?",
            (run.id,),
        )
    flag.touch()  # the stale owner's child now exits 0

    async def settled() -> bool:
        return engine.limits()["adhoc_in_flight"] == 0

    await h.eventually(settled)
    after = await _run(engine.conn, run.id)
    assert (after["status"], after["leased_by"], after["exit_code"]) == (
        "running",
        "elsewhere:1:00000000",
        None,
    )
    assert not is_same_process(row["child_pid"], row["child_started_at"])


async def test_a_run_of_another_machines_worker_whose_lease_lapsed_is_node_lost(
    make_engine, clock, h, tmp_path: Path
) -> None:
    engine = await make_engine(clock=clock)
    flag = tmp_path / "flag"
    run = await engine.runs.enqueue(_command(h.PY, h.blocker, str(flag)))
    await engine.tick_once()
    await _child_started(h, engine.conn, run.id)
    # As if a node on another machine held it and stopped renewing (its host died).
    async with connect(engine.db_path) as other:
        await other.execute(
            "UPDATE schedule_runs SET leased_by = 'elsewhere:4242:0000beef', "
            "lease_expires_at = ? WHERE id = ?",
            (clock() - 1, run.id),
        )
    await engine.tick_once()
    after = await _until(h, engine.conn, run.id, "failed")
    assert after["status_reason_code"] == "run.failed.node_lost"
    assert "elsewhere:4242:0000beef" in after["error_detail"]
    assert (await _steps(h, engine.conn, run.id))[-1] == ("failed", "run.failed.node_lost")
    flag.touch()
