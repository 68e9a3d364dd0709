"""The database file deleted or replaced under a running engine: it stops ticking and says so."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from studio_state import fetch_value

pytestmark = pytest.mark.sqlite_only(
    "deletes and replaces the SQLite file under the running engine"
)


def _remove(db_path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db_path}{suffix}").unlink(missing_ok=True)


@pytest.mark.parametrize("fault", ["deleted", "replaced"])
async def test_a_vanished_database_file_stops_the_tick_with_a_clear_error(
    make_engine: Any, db_path: Path, h: Any, fault: str
) -> None:
    engine = await make_engine()
    created = await engine.service.create(h.command_schedule(h.blocker, interval_sec=1))
    await engine.conn.execute(
        "UPDATE schedules SET next_fire_at = 0 WHERE id = ?", (created.id,)
    )  # due now
    if fault == "deleted":
        _remove(db_path)
    else:
        copy = db_path.with_name("copy.db")
        shutil.copy(db_path, copy)
        _remove(db_path)
        os.replace(copy, db_path)
    report = await engine.tick_once()
    assert set(report) == {"database"}
    assert str(db_path.resolve()) in report["database"] and fault in report["database"]
    health = engine.health()
    assert health["database_error"] == report["database"]
    assert health["last_tick_error"] == report["database"]
    # nothing fired into the detached file
    assert await fetch_value(engine.conn, "SELECT COUNT(*) FROM schedule_runs") == 0
    assert fault == "replaced" or not db_path.exists()  # no empty database was created


async def test_the_loop_does_not_spin_on_a_vanished_database(
    make_engine: Any, db_path: Path, h: Any
) -> None:
    engine = await make_engine(loop=True, tick_seconds=0.2)
    created = await engine.service.create(h.command_schedule(h.blocker, interval_sec=1))
    _remove(db_path)
    await engine.conn.execute(
        "UPDATE schedules SET next_fire_at = 0 WHERE id = ?", (created.id,)
    )  # forever due: a loop that followed it would never sleep
    await asyncio.sleep(0.3)  # the first tick after the removal has run
    cpu = time.process_time()
    await asyncio.sleep(1.0)
    # a loop that re-ticked at once would burn the whole second (ticks and queries)
    assert time.process_time() - cpu < 0.5
    assert engine.health()["running"] is True
    assert "deleted" in (engine.health()["database_error"] or "")
