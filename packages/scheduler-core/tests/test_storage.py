"""Storage faults on real file systems (a small tmpfs, filled up or remounted read-only).

A terminal write that meets a full disk is retried until it lands (no run stays ``running``
with no process), the engine's health names the fault (``degraded``) and clears it once
writes succeed again, and :func:`storage_fault` names each fault SQLite or the OS reports.
Mounting needs root: CI runs as root, elsewhere these tests skip saying so.
"""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from studio_scheduler_core import SchedulerEngine, ensure_schema, storage_fault
from studio_state import connect
from studio_state.testing import fill_disk, mounted_tmpfs


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path, "8m") as mount:
        yield mount


def _committed(db: Path, run_id: str) -> dict[str, Any]:
    """The run's committed row, read on a connection of its own: the engine's connection
    would also show its own open (maybe about to fail) terminal transaction."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        conn.row_factory = sqlite3.Row
        row = conn.execute("SELECT * FROM schedule_runs WHERE id = ?", (run_id,)).fetchone()
    assert row is not None
    return dict(row)


async def test_storage_fault_names_real_faults_and_nothing_else(tmpfs: Path) -> None:
    db = tmpfs / "state.db"
    async with connect(db) as conn:
        await ensure_schema(conn)
    plain = sqlite3.connect(db)
    with pytest.raises(sqlite3.OperationalError) as missing:
        plain.execute("SELECT * FROM no_such_table")
    assert storage_fault(missing.value) is None
    plain.execute("CREATE TABLE t (x TEXT UNIQUE)")
    plain.execute("INSERT INTO t VALUES ('a')")
    plain.commit()
    with pytest.raises(sqlite3.IntegrityError) as duplicate:
        plain.execute("INSERT INTO t VALUES ('a')")
    assert storage_fault(duplicate.value) is None
    assert storage_fault(ValueError("disk full")) is None
    filler = fill_disk(tmpfs)
    with pytest.raises(sqlite3.OperationalError) as full:
        plain.execute("INSERT INTO t VALUES (?)", ("x" * 200_000,))
        plain.commit()
    assert storage_fault(full.value) == "disk full"
    plain.rollback()
    plain.close()
    filler.unlink()
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    with pytest.raises(OSError) as erofs:
        (tmpfs / "new").write_text("x")
    assert storage_fault(erofs.value) == "read-only file system"
    readonly = sqlite3.connect(db)
    with pytest.raises(sqlite3.OperationalError) as refused:
        readonly.execute("INSERT INTO t VALUES ('b')")
        readonly.commit()
    readonly.close()
    problem = storage_fault(refused.value)
    assert problem is not None and ("read-only" in problem or "cannot open" in problem)


async def test_a_terminal_write_on_a_full_disk_is_retried_until_it_lands(
    tmpfs: Path, settings: Any, h: Any, tmp_path: Path
) -> None:
    engine = SchedulerEngine(tmpfs / "state.db", settings=settings)
    await engine.start(loop=False)
    flag = tmp_path / "release"
    try:
        run = await engine.runs.enqueue(
            {
                "action_kind": "command",
                "action_command": h.PY,
                "action_command_args": [h.blocker, str(flag)],
            }
        )
        await engine.tick_once()

        async def started() -> bool:
            return _committed(tmpfs / "state.db", run.id)["child_pid"] is not None

        await h.eventually(started)
        assert engine.health()["database_error"] is None
        filler = fill_disk(tmpfs)
        flag.touch()  # the child exits 0 while the disk is full

        async def reported() -> bool:
            return engine.health()["database_error"] == "disk full"

        await h.eventually(reported)
        health = engine.health()
        assert health["status"] == "degraded"
        assert _committed(tmpfs / "state.db", run.id)["status"] == "running"
        assert await engine.tick_once() == {"database": "disk full"}
        filler.unlink()

        async def landed() -> bool:
            return _committed(tmpfs / "state.db", run.id)["status"] != "running"

        await h.eventually(landed, timeout=20)
        done = _committed(tmpfs / "state.db", run.id)
        assert (done["status"], done["exit_code"]) == ("completed", 0)

        async def cleared() -> bool:
            return engine.health()["database_error"] is None

        await h.eventually(cleared)
        await engine.tick_once()
        assert engine.health()["last_tick_error"] is None
    finally:
        await engine.stop()


async def test_a_tick_that_meets_a_full_disk_reports_it_and_recovers(
    tmpfs: Path, settings: Any, clock: Any, h: Any, tmp_path: Path
) -> None:
    engine = SchedulerEngine(tmpfs / "state.db", settings=settings, clock=clock)
    await engine.start(loop=False)
    try:
        created = await engine.service.create(
            h.command_schedule(h.env_dump, str(tmp_path / "out"), interval_sec=60)
        )
        clock.advance(61)
        filler = fill_disk(tmpfs)
        await engine.tick_once()
        health = engine.health()
        assert (health["status"], health["database_error"]) == ("degraded", "disk full")
        assert "disk full" in (health["last_tick_error"] or "")
        assert await engine.tick_once() == {"database": "disk full"}  # probed, still full
        filler.unlink()
        clock.advance(settings.tick_seconds)  # the schedule's retry waits a tick
        await engine.tick_once()
        await engine.wait_idle()
        health = engine.health()
        assert health["database_error"] is None and health["last_tick_error"] is None
        runs = await h.runs_of(engine.conn, created.id)
        assert [r.status for r in runs] == ["completed"]
    finally:
        await engine.stop()
