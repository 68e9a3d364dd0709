"""Disk and database faults under a real `studio serve`: a read-only database directory or
file at startup (one clear line, exit 1, no retry loop), and the database file deleted under
the running server (health says so, writes are refused, the process stays up and calm)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import count

from studio_state.testing import pid_alive, wait_for

pytestmark = pytest.mark.slow


async def _migrate(db: Path) -> None:
    import studio_scheduler_core
    import studio_state

    async with studio_state.connect(db) as conn:
        await studio_scheduler_core.ensure_schema(conn)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("fault", ["new-database", "existing-database", "read-only-file"])
def test_an_unwritable_database_stops_startup_with_one_clear_line(
    studio_process: Any, tmp_path: Path, fault: str
) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    db = folder / "state.db"
    if fault != "new-database":  # a database a previous run left (closed cleanly: no -wal)
        asyncio.run(_migrate(db))
    server = studio_process(tmp_path / "server", db=db, unprivileged=True)
    try:
        if fault == "read-only-file":
            db.chmod(0o444)
        else:
            folder.chmod(0o555)
        proc = server.spawn()
        code = proc.wait(timeout=60)  # it gives up at once: no retry loop
    finally:
        folder.chmod(0o755)
        if db.exists():
            db.chmod(0o644)
    log = server.log()
    assert code == 1, log
    errors = [line for line in log.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and f"the database {db} cannot be written" in errors[0], log
    assert "ERROR:" not in log  # said once, by the CLI (not beside uvicorn's lines)
    assert "Traceback" not in log
    count("faults_survived")


def test_database_deleted_under_a_running_server(studio_process: Any) -> None:
    server = studio_process()
    quick = server.base / "quick.py"
    quick.write_text("pass\n")
    server.start()
    created = server.request(
        "POST",
        "/api/schedules",
        json={
            "name": "every-second",
            "trigger_type": "interval",
            "interval_sec": 1,
            "action_kind": "command",
            "action_command": "python3",
            "action_command_args": [str(quick)],
            "action_cwd": str(server.base),
        },
    )
    assert created.status_code == 201, created.text
    wait_for(lambda: server.rows("SELECT 1 FROM schedule_runs"), what="a first fire")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{server.db}{suffix}").unlink(missing_ok=True)

    health = wait_for(
        lambda: (h := server.health()) and h["status"] == "degraded" and h,
        timeout=30,
        what="health reports the deleted database",
    )
    problem = health["scheduler"]["last_tick_error"]
    assert f"the database file {server.db} was deleted" in problem
    refused = server.request("POST", "/api/runs", json={"action_kind": "command"})
    assert refused.status_code == 503 and "was deleted" in refused.json()["detail"]
    # No crash and no crash loop: the same process keeps answering, without spinning.
    cpu = _cpu_seconds(server.pid)
    time.sleep(3.0)
    assert pid_alive(server.pid) and server.proc is not None and server.proc.poll() is None
    assert _cpu_seconds(server.pid) - cpu < 1.5
    assert server.health()["status"] == "degraded"
    assert not server.db.exists()  # nothing quietly started a new, empty database
    log = server.log()
    assert log.count(problem) == 1, log  # logged once, not every tick
    assert "Traceback" not in log
    # The way out is a restart: a fresh database, healthy again.
    assert server.stop() in (0, -15)
    server.start()
    assert server.health()["status"] == "ok"
    server.stop()
    count("faults_survived")
