"""The reads behind the operator surfaces: a run's status (log routes, ``studio run``), the
slots held now (``studio schedule limits``), the dashboard's overview and runs list, and the
figures the API's metrics collectors read.

The asynchronous reads take whichever connection the caller chose (the API passes its read
connection or the engine's, as it did before); the metric reads take a plain
``sqlite3.Connection`` because a collector runs synchronously on a short-lived read-only file
connection of its own. A second backend implements both sets.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiosqlite

from studio_state import backend_of, fetch_all, fetch_one, fetch_value

_RUN_COLUMNS = (
    "r.id, r.schedule_id, r.action_kind, r.status, r.exit_code, r.chain_depth, r.fired_at, "
    "r.ended_at, r.created_at, r.status_reason_code, r.status_reason_summary, s.name AS "
    "schedule_name"
)


@dataclass(frozen=True, slots=True)
class RunState:
    """Where a run stands: its status and reason, and ``node_id``, the node that ran it (where
    its log is; ``None`` before its child started)."""

    id: str
    status: str
    status_reason_code: str | None
    status_reason_summary: str | None
    node_id: str | None


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A node that started on the database: ``url`` is its API (``None``: it gave none)."""

    node_id: str
    url: str | None
    started_at: float
    seen_at: float


@dataclass(frozen=True, slots=True)
class HeldSlot:
    """A running top-level scheduled run holding a slot: since its fire time."""

    schedule_id: str
    run_id: str
    since: float | None
    schedule_name: str | None


@dataclass(frozen=True, slots=True)
class RunLine:
    """A run as the dashboard lists it, with its schedule's name and zone (``None``: an
    ad-hoc run, or a schema without per-schedule zones)."""

    id: str
    schedule_id: str | None
    action_kind: str
    status: str
    exit_code: int | None
    chain_depth: int
    fired_at: float | None
    ended_at: float | None
    created_at: float | None
    status_reason_code: str | None
    status_reason_summary: str | None
    schedule_name: str | None
    timezone: str | None


@dataclass(frozen=True, slots=True)
class NextFire:
    """An enabled schedule's next fire (``timezone``: its zone, ``None`` as above)."""

    id: str
    name: str
    trigger_type: str
    next_fire_at: float
    timezone: str | None


@dataclass(frozen=True, slots=True)
class Overview:
    """The dashboard overview's figures (:func:`read_overview`)."""

    in_flight: list[RunLine]
    next_fires: list[NextFire]
    failures: list[RunLine]
    dispatch_by_status: dict[str, int]
    schedules_enabled: int
    schedules_disabled: int


async def read_run_status(conn: aiosqlite.Connection, run_id: str) -> RunState | None:
    """A run's status (any kind of run: scheduled, follow-up or ad-hoc), or ``None`` when
    there is no such run."""
    row = await fetch_one(
        conn,
        "SELECT id, status, status_reason_code, status_reason_summary, node_id "
        "FROM schedule_runs WHERE id = ?",
        (run_id,),
    )
    return None if row is None else RunState(**row)


async def read_node(conn: aiosqlite.Connection, node_id: str) -> NodeInfo | None:
    """The node, or ``None`` when no node of that id ever started on this database."""
    row = await fetch_one(
        conn,
        "SELECT node_id, url, started_at, seen_at FROM studio_nodes WHERE node_id = ?",
        (node_id,),
    )
    return None if row is None else NodeInfo(**row)


async def read_slot_holders(conn: aiosqlite.Connection) -> tuple[list[HeldSlot], int]:
    """The runs holding a scheduled slot now (oldest first) and how many ad-hoc runs are
    running."""
    holders = await fetch_all(
        conn,
        "SELECT r.schedule_id, r.id AS run_id, r.fired_at AS since, s.name AS schedule_name "
        "FROM schedule_runs r LEFT JOIN schedules s ON s.id = r.schedule_id "
        "WHERE r.status = 'running' AND r.schedule_id IS NOT NULL AND r.chain_depth = 0 "
        "ORDER BY r.fired_at",
    )
    adhoc = await fetch_value(
        conn,
        "SELECT COUNT(*) AS n FROM schedule_runs WHERE status = 'running' AND schedule_id IS NULL",
    )
    return [HeldSlot(**row) for row in holders], int(adhoc or 0)


