"""Crash reconciliation at startup and the periodic reapers.

Startup runs while this engine holds the database's lock, so every scheduled run still
``running`` belongs to a previous process: its child group (if alive with the recorded start
time) is terminated, and the run and its invocation become ``failed`` with
``run.failed.daemon_restart``. Such runs are never re-fired. The reapers time out runs and
invocations still ``running`` past the invocation deadline with no live process.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

import aiosqlite

from studio_launcher import (
    INVOCATION_ENV,
    LaunchError,
    find_processes_by_env,
    is_same_process,
    terminate_processes,
)
from studio_state import Transition, connect, fetch_all, record_transitions, write_transaction

from .orphans import OrphanReaper

logger = logging.getLogger("studio_scheduler_core")

DAEMON_RESTART = "run.failed.daemon_restart"
DEADLINE = "run.timed_out.deadline"


def _alive(row: dict[str, Any]) -> bool:
    pid, started = row.get("child_pid"), row.get("child_started_at")
    if not pid or started is None:
        return False
    return is_same_process(int(pid), float(started))


async def _terminalize(
    conn: aiosqlite.Connection,
    runs: list[dict[str, Any]],
    invocation_ids: Collection[str],
    *,
    status: str,
    reason_code: str,
    summary: str,
    actor: str,
    now: float,
) -> int:
    """Guarded ``running`` → status for runs and invocations, with transitions, one txn."""
    rows: list[Transition] = []
    async with write_transaction(conn):
        for run in runs:
            cursor = await conn.execute(
                "UPDATE schedule_runs SET status = ?, ended_at = ?, updated_at = ?, "
                "error_detail = COALESCE(error_detail, ?), status_reason_code = ?, "
                "status_reason_summary = ? WHERE id = ? AND status = 'running'",
                (status, now, now, summary, reason_code, summary, run["id"]),
            )
            if cursor.rowcount == 1:
                rows.append(
                    Transition(
                        entity_type="schedule_run",
                        entity_id=run["id"],
                        previous_status="running",
                        status=status,
                        reason_code=reason_code,
                        reason_summary=summary,
                        evidence_refs=[{"kind": "schedule_run", "id": run["id"]}],
                        actor=actor,
                        metadata={"child_pid": run.get("child_pid")},
                        created_at=now,
                    )
                )
            await cursor.close()
        for invocation_id in invocation_ids:
            cursor = await conn.execute(
                "UPDATE invocations SET status = ?, ended_at = ?, updated_at = ?, "
                "status_reason_code = ?, status_reason_summary = ? "
                "WHERE id = ? AND status = 'running'",
                (status, now, now, reason_code, summary, invocation_id),
            )
            if cursor.rowcount == 1:
                rows.append(
                    Transition(
                        entity_type="invocation",
                        entity_id=invocation_id,
                        previous_status="running",
                        status=status,
                        reason_code=reason_code,
                        reason_summary=summary,
                        evidence_refs=[{"kind": "invocation", "id": invocation_id}],
                        actor=actor,
                        created_at=now,
                    )
                )
            await cursor.close()
        await record_transitions(conn, rows)
    return sum(1 for r in rows if r.entity_type == "schedule_run")


async def database_path(conn: aiosqlite.Connection) -> str | None:
    """The file of the connection's main database (what children get as LIONAGI_STUDIO_DB)."""
    for row in await fetch_all(conn, "PRAGMA database_list"):
        if row.get("name") == "main":
            return str(row.get("file") or "") or None
    return None


async def find_orphans(
    conn: aiosqlite.Connection, invocation_ids: Collection[str], *, db_path: str | None = None
) -> dict[str, list[int]]:
    """Live processes started for these invocations, found by their environment: id -> pids.

    A child whose pid was never recorded (the daemon died between exec and writing it down)
    and a descendant that left its group (``setsid``) still carry ``LIONAGI_INVOCATION_ID``
    and ``LIONAGI_STUDIO_DB``; only processes of this database are matched. One ``/proc``
    scan for all the ids.
    """
    if not invocation_ids:
        return {}
    path = db_path if db_path is not None else await database_path(conn)
    if not path:
        return {}
    found = find_processes_by_env(INVOCATION_ENV, invocation_ids, where={"LIONAGI_STUDIO_DB": path})
    if found:
        logger.warning(
            "found %d orphaned process(es) of invocation(s) %s by environment",
            sum(len(pids) for pids in found.values()),
            ", ".join(sorted(found)),
        )
    return found


