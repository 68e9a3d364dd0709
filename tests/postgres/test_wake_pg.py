"""Wake-ups by ``LISTEN/NOTIFY`` on PostgreSQL, and the ad-hoc candidate scan's ``SKIP LOCKED``.

The nodes run with a 60 s tick: while a node's listener holds its ``LISTEN`` it does not poll,
so work written by another program (the CLI, another node's API) is only picked up well
inside the tick when the write's ``NOTIFY`` wakes the node. Killing the listener's session
(``pg_terminate_backend``) must not stop the engine: it reconnects and wakes again. The
bounds are liveness bounds for a loaded two-core machine, far below the tick.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import psycopg
import pytest

import studio_state
from studio_scheduler_core import AdhocRunService, SchedulerSettings, ScheduleService
from studio_scheduler_core._adhoc import store as adhoc_store
from studio_scheduler_core._schema import MIGRATIONS, PACKAGE, WAKE_CHANNEL, ensure_schema
from studio_state import SchemaTooNew, connect
from studio_state.testing import db_rows, load_beside

_nodes = load_beside(__file__, "test_nodes_pg.py", "studio_nodes_pg_for_wake")

LONG_TICK = 60.0
#: Far below the tick: only a wake-up gets the work done this soon.
PROMPTLY = 20.0


@pytest.fixture
def long_tick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_nodes, "TICK", LONG_TICK)


def _settings() -> SchedulerSettings:
    return SchedulerSettings(command_allowlist=("true",))


def _command(name: str, interval: int) -> dict[str, Any]:
    return {
        "name": name,
        "trigger_type": "interval",
        "interval_sec": interval,
        "action_kind": "command",
        "action_command": "true",
        "action_command_args": [],
    }


async def _next_payload(listener: psycopg.AsyncConnection[Any]) -> str:
    async for note in listener.notifies(timeout=10, stop_after=1):
        assert note.channel == WAKE_CHANNEL
        return note.payload
    raise AssertionError("no notification within 10 s")


async def test_the_writes_the_engine_reacts_to_notify_on_commit(pg_dsn: str) -> None:
    async with connect(pg_dsn) as conn:
        await ensure_schema(conn)
        version = await studio_state.fetch_value(
            conn, "SELECT max(version) FROM schema_migrations WHERE package = ?", (PACKAGE,)
        )
        assert version == len(MIGRATIONS) == MIGRATIONS[-1].version
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as listener:
            await listener.execute(f"LISTEN {WAKE_CHANNEL}")
            schedules = ScheduleService(conn, settings=_settings())
            created = await schedules.create(_command("every-minute", 60))
            assert await _next_payload(listener) == "schedules"
            await AdhocRunService(conn, settings=_settings()).enqueue(
                {"action_kind": "command", "action_command": "true"}
            )
            assert await _next_payload(listener) == "schedule_runs"
            await schedules.delete(created.id)
            assert await _next_payload(listener) == "schedules"


async def test_a_database_of_a_newer_scheduler_core_is_refused(pg_dsn: str) -> None:
    async with connect(pg_dsn) as conn:
        await ensure_schema(conn)
        await conn.execute(
            "INSERT INTO schema_migrations (package, version, applied_at) VALUES (?, ?, 0)",
            (PACKAGE, len(MIGRATIONS) + 1),
        )
        with pytest.raises(SchemaTooNew):
            await ensure_schema(conn)


async def test_the_candidate_scan_skips_a_row_a_claim_in_flight_holds(pg_dsn: str) -> None:
    async with connect(pg_dsn) as conn:
        await ensure_schema(conn)
        runs = AdhocRunService(conn, settings=_settings())
        first = await runs.enqueue({"action_kind": "command", "action_command": "true"})
        await asyncio.sleep(0.01)  # queued_at orders the two
        second = await runs.enqueue({"action_kind": "command", "action_command": "true"})
        queued = [r.id for r in await adhoc_store.candidates(conn, 10)]
        assert queued == [first.id, second.id]
        async with await psycopg.AsyncConnection.connect(pg_dsn) as other:
            # Another node's claim transaction has updated the row and not yet committed.
            await other.execute(
                "UPDATE schedule_runs SET lease_attempts = lease_attempts WHERE id = %s",
                (first.id,),
            )
            scanned = await asyncio.wait_for(adhoc_store.candidates(conn, 10), timeout=10)
            assert [r.id for r in scanned] == [second.id]
            await other.rollback()
        queued = [r.id for r in await adhoc_store.candidates(conn, 10)]
        assert queued == [first.id, second.id]


def _run_status(dsn: str, run_id: str) -> str | None:
    rows = db_rows(dsn, "SELECT status FROM schedule_runs WHERE id = ?", (run_id,))
    return rows[0]["status"] if rows else None


def _queue_by_cli(dsn: str, home: Path) -> str:
    queued = _nodes.cli(dsn, home, "run", "command", "--json", "--", "true")
    assert queued.returncode == 0, queued.stderr
    return str(json.loads(queued.stdout)["id"])


@pytest.mark.usefixtures("long_tick")
def test_a_run_the_cli_queues_is_started_by_a_node_long_before_its_tick(
    pg_dsn: str, tmp_path: Path
) -> None:
    with _nodes.nodes(pg_dsn, tmp_path, ["node-a", "node-b"]):
        run_id = _queue_by_cli(pg_dsn, tmp_path)
        _nodes.wait_until(
            lambda: _run_status(pg_dsn, run_id) == "completed", PROMPTLY, "the run completed"
        )


@pytest.mark.usefixtures("long_tick")
def test_a_schedule_created_on_a_follower_fires_on_the_leader_long_before_its_tick(
    pg_dsn: str, tmp_path: Path
) -> None:
    with _nodes.nodes(pg_dsn, tmp_path, ["node-a", "node-b"]) as started:
        leaders = _nodes.wait_until(
            lambda: [n for n in started if (n.health() or {}).get("leader")], 30, "a leader"
        )
        (follower,) = [n for n in started if n is not leaders[0]]
        created = follower.post("/api/schedules", _nodes.schedule("soon", 2))
        _nodes.wait_until(
            lambda: db_rows(
                pg_dsn,
                "SELECT id FROM schedule_runs WHERE schedule_id = ? AND status = 'completed'",
                (created["id"],),
            ),
            PROMPTLY,
            "the schedule fired on the leader",
        )


def _listener_pids(dsn: str, node: str) -> set[int]:
    rows = db_rows(
        dsn,
        "SELECT pid FROM pg_stat_activity WHERE application_name = ?",
        (f"studio:{node}:wake",),
    )
    return {int(r["pid"]) for r in rows}


@pytest.mark.usefixtures("long_tick")
def test_a_killed_listener_reconnects_and_wakes_the_node_again(pg_dsn: str, tmp_path: Path) -> None:
    with _nodes.nodes(pg_dsn, tmp_path, ["node-a"]) as (node,):
        (pid,) = _nodes.wait_until(
            lambda: _listener_pids(pg_dsn, "node-a"), 30, "the node's listener session"
        )
        _nodes.wait_until(
            lambda: (node.health() or {}).get("wake_listening") is True, 30, "health: listening"
        )
        assert db_rows(pg_dsn, "SELECT pg_terminate_backend(?) AS done", (pid,)) == [{"done": True}]
        (again,) = _nodes.wait_until(
            lambda: _listener_pids(pg_dsn, "node-a") - {pid}, 30, "a new listener session"
        )
        for _ in range(2):  # the reconnected listener wakes the node, more than once
            run_id = _queue_by_cli(pg_dsn, tmp_path)
            _nodes.wait_until(
                lambda run_id=run_id: _run_status(pg_dsn, run_id) == "completed",
                PROMPTLY,
                "the run completed",
            )
        assert _listener_pids(pg_dsn, "node-a") == {again}
        health = node.health()
        assert health is not None and health["status"] == "ok", health
        assert health["wake_listening"] is True, health