async def schedules_have_zones(conn: aiosqlite.Connection) -> bool:
    """Whether ``schedules`` has a per-schedule ``timezone`` column (newer schemas)."""
    if backend_of(conn) == "postgresql":  # PostgreSQL's catalogue instead of a pragma
        rows = await fetch_all(
            conn,
            "SELECT column_name AS name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = 'schedules'",
        )
    else:
        rows = await fetch_all(conn, "SELECT name FROM pragma_table_info('schedules')")
    return any(row["name"] == "timezone" for row in rows)


async def read_overview(conn: aiosqlite.Connection, *, zones: bool, limit: int = 10) -> Overview:
    """In-flight runs, next fires, recent failures, the dispatch rows by status and the
    enabled/disabled schedule counts (each one indexed statement). ``zones``: whether the
    schedules carry ``timezone`` (:func:`schedules_have_zones`)."""
    zone = "s.timezone" if zones else "NULL"
    in_flight = await fetch_all(
        conn,
        f"SELECT {_RUN_COLUMNS}, {zone} AS timezone FROM schedule_runs r "
        "LEFT JOIN schedules s ON s.id = r.schedule_id "
        "WHERE r.status = 'running' ORDER BY r.fired_at DESC LIMIT ?",
        (limit,),
    )
    next_fires = await fetch_all(
        conn,
        f"SELECT s.id, s.name, s.trigger_type, s.next_fire_at, {zone} AS timezone "
        "FROM schedules s WHERE s.enabled = 1 AND s.next_fire_at IS NOT NULL "
        "ORDER BY s.next_fire_at LIMIT ?",
        (limit,),
    )
    failures = await fetch_all(
        conn,
        f"SELECT {_RUN_COLUMNS}, {zone} AS timezone FROM schedule_runs r "
        "LEFT JOIN schedules s ON s.id = r.schedule_id "
        # NULLS LAST is SQLite's order for DESC and not PostgreSQL's (same plan on SQLite).
        "WHERE r.status IN ('failed', 'timed_out') ORDER BY r.ended_at DESC NULLS LAST LIMIT ?",
        (limit,),
    )
    by_status = await fetch_all(
        conn, "SELECT status, COUNT(*) AS n FROM dispatch_outbox GROUP BY status ORDER BY status"
    )
    counts = await fetch_all(
        conn, "SELECT enabled, COUNT(*) AS n FROM schedules GROUP BY enabled ORDER BY enabled"
    )
    enabled = {bool(row["enabled"]): int(row["n"]) for row in counts}
    return Overview(
        in_flight=[RunLine(**row) for row in in_flight],
        next_fires=[NextFire(**row) for row in next_fires],
        failures=[RunLine(**row) for row in failures],
        dispatch_by_status={row["status"]: int(row["n"]) for row in by_status},
        schedules_enabled=enabled.get(True, 0),
        schedules_disabled=enabled.get(False, 0),
    )


