"""The schedule sets' storage: every SQL statement plan, apply and export run (the rest of
the writes go through the schedules' own store)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import aiosqlite

from studio_state import backend_of, fetch_all

from ..._records.codec import schedule_record
from ..._records.schedule import Schedule


async def owner_rows(
    conn: aiosqlite.Connection, owner: str, *, for_update: bool = False
) -> list[Schedule]:
    """The rows ``owner`` holds, and every row whose name starts with ``owner/`` (the names
    its members take); with ``for_update`` (PostgreSQL) locked until the transaction ends."""
    prefix = f"{owner}/"
    if for_update and backend_of(conn) == "postgresql":
        # locked in id order (as the engine's fire batches take schedule rows, so the two
        # cannot deadlock), then given back in creation order
        rows = await fetch_all(
            conn,
            "SELECT * FROM schedules WHERE owner_key = ? OR substr(name, 1, ?) = ? "
            "ORDER BY id FOR UPDATE",
            (owner, len(prefix), prefix),
        )
        rows = sorted(rows, key=lambda row: (row["created_at"], row["id"]))
    else:
        rows = await fetch_all(
            conn,
            "SELECT * FROM schedules WHERE owner_key = ? OR substr(name, 1, ?) = ? "
            "ORDER BY created_at, rowid",
            (owner, len(prefix), prefix),
        )
    return [schedule_record(row) for row in rows]


async def held_rows(conn: aiosqlite.Connection, owner: str | None) -> list[Schedule]:
    """The rows ``owner`` holds (``None``: every unowned row), in creation order."""
    if owner is None:
        rows = await fetch_all(
            conn, "SELECT * FROM schedules WHERE owner_key IS NULL ORDER BY created_at, rowid"
        )
    else:
        rows = await fetch_all(
            conn, "SELECT * FROM schedules WHERE owner_key = ? ORDER BY created_at, rowid", (owner,)
        )
    return [schedule_record(row) for row in rows]


def owner_lock_key(owner: str) -> int:
    """The PostgreSQL advisory lock key of an owner (a signed 64-bit integer)."""
    raw = hashlib.sha256(f"studio.schedule-set:{owner}".encode()).digest()[:8]
    return int.from_bytes(raw, "big", signed=True)


async def lock_owners(conn: aiosqlite.Connection, owners: list[str]) -> None:
    """On PostgreSQL, take each owner's transaction-scoped advisory lock (in key order, so two
    applies cannot deadlock); nothing on SQLite, whose write transaction is already exclusive."""
    if backend_of(conn) != "postgresql":
        return
    for owner in sorted(owners, key=owner_lock_key):
        await conn.execute("SELECT pg_advisory_xact_lock(?)", (owner_lock_key(owner),))


@dataclass(frozen=True, slots=True)
class RunToCancel:
    """A ``running`` run of a schedule a forced prune deletes: what its cancel guards on (its
    lease) and what stopping its process reads."""

    id: str
    schedule_id: str
    invocation_id: str | None
    leased_by: str | None
    lease_attempts: int | None
    child_pid: int | None
    child_started_at: float | None


async def running_runs(conn: aiosqlite.Connection, schedule_id: str) -> list[RunToCancel]:
    """The schedule's ``running`` runs (follow-ups included), with what a cancel guards on and
    what stops their processes. Not locked here: the cancel locks each run's invocation first,
    then makes its guarded update, in the order a run's terminal write takes the two rows."""
    rows = await fetch_all(
        conn,
        "SELECT id, schedule_id, invocation_id, leased_by, lease_attempts, child_pid, "
        "child_started_at FROM schedule_runs WHERE schedule_id = ? AND status = 'running' "
        "ORDER BY fired_at, id",
        (schedule_id,),
    )
    return [RunToCancel(**row) for row in rows]
