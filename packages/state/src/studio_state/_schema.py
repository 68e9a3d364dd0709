"""studio-state's own tables: ``status_transitions`` (``schema_migrations`` is the runner's)."""

from __future__ import annotations

import aiosqlite

from ._migrations import Migration, migrate

PACKAGE = "studio-state"

ENTITY_TYPES = ("schedule", "schedule_run", "invocation", "dispatch")

STATE_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "status_transitions",
        """
        CREATE TABLE IF NOT EXISTS status_transitions (
          id              TEXT PRIMARY KEY,
          entity_type     TEXT NOT NULL CHECK(entity_type IN
                            ('schedule', 'schedule_run', 'invocation', 'dispatch')),
          entity_id       TEXT NOT NULL,
          previous_status TEXT,
          status          TEXT NOT NULL,
          reason_code     TEXT NOT NULL,
          reason_summary  TEXT,
          evidence_refs   JSON,
          actor           TEXT,
          metadata        JSON,
          created_at      REAL NOT NULL
        );
        CREATE INDEX IF NOT EXISTS idx_status_transitions_entity
          ON status_transitions(entity_type, entity_id, created_at);
        """,
        postgres="""
        CREATE TABLE IF NOT EXISTS status_transitions (
          id              TEXT PRIMARY KEY,
          entity_type     TEXT NOT NULL CHECK(entity_type IN
                            ('schedule', 'schedule_run', 'invocation', 'dispatch')),
          entity_id       TEXT NOT NULL,
          previous_status TEXT,
          status          TEXT NOT NULL,
          reason_code     TEXT NOT NULL,
          reason_summary  TEXT,
          evidence_refs   JSON,
          actor           TEXT,
          metadata        JSON,
          created_at      DOUBLE PRECISION NOT NULL
        );
        CREATE INDEX IF NOT EXISTS idx_status_transitions_entity
          ON status_transitions(entity_type, entity_id, created_at);
        """,
    ),
)
"""studio-state's own migrations (package ``studio-state``), each in both dialects."""


async def ensure_schema(conn: aiosqlite.Connection) -> None:
    """Create or upgrade studio-state's tables (idempotent), on SQLite or PostgreSQL."""
    await migrate(conn, PACKAGE, STATE_MIGRATIONS)