async def read_runs_page(
    conn: aiosqlite.Connection, *, status: str | None, zones: bool, limit: int, offset: int
) -> tuple[list[RunLine], int]:
    """One page of every run (scheduled, follow-up, ad-hoc), newest first, and the exact total.

    The total adds the trigger-kept counts (``schedule_run_counts``: every run with a
    schedule; ``adhoc_run_counts``: every ad-hoc run) to the runs that are neither, counted
    through their partial index (none are written today): it reads the count rows, not the
    runs, so it costs the same whatever the history.
    """
    zone = "s.timezone" if zones else "NULL"
    where, params = ("WHERE r.status = ?", [status]) if status else ("", [])
    rows = await fetch_all(
        conn,
        f"SELECT {_RUN_COLUMNS}, {zone} AS timezone FROM schedule_runs r "
        f"LEFT JOIN schedules s ON s.id = r.schedule_id {where} "
        "ORDER BY r.rowid DESC LIMIT ? OFFSET ?",
        [*params, limit, offset],
    )
    of_status = " WHERE status = ?" if status else ""
    # Without statistics SQLite's planner prefers the schedule index's ``schedule_id IS NULL``
    # range (every ad-hoc run) to the small partial index: name it.
    unlisted = "" if backend_of(conn) == "postgresql" else " INDEXED BY idx_schedule_runs_unlisted"
    total = await fetch_value(
        conn,
        f"SELECT (SELECT coalesce(sum(n), 0) FROM schedule_run_counts{of_status}) "
        f"+ (SELECT coalesce(sum(n), 0) FROM adhoc_run_counts{of_status}) "
        f"+ (SELECT count(*) FROM schedule_runs{unlisted} "
        f"WHERE schedule_id IS NULL AND queued_at IS NULL{' AND status = ?' if status else ''})",
        params * 3,
    )
    return [RunLine(**row) for row in rows], int(total or 0)


def read_dispatch_counts(db: sqlite3.Connection) -> dict[str, int]:
    """Dispatch rows per status, from the trigger-kept counts (statuses with a counts row)."""
    counts = db.execute(
        "SELECT status, SUM(n) FROM dispatch_outbox_counts GROUP BY status"
    ).fetchall()
    return {str(s): int(n) for s, n in counts}


def read_github_polls(db: sqlite3.Connection) -> list[tuple[str, float | None, float]]:
    """Each github_poll schedule's ``(id, last_healthy_poll_at, created_at)``."""
    polls = db.execute(
        "SELECT id, last_healthy_poll_at, created_at FROM schedules "
        "WHERE trigger_type = 'github_poll'"
    ).fetchall()
    return [(str(i), h, c) for i, h, c in polls]


async def transition_position(conn: aiosqlite.Connection) -> int:
    """The position (SQLite ``rowid``) of the newest ``status_transitions`` row; 0: none yet."""
    value = await fetch_value(conn, "SELECT coalesce(max(rowid), 0) FROM status_transitions")
    return int(value or 0)


@dataclass(frozen=True, slots=True)
class WaitingCancel:
    """A cancel of a run that never started: its transition's position, the run's id, its
    ``schedule_id`` and ``chain_depth`` (``None`` once the run row is deleted)."""

    seq: int
    entity_id: str
    schedule_id: str | None
    chain_depth: int | None


@dataclass(frozen=True, slots=True)
class DeliveryOutcome:
    """A dispatch transition: its position, the dispatch's id, the transition's status and
    reason, and the dispatch's ``kind``, ``deliver_to``, ``schedule_run_id`` and ``attempt``
    (``None`` once the dispatch is purged)."""

    seq: int
    entity_id: str
    status: str
    reason_code: str
    reason_summary: str | None
    kind: str | None
    deliver_to: str | None
    schedule_run_id: str | None
    attempt: int | None


async def read_waiting_cancels(
    conn: aiosqlite.Connection, *, after: int, reason_code: str, limit: int
) -> list[WaitingCancel]:
    """Up to ``limit`` cancels (``reason_code``) of runs that never started, recorded after
    position ``after``, in order."""
    rows = await fetch_all(
        conn,
        "SELECT t.rowid AS seq, t.entity_id, r.schedule_id, r.chain_depth "
        "FROM status_transitions t LEFT JOIN schedule_runs r ON r.id = t.entity_id "
        "WHERE t.rowid > ? AND t.entity_type = 'schedule_run' "
        "AND t.status = 'cancelled' AND t.reason_code = ? "
        "AND t.previous_status <> 'running' ORDER BY t.rowid LIMIT ?",
        (after, reason_code, limit),
    )
    return [WaitingCancel(**row) for row in rows]