async def terminate_orphans(pids: Collection[int], reaper: OrphanReaper | None) -> None:
    """Terminate the groups of ``pids`` at once: through ``reaper`` in the background, else
    awaited here (one shared grace either way)."""
    if not pids:
        return
    if reaper is not None:
        reaper.terminate(pids)  # in the background: start-up and the tick never wait on it
        return
    try:
        await terminate_processes(list(pids))
    except (LaunchError, OSError) as exc:
        logger.warning("could not terminate orphans %s: %s", sorted(pids), exc)


async def reconcile_startup(
    conn: aiosqlite.Connection,
    *,
    now: float,
    db_path: str | None = None,
    reaper: OrphanReaper | None = None,
) -> int:
    """Fail every scheduled run left ``running`` by a previous process; return how many.

    Every live orphan is terminated: the recorded ``(child_pid, child_started_at)`` groups and
    every process still carrying one of those invocations' ids in its environment (a child
    whose pid was never written down, or a descendant that escaped its group with
    ``setsid``). All of them are signalled at once and share one grace period; with a
    ``reaper`` that happens in the background and this returns without waiting.
    Must only run while this engine holds the lock (no other engine can own those runs).
    """
    runs = await fetch_all(
        conn,
        "SELECT id, invocation_id, child_pid, child_started_at FROM schedule_runs "
        "WHERE status = 'running' AND leased_by IS NULL",
    )
    pids: set[int] = set()
    for run in runs:
        if _alive(run):
            logger.warning(
                "terminating orphaned process group %s of run %s", run["child_pid"], run["id"]
            )
            pids.add(int(run["child_pid"]))
    orphans = await fetch_all(
        conn,
        "SELECT i.id FROM invocations i LEFT JOIN schedule_runs r ON r.id = i.schedule_run_id "
        "WHERE i.status = 'running' AND (r.id IS NULL OR r.leased_by IS NULL)",
    )
    invocation_ids = {r["invocation_id"] for r in runs if r["invocation_id"]}
    invocation_ids.update(o["id"] for o in orphans)
    if not runs and not invocation_ids:
        return 0
    found = await find_orphans(conn, invocation_ids, db_path=db_path)
    pids.update(pid for group in found.values() for pid in group)
    await terminate_orphans(pids, reaper)
    return await _terminalize(
        conn,
        runs,
        sorted(invocation_ids),
        status="failed",
        reason_code=DAEMON_RESTART,
        summary="the scheduler restarted while this run was in flight; it is not re-fired",
        actor="scheduler_startup_reconciliation",
        now=now,
    )


async def reap_stale(
    conn: aiosqlite.Connection,
    *,
    now: float,
    deadline_seconds: float,
    owned_runs: Collection[str],
) -> int:
    """Time out runs/invocations ``running`` past the deadline with no live process."""
    cutoff = now - deadline_seconds
    runs = await fetch_all(
        conn,
        "SELECT id, invocation_id, child_pid, child_started_at, fired_at FROM schedule_runs "
        "WHERE status = 'running' AND leased_by IS NULL AND fired_at < ?",
        (cutoff,),
    )
    stale = [r for r in runs if r["id"] not in owned_runs and not _alive(r)]
    invocations = await fetch_all(
        conn,
        "SELECT i.id, i.schedule_run_id FROM invocations i "
        "LEFT JOIN schedule_runs r ON r.id = i.schedule_run_id "
        "WHERE i.status = 'running' AND i.started_at < ? AND (r.id IS NULL OR r.leased_by IS NULL)",
        (cutoff,),
    )
    stale_ids = {r["id"] for r in stale}
    live_ids = {r["id"] for r in runs} - stale_ids
    invocation_ids = {
        i["id"]
        for i in invocations
        if i["schedule_run_id"] not in live_ids and i["schedule_run_id"] not in owned_runs
    }
    invocation_ids.update(r["invocation_id"] for r in stale if r["invocation_id"])
    if not stale and not invocation_ids:
        return 0
    return await _terminalize(
        conn,
        stale,
        sorted(invocation_ids),
        status="timed_out",
        reason_code=DEADLINE,
        summary=f"still running after the {deadline_seconds:g}s invocation deadline "
        "with no live process",
        actor="scheduler_reaper",
        now=now,
    )


async def checkpoint(db_path: str) -> dict[str, Any]:
    """``PRAGMA wal_checkpoint(TRUNCATE)`` on a short-lived connection of its own."""
    async with connect(db_path) as conn:
        rows = await fetch_all(conn, "PRAGMA wal_checkpoint(TRUNCATE)")
    return rows[0] if rows else {}
