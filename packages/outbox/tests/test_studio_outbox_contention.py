"""Delivery under a long write lock held by a real second process (SQLite contention)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

import aiosqlite
import pytest

import studio_outbox

pytestmark = pytest.mark.slow


def _statuses(path: Path) -> dict[str, str]:
    raw = sqlite3.connect(path)
    try:
        return dict(raw.execute("SELECT id, status FROM dispatch_outbox").fetchall())
    finally:
        raw.close()


async def test_cli_deliver_waits_out_a_30s_lock_and_records_every_outcome(
    db_path: Path, conn: aiosqlite.Connection, recorder: Any, write_lock: Any, until: Any
) -> None:
    ids = [
        await studio_outbox.enqueue_dispatch(conn, kind="k", deliver_to="sleep:1") for _ in range(3)
    ]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "studio_outbox",
        "deliver",
        "--db",
        str(db_path),
        "--template",
        json.dumps(recorder.template()),
        "--once",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    # Every row claimed and its send running: now another process takes the write lock for
    # longer than every busy timeout and retry of a single write.
    await until(lambda: set(_statuses(db_path).values()) == {"delivering"})
    locker = await write_lock(db_path, 30)
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    assert await locker.wait() == 0
    assert proc.returncode == 0, err.decode()
    assert "Traceback" not in err.decode()
    assert out.decode().strip() == (
        "deliver: attempted=3 delivered=3 retried=0 dead_letter=0 expired=0"
    )
    assert _statuses(db_path) == dict.fromkeys(ids, "delivered")
    assert sorted(p["dispatch_id"] for p in recorder.payloads()) == sorted(ids)
