"""Schema migrations of studio-scheduler-core (package name ``studio-scheduler-core``).

Tables: ``schedules`` (trigger, action and policy columns, description, last_evaluated_at,
disabled_reason), ``schedule_runs`` (with child_pid, child_started_at), ``invocations`` and
``sessions``, with the indexes the hot paths need (docs/reference.md lists the statuses).

One module per migration or small group of them, each holding every migration's SQLite text
and its PostgreSQL text side by side. On PostgreSQL the same tables, columns, constraints and
indexes, with these conventions: ``REAL`` timestamps are ``double precision``; SQLite's 64-bit
``INTEGER`` is ``bigint`` (flags included: the SQL compares them with ``= 1``); JSON columns
are ``text`` (the stored bytes are the bytes written); a table whose SQL orders or pages by
SQLite's ``rowid`` (``schedules``, ``schedule_runs``, ``invocations``,
``status_transitions``) gets a ``rowid`` identity column with a unique index, so the same
statements order and page the same way; SQLite's triggers are PL/pgSQL trigger functions with
the same effect. Migration 8, a table rebuild on SQLite (which cannot alter a CHECK), is plain
``ALTER TABLE`` there. Migrations 12 and 13 exist only there (on SQLite they are empty steps,
so both dialects keep one numbering). Migration 14's ad-hoc run counts are delta rows there
(one row per status on SQLite, whose writers never run concurrently). Migration 15, the stored
copy of a finished run's log (``run_logs``), exists only there too. Migration 16 (the
counters behind health and stats, ``error_class``) has the same tables on both, and
migration 19's health-row triggers are a PL/pgSQL function there, as are migration 21's
triggers keeping the spend total. Migration 20 adds the health row's totals of what retention
deleted (same columns on both).
"""

from __future__ import annotations

from typing import Any, cast

import aiosqlite

import studio_outbox
import studio_state
from studio_state import Migration, fetch_value, migrate

from . import (
    v01_tables,
    v02_v07_indexes,
    v08_policies,
    v09_v14_nodes,
    v15_run_logs,
    v16_health_counters,
    v17_at_rate_limit,
    v18_schedule_sets,
    v19_health_backfill,
    v20_pruned_totals,
    v21_spend_total,
)
from .v09_v14_nodes import WAKE_CHANNEL

PACKAGE = "studio-scheduler-core"

MIGRATIONS: tuple[Migration, ...] = (
    *v01_tables.MIGRATIONS,
    *v02_v07_indexes.MIGRATIONS,
    *v08_policies.MIGRATIONS,
    *v09_v14_nodes.MIGRATIONS,
    *v15_run_logs.MIGRATIONS,
    *v16_health_counters.MIGRATIONS,
    *v17_at_rate_limit.MIGRATIONS,
    *v18_schedule_sets.MIGRATIONS,
    *v19_health_backfill.MIGRATIONS,
    *v20_pruned_totals.MIGRATIONS,
    *v21_spend_total.MIGRATIONS,
)
"""Every migration in version order."""

__all__ = ["MIGRATIONS", "PACKAGE", "WAKE_CHANNEL", "ensure_schema"]


async def ensure_schema(conn: aiosqlite.Connection) -> None:
    """Migrate studio-state's, studio-outbox's and scheduler-core's tables (idempotent).

    On PostgreSQL each migration's ``postgres`` text runs, and the outbox's tables are the
    outbox's PostgreSQL schema (:func:`studio_outbox.postgres.ensure_schema_sync`, run on the
    connection's own psycopg connection).
    """
    if studio_state.backend_of(conn) == "postgresql":
        await _ensure_schema_postgres(conn)
        return
    await studio_state.ensure_schema(conn)
    # Foreign keys can only be switched outside a transaction; migration 8 rebuilds a table.
    enforced = bool(await fetch_value(conn, "PRAGMA foreign_keys"))
    if enforced:
        await conn.execute("PRAGMA foreign_keys = OFF")
    try:
        await migrate(conn, PACKAGE, MIGRATIONS)
    finally:
        if enforced:
            await conn.execute("PRAGMA foreign_keys = ON")
    await studio_outbox.ensure_schema(conn)


async def _ensure_schema_postgres(conn: aiosqlite.Connection) -> None:
    # No foreign-key switch: migration 8 alters ``schedules`` in place on PostgreSQL.
    from studio_outbox.postgres import ensure_schema_sync

    await studio_state.ensure_schema(conn)
    await migrate(conn, PACKAGE, MIGRATIONS)
    await studio_state.run_sync(conn, lambda db: ensure_schema_sync(cast(Any, db).raw))
