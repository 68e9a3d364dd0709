"""Recovery terminates every orphan at once without waiting on it, escaped descendants too.

Orphans are real processes in their own sessions carrying a run's invocation id and database
path in their environment, as a crashed Studio leaves them; some ignore SIGTERM.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from studio_launcher import process_start_time
from studio_scheduler_core import AdhocWorker, SchedulerEngine, ensure_schema
from studio_state import connect, fetch_one, new_id
from studio_state.testing import pid_alive, wait_for

STUBBORN = """
import signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
open(sys.argv[1], "w").close()
time.sleep(120)
"""

ESCAPER = """
import subprocess, sys, time
g = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                     start_new_session=True)
open(sys.argv[1] + ".tmp", "w").write(str(g.pid))
import os; os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(120)
"""

DEAD_OWNER = f"{os.uname().nodename}:{2**22 + 1}:deadbeef"


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait()


def _spawn(
    procs: list[Any], studio_db: str, invocation_id: str, code: str, flag: Path
) -> subprocess.Popen[bytes]:
    env = dict(os.environ, LIONAGI_INVOCATION_ID=invocation_id, LIONAGI_STUDIO_DB=studio_db)
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(flag)],
        stdin=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    procs.append(proc)
    wait_for(flag.exists, 20)
    return proc


async def _insert(db_target: str, invocation_id: str, *, pid: int, adhoc: bool, now: float) -> str:
    """A ``running`` run + invocation with a recorded child, as a crashed daemon leaves it."""
    run_id = new_id()
    async with connect(db_target) as conn:
        await ensure_schema(conn)
        await conn.execute("BEGIN IMMEDIATE")
        await conn.execute(
            "INSERT INTO invocations (id, schedule_run_id, skill, status, started_at, "
            "created_at, updated_at) VALUES (?, ?, 'test', 'running', ?, ?, ?)",
            (invocation_id, run_id, now, now, now),
        )
        lease = (DEAD_OWNER, now + 60, 1, now) if adhoc else (None, None, 0, None)
        await conn.execute(
            "INSERT INTO schedule_runs (id, invocation_id, trigger_context, action_kind, "
            "action_args, status, fired_at, created_at, leased_by, lease_expires_at, "
            "lease_attempts, queued_at, child_pid, child_started_at) "
            "VALUES (?, ?, '{}', 'command', '[]', 'running', ?, ?, ?, ?, ?, ?, ?, ?)",
            (run_id, invocation_id, now, now, *lease, pid, process_start_time(pid)),
        )
        await conn.commit()
    return run_id


async def _stubborn_orphans(
    procs: list[Any], db_target: str, studio_db: str, tmp_path: Path, *, n: int, adhoc: bool
) -> list[tuple[str, int]]:
    out = []
    for index in range(n):
        invocation_id = new_id()
        proc = _spawn(procs, studio_db, invocation_id, STUBBORN, tmp_path / f"ready{index}")
        run_id = await _insert(db_target, invocation_id, pid=proc.pid, adhoc=adhoc, now=time.time())
        out.append((run_id, proc.pid))
    return out


@pytest.mark.parametrize("adhoc", [False, True], ids=["startup", "worker_tick"])
async def test_term_ignoring_orphans_never_hold_up_startup_or_the_tick(
    db_target: str, studio_db: str, settings: Any, tmp_path: Path, procs: list[Any], adhoc: bool
) -> None:
    """Four orphans that ignore SIGTERM: one by one with a 5 s grace each took 20 s."""
    orphans = await _stubborn_orphans(procs, db_target, studio_db, tmp_path, n=4, adhoc=adhoc)
    worker = AdhocWorker(settings=settings, db_path=db_target)
    engine = SchedulerEngine(db_target, settings=settings, worker=worker)
    engine.reaper.grace = worker.reaper.grace = 1.0
    began = time.monotonic()
    await engine.start(loop=False)
    try:
        if adhoc:
            await engine.tick_once()  # the worker pass recovers the abandoned leased rows
        returned = time.monotonic() - began
        await _check_stubborn(engine, procs, orphans, began=began, returned=returned)
    finally:
        await engine.stop()


async def _check_stubborn(
    engine: Any, procs: list[Any], orphans: list[tuple[str, int]], *, began: float, returned: float
) -> None:
    assert returned < 3.0, f"recovery blocked for {returned:.1f}s"
    for run_id, _ in orphans:
        row = await fetch_one(engine.conn, "SELECT * FROM schedule_runs WHERE id = ?", (run_id,))
        assert row is not None
        assert (row["status"], row["status_reason_code"]) == ("failed", "run.failed.daemon_restart")
    while any(proc.poll() is None for proc in procs):  # one shared grace, then SIGKILL
        assert time.monotonic() - began < 8.0, "orphans outlived one shared grace"
        await asyncio.sleep(0.05)
    assert all(proc.returncode == -9 for proc in procs)


@pytest.mark.parametrize("adhoc", [False, True], ids=["scheduled", "adhoc"])
async def test_a_descendant_that_escaped_with_setsid_is_killed_at_recovery(
    db_target: str, studio_db: str, make_engine: Any, tmp_path: Path, procs: list[Any], adhoc: bool
) -> None:
    """The child's pid was recorded; its grandchild left the group with setsid."""
    flag = tmp_path / "grandchild.pid"
    async with connect(db_target) as conn:
        await ensure_schema(conn)
    invocation_id = new_id()
    child = _spawn(procs, studio_db, invocation_id, ESCAPER, flag)
    grandchild = int(flag.read_text())
    try:
        run_id = await _insert(
            db_target, invocation_id, pid=child.pid, adhoc=adhoc, now=time.time()
        )
        assert os.getpgid(grandchild) != os.getpgid(child.pid)
        engine = await make_engine()
        if adhoc:
            await engine.tick_once()
        deadline = time.monotonic() + 20
        while child.poll() is None or pid_alive(grandchild):
            assert time.monotonic() < deadline, "an orphan survived recovery"
            await asyncio.sleep(0.05)
        row = await fetch_one(engine.conn, "SELECT * FROM schedule_runs WHERE id = ?", (run_id,))
        assert row is not None
        assert (row["status"], row["status_reason_code"]) == ("failed", "run.failed.daemon_restart")
    finally:
        if pid_alive(grandchild):
            os.kill(grandchild, 9)
