"""Reconciliation finds orphans whose pid was never recorded (the daemon died right after exec).

A run is committed ``running`` before its child is spawned and the child's pid is written in a
later transaction; a daemon killed between the two leaves a ``running`` row with no
``child_pid`` and a live child. The child (and its descendants) carry the invocation id and
the database path in their environment, which is how the next engine finds them.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from studio_scheduler_core import ensure_schema
from studio_state import connect, fetch_one
from studio_state.testing import pid_alive, wait_for

TREE = """
import subprocess, sys, time
g = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
open(sys.argv[1] + ".tmp", "w").write(str(g.pid))
import os; os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(120)
"""


async def _insert_running(db_target: str, *, adhoc: bool, now: float) -> tuple[str, str]:
    """A ``running`` run + invocation as a crashed daemon leaves them: no child_pid."""
    run_id, invocation_id = "a1b2c3d4e5f6", "0f1e2d3c4b5a"
    async with connect(db_target) as conn:
        await ensure_schema(conn)
        await conn.execute("BEGIN IMMEDIATE")
        await conn.execute(
            "INSERT INTO invocations (id, schedule_run_id, skill, status, started_at, "
            "created_at, updated_at) VALUES (?, ?, 'test', 'running', ?, ?, ?)",
            (invocation_id, run_id, now, now, now),
        )
        lease = (
            # a worker of a process on this host that no longer exists (pid 2**22 + 1)
            (f"{os.uname().nodename}:{2**22 + 1}:deadbeef", now + 60, 1, now)
            if adhoc
            else (None, None, 0, None)
        )
        await conn.execute(
            "INSERT INTO schedule_runs (id, invocation_id, trigger_context, action_kind, "
            "action_args, status, fired_at, created_at, leased_by, lease_expires_at, "
            "lease_attempts, queued_at) VALUES (?, ?, '{}', 'command', '[]', 'running', ?, ?, "
            "?, ?, ?, ?)",
            (run_id, invocation_id, now, now, *lease),
        )
        await conn.commit()
    return run_id, invocation_id


@pytest.mark.parametrize("adhoc", [False, True], ids=["scheduled", "adhoc"])
async def test_an_unrecorded_child_is_found_by_its_environment_and_terminated(
    db_target: str, studio_db: str, make_engine: Any, tmp_path: Path, adhoc: bool
) -> None:
    now = time.time()
    run_id, invocation_id = await _insert_running(db_target, adhoc=adhoc, now=now)
    pid_file = tmp_path / "grandchild.pid"
    env = dict(
        os.environ,
        LIONAGI_INVOCATION_ID=invocation_id,
        LIONAGI_STUDIO_DB=studio_db,
    )
    child = subprocess.Popen(
        [sys.executable, "-c", TREE, str(pid_file)],
        stdin=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    # the same invocation id on another database is not ours
    bystander = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"],
        env={**env, "LIONAGI_STUDIO_DB": str(tmp_path / "other.db")},
        start_new_session=True,
    )
    try:
        wait_for(pid_file.exists)
        grandchild = int(pid_file.read_text())
        engine = await make_engine()
        if adhoc:
            await engine.tick_once()  # the worker pass recovers abandoned leased rows
        child.wait(timeout=20)
        wait_for(lambda: not pid_alive(grandchild), 20)
        assert bystander.poll() is None
        run = await fetch_one(engine.conn, "SELECT * FROM schedule_runs WHERE id = ?", (run_id,))
        assert run is not None
        # launched, so never re-run (an ad-hoc row is not requeued)
        assert (run["status"], run["status_reason_code"]) == (
            "failed",
            "run.failed.daemon_restart",
        )
        inv = await fetch_one(
            engine.conn, "SELECT status FROM invocations WHERE id = ?", (invocation_id,)
        )
        assert inv == {"status": "failed"}
    finally:
        for proc in (child, bystander):
            proc.kill()
            proc.wait()
        if pid_file.exists():
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pid_file.read_text()), 9)
