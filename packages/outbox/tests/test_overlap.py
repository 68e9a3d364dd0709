from __future__ import annotations

import asyncio
import collections
import json
import sys
from pathlib import Path
from typing import Any

import aiosqlite

import studio_outbox
import studio_state

ROWS = 24


async def _fill(conn: aiosqlite.Connection, deliver_to: str = "ok") -> list[str]:
    return await studio_outbox.enqueue_many(
        conn, [{"kind": "k", "deliver_to": deliver_to, "body": {"i": i}} for i in range(ROWS)]
    )


def _assert_each_attempt_sent_once(recorder: Any, ids: list[str]) -> None:
    sent = collections.Counter((p["dispatch_id"], p["attempt"]) for p in recorder.payloads())
    assert sent == {(dispatch_id, 1): 1 for dispatch_id in ids}


async def _assert_all_delivered(conn: aiosqlite.Connection, ids: list[str]) -> None:
    for dispatch_id in ids:
        row = await studio_outbox.get_dispatch(conn, dispatch_id)
        assert row is not None and row["status"] == "delivered" and row["attempt"] == 1
    rows = await conn.execute_fetchall(
        "SELECT reason_code, count(*) AS n FROM status_transitions GROUP BY reason_code"
    )
    assert {r["reason_code"]: r["n"] for r in rows} == {
        "dispatch.pending.enqueued": ROWS,
        "dispatch.delivering.claimed": ROWS,
        "dispatch.delivered.transport_ok": ROWS,
    }


async def test_two_tasks_on_one_connection_never_send_an_attempt_twice(
    conn: aiosqlite.Connection, recorder: Any
) -> None:
    ids = await _fill(conn)
    results = await asyncio.gather(
        *(
            studio_outbox.deliver_due_dispatches(
                conn, notify_template=recorder.template(), concurrency=4
            )
            for _ in range(2)
        )
    )
    assert sum(r["delivered"] for r in results) == ROWS
    assert sum(r["attempted"] for r in results) == ROWS
    _assert_each_attempt_sent_once(recorder, ids)
    await _assert_all_delivered(conn, ids)


async def test_two_connections_scanning_together_never_send_an_attempt_twice(
    db_path: Path, conn: aiosqlite.Connection, recorder: Any
) -> None:
    ids = await _fill(conn)
    async with studio_state.connect(db_path) as a, studio_state.connect(db_path) as b:
        results = await asyncio.gather(
            *(
                studio_outbox.deliver_due_dispatches(
                    c, notify_template=recorder.template(), concurrency=3
                )
                for c in (a, b, a, b)
            )
        )
    assert sum(r["delivered"] for r in results) == ROWS
    _assert_each_attempt_sent_once(recorder, ids)
    await _assert_all_delivered(conn, ids)


async def test_two_processes_scanning_together_never_send_an_attempt_twice(
    db_path: Path, conn: aiosqlite.Connection, recorder: Any
) -> None:
    ids = await _fill(conn, deliver_to="sleep:0.25")  # both passes surely overlap in time
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "studio_outbox",
            "deliver",
            "--db",
            str(db_path),
            "--template",
            json.dumps(recorder.template()),
            "--once",
            "--concurrency",
            "4",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for _ in range(2)
    ]
    delivered = []
    for proc in procs:
        out, err = await asyncio.wait_for(proc.communicate(), 90)
        assert proc.returncode == 0, err.decode()
        fields = dict(item.split("=") for item in out.decode().split()[1:])
        delivered.append(int(fields["delivered"]))
    assert sum(delivered) == ROWS
    assert min(delivered) > 0  # both processes won some rows
    _assert_each_attempt_sent_once(recorder, ids)
    await _assert_all_delivered(conn, ids)
