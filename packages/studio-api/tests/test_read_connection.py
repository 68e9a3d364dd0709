"""GET routes read on their own connection: they answer while a write transaction holds the
engine's connection (its thread busy until the transaction commits)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any

import studio_state

HOLD_SECONDS = 8.0


def _hold_engine_connection(studio: Any, release: threading.Event) -> Any:
    """One write transaction on the engine's connection that keeps its thread until
    ``release`` is set (or HOLD_SECONDS pass): like a long batch or a stalled commit."""
    engine = studio.engine
    loop = studio.server._server.servers[0].get_loop()
    entered = threading.Event()

    def body(db: sqlite3.Connection) -> None:
        db.execute("UPDATE schedules SET updated_at = updated_at")
        entered.set()
        release.wait(HOLD_SECONDS)

    future = asyncio.run_coroutine_threadsafe(
        studio_state.run_write_transaction(engine.conn, body), loop
    )
    assert entered.wait(10), "the write transaction did not start"
    return future


def test_gets_answer_while_a_write_transaction_holds_the_engine_connection(
    studio: Any, command_schedule: Callable[..., dict[str, Any]]
) -> None:
    created = studio.client.post("/api/schedules", json=command_schedule("held"))
    assert created.status_code == 201, created.text
    schedule_id = created.json()["id"]
    queued = studio.client.post("/api/dispatch", json={"kind": "note", "deliver_to": "x"})
    assert queued.status_code == 201, queued.text
    dispatch_id = queued.json()["id"]

    release = threading.Event()
    hold = _hold_engine_connection(studio, release)
    try:
        answers = {
            path: studio.client.get(path)
            for path in (
                f"/api/schedules/{schedule_id}",
                "/api/schedules",
                f"/api/schedules/{schedule_id}/runs",
                f"/api/schedules/{schedule_id}/preview",
                "/api/runs",
                "/api/dispatch",
                f"/api/dispatch/{dispatch_id}",
            )
        }
        # Every GET answered while the transaction still held the engine's connection.
        assert not hold.done()
    finally:
        release.set()
    hold.result(timeout=HOLD_SECONDS + 10)
    for path, response in answers.items():
        assert response.status_code == 200, (path, response.text)
    assert answers[f"/api/schedules/{schedule_id}"].json()["name"] == "held"
    assert answers["/api/schedules"].json()["total"] == 1
    assert answers["/api/dispatch"].json()["total"] == 1
    assert answers[f"/api/dispatch/{dispatch_id}"].json()["id"] == dispatch_id


def test_a_get_sees_what_a_write_just_committed(
    studio: Any, command_schedule: Callable[..., dict[str, Any]]
) -> None:
    for n in range(5):
        created = studio.client.post("/api/schedules", json=command_schedule(f"s{n}"))
        assert created.status_code == 201, created.text
        got = studio.client.get(f"/api/schedules/{created.json()['id']}")
        assert got.status_code == 200 and got.json()["name"] == f"s{n}"
        renamed = studio.client.patch(
            f"/api/schedules/{created.json()['id']}", json={"name": f"r{n}"}
        )
        assert renamed.status_code == 200, renamed.text
        listed = studio.client.get("/api/schedules").json()
        assert listed["total"] == n + 1
        assert {row["name"] for row in listed["schedules"]} == {f"r{i}" for i in range(n + 1)}


def test_the_read_connection_refuses_writes_and_closes_with_the_server(studio: Any) -> None:
    reads = studio.server.app.state.reads
    loop = studio.server._server.servers[0].get_loop()

    async def write() -> str:
        try:
            await reads.conn.execute("DELETE FROM schedules")
        except sqlite3.OperationalError as exc:
            return str(exc)
        return "written"

    outcome = asyncio.run_coroutine_threadsafe(write(), loop).result(10)
    assert "readonly" in outcome.replace(" ", "").lower() or "query_only" in outcome, outcome
    started = time.monotonic()
    studio.stop()
    assert time.monotonic() - started < 30
    try:
        asyncio.run(reads.conn.execute("SELECT 1"))
    except ValueError:
        pass  # aiosqlite: no active connection
    else:
        raise AssertionError("the read connection is still open after shutdown")
