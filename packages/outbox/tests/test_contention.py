"""Delivery under a long write lock held by a real second process (SQLite contention)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import aiosqlite
import pytest

import studio_outbox
from studio_state.testing import eventually

pytestmark = pytest.mark.slow


def _statuses(path: Path) -> dict[str, str]:
    raw = sqlite3.connect(path)
    try:
        return dict(raw.execute("SELECT id, status FROM dispatch_outbox").fetchall())
    finally:
        raw.close()


async def test_cli_deliver_waits_out_a_30s_lock_and_records_every_outcome(
    db_path: Path, conn: aiosqlite.Connection, recorder: Any, write_lock: Any
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
    await eventually(lambda: set(_statuses(db_path).values()) == {"delivering"})
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


async def _deliver_once(db_path: Path, template: list[str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "studio_outbox",
        "deliver",
        "--db",
        str(db_path),
        "--template",
        json.dumps(template),
        "--once",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


def _leases(path: Path) -> list[float]:
    raw = sqlite3.connect(path)
    try:
        rows = raw.execute(
            "SELECT next_attempt_at FROM dispatch_outbox WHERE status = 'delivering'"
        ).fetchall()
        return [float(r[0]) for r in rows]
    finally:
        raw.close()


async def test_a_slow_outcome_write_across_the_lease_is_not_sent_again(
    db_path: Path, conn: aiosqlite.Connection, recorder: Any, write_lock: Any
) -> None:
    ids = [
        await studio_outbox.enqueue_dispatch(conn, kind="k", deliver_to="sleep:6") for _ in range(4)
    ]
    first = await _deliver_once(db_path, recorder.template())
    await eventually(lambda: set(_statuses(db_path).values()) == {"delivering"})
    lease_until = max(_leases(db_path))
    # Every send exits 0 after 6 s; meanwhile (from 3 s after the claim) another process holds
    # the write lock for 14 s, across the end of the 15 s claim lease, so no outcome can be
    # written before the lease lapses.
    await asyncio.sleep(max(0.0, lease_until - 12 - time.time()))
    locker = await write_lock(db_path, 14)
    # Once the lease has lapsed (the lock still held), a second scanner looks at the rows.
    await eventually(lambda: time.time() > lease_until + 0.5, timeout=20)
    assert locker.returncode is None, "the lock must still be held when the lease lapses"
    second = await _deliver_once(db_path, recorder.template())
    out2, err2 = await asyncio.wait_for(second.communicate(), 60)
    out1, err1 = await asyncio.wait_for(first.communicate(), 60)
    assert await locker.wait() == 0
    assert first.returncode == 0, err1.decode()
    assert second.returncode == 0, err2.decode()
    assert out1.decode().strip() == (
        "deliver: attempted=4 delivered=4 retried=0 dead_letter=0 expired=0"
    )
    assert "attempted=0" in out2.decode()
    assert _statuses(db_path) == dict.fromkeys(ids, "delivered")
    sent = [(p["dispatch_id"], p["attempt"]) for p in recorder.payloads()]
    assert sorted(sent) == sorted((dispatch_id, 1) for dispatch_id in ids)