async def read_delivery_outcomes(
    conn: aiosqlite.Connection, *, after: int, reason_codes: Sequence[str], limit: int
) -> list[DeliveryOutcome]:
    """Up to ``limit`` dispatch transitions with one of ``reason_codes`` recorded after
    position ``after``, in order."""
    marks = ", ".join("?" * len(reason_codes))
    rows = await fetch_all(
        conn,
        "SELECT t.rowid AS seq, t.entity_id, t.status, t.reason_code, "
        "t.reason_summary, d.kind, d.deliver_to, d.schedule_run_id, d.attempt "
        "FROM status_transitions t LEFT JOIN dispatch_outbox d ON d.id = t.entity_id "
        "WHERE t.rowid > ? AND t.entity_type = 'dispatch' "
        f"AND t.reason_code IN ({marks}) ORDER BY t.rowid LIMIT ?",
        (after, *reason_codes, limit),
    )
    return [DeliveryOutcome(**row) for row in rows]


_WEBHOOK_ROW = "(deliver_to LIKE 'http://%' OR deliver_to LIKE 'https://%')"


async def count_pending_dispatches(conn: aiosqlite.Connection, *, webhook: bool) -> int:
    """How many ``pending`` dispatches go to a URL (``webhook``) or to the argv transport."""
    condition = _WEBHOOK_ROW if webhook else f"NOT {_WEBHOOK_ROW}"
    value = await fetch_value(
        conn, f"SELECT count(*) FROM dispatch_outbox WHERE status = 'pending' AND {condition}"
    )
    return int(value or 0)


def latest_transition_seq(db: sqlite3.Connection) -> int:
    """The position of the newest ``status_transitions`` row (0: none yet)."""
    return int(db.execute("SELECT coalesce(max(rowid), 0) FROM status_transitions").fetchone()[0])


def read_dispatch_outcomes(
    db: sqlite3.Connection, *, after: int, reason_codes: Sequence[str], limit: int
) -> list[tuple[int, str, str | None]]:
    """Up to ``limit`` dispatch transitions with one of ``reason_codes`` written after position
    ``after``, in order: ``(position, reason_code, deliver_to)``; ``deliver_to`` is ``None``
    once the dispatch row is purged."""
    marks = ", ".join("?" * len(reason_codes))
    rows = db.execute(
        "SELECT t.rowid AS seq, t.reason_code, d.deliver_to FROM status_transitions t "
        "LEFT JOIN dispatch_outbox d ON d.id = t.entity_id "
        "WHERE t.rowid > ? AND t.entity_type = 'dispatch' "
        f"AND t.reason_code IN ({marks}) ORDER BY t.rowid LIMIT ?",
        (after, *reason_codes, limit),
    ).fetchall()
    return [(int(seq), str(reason), deliver_to) for seq, reason, deliver_to in rows]


async def read_schedule_name(conn: aiosqlite.Connection, schedule_id: str) -> str | None:
    """The schedule's name, or ``None`` when there is no such schedule."""
    row = await fetch_one(conn, "SELECT name FROM schedules WHERE id = ?", (schedule_id,))
    return None if row is None else str(row["name"])


async def read_running_top_level(conn: aiosqlite.Connection, schedule_id: str) -> list[str]:
    """The ids of the schedule's top-level runs running now, oldest fire first."""
    rows = await fetch_all(
        conn,
        "SELECT id FROM schedule_runs WHERE status = 'running' AND schedule_id = ? "
        "AND chain_depth = 0 ORDER BY fired_at",
        (schedule_id,),
    )
    return [str(r["id"]) for r in rows]


async def read_last_run_row(conn: aiosqlite.Connection, run_id: str) -> Mapping[str, Any] | None:
    """What a schedule's status shows of its last run (``None``: retention deleted it)."""
    return await fetch_one(
        conn,
        "SELECT id, status, status_reason_code, status_reason_summary, fired_at, ended_at, "
        "exit_code, error_class, error_detail FROM schedule_runs WHERE id = ?",
        (run_id,),
    )
