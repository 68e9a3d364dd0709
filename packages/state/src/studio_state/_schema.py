"""studio-state's own tables: ``status_transitions`` and ``api_tokens`` (``schema_migrations``
is the runner's).

``api_tokens`` lives here rather than in studio-api because every process that opens the
database (each server node, the CLI on the database directly) runs studio-state's migrations
first, and a token must be known to all of them; its audit rows need the ``token`` and
``maintenance`` entity types, which only a step of this package can add to
``status_transitions``' check.
"""

from __future__ import annotations

import aiosqlite

from ._migrations import Migration, migrate

PACKAGE = "studio-state"

ENTITY_TYPES = ("schedule", "schedule_run", "invocation", "dispatch", "token", "maintenance")

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
    Migration(
        2,
        "api_tokens; token and maintenance audit rows; audit indexes",
        # SQLite cannot change a CHECK in place: the table is rebuilt, rowids kept (readers
        # use max(rowid) as a position in the history).
        """
        CREATE TABLE status_transitions_v2 (
          id              TEXT PRIMARY KEY,
          entity_type     TEXT NOT NULL CHECK(entity_type IN
                            ('schedule', 'schedule_run', 'invocation', 'dispatch', 'token',
                             'maintenance')),
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
        INSERT INTO status_transitions_v2 (rowid, id, entity_type, entity_id, previous_status,
          status, reason_code, reason_summary, evidence_refs, actor, metadata, created_at)
          SELECT rowid, id, entity_type, entity_id, previous_status, status, reason_code,
            reason_summary, evidence_refs, actor, metadata, created_at
          FROM status_transitions;
        DROP TABLE status_transitions;
        ALTER TABLE status_transitions_v2 RENAME TO status_transitions;
        CREATE INDEX IF NOT EXISTS idx_status_transitions_entity
          ON status_transitions(entity_type, entity_id, created_at);
        CREATE INDEX IF NOT EXISTS idx_status_transitions_created
          ON status_transitions(created_at);
        CREATE INDEX IF NOT EXISTS idx_status_transitions_actor
          ON status_transitions(actor, created_at);
        CREATE TABLE IF NOT EXISTS api_tokens (
          id           TEXT PRIMARY KEY,
          name         TEXT NOT NULL,
          role         TEXT NOT NULL CHECK(role IN ('read', 'operate', 'admin')),
          salt         TEXT NOT NULL,
          digest       TEXT NOT NULL,
          created_at   REAL NOT NULL,
          created_by   TEXT,
          expires_at   REAL,
          last_used_at REAL,
          revoked_at   REAL
        );
        CREATE UNIQUE INDEX IF NOT EXISTS idx_api_tokens_live_name
          ON api_tokens(name) WHERE revoked_at IS NULL;
        """,
        postgres="""
        ALTER TABLE status_transitions
          DROP CONSTRAINT IF EXISTS status_transitions_entity_type_check;
        ALTER TABLE status_transitions
          ADD CONSTRAINT status_transitions_entity_type_check CHECK(entity_type IN
            ('schedule', 'schedule_run', 'invocation', 'dispatch', 'token', 'maintenance'));
        CREATE INDEX IF NOT EXISTS idx_status_transitions_created
          ON status_transitions(created_at);
        CREATE INDEX IF NOT EXISTS idx_status_transitions_actor
          ON status_transitions(actor, created_at);
        CREATE TABLE IF NOT EXISTS api_tokens (
          id           TEXT PRIMARY KEY,
          name         TEXT NOT NULL,
          role         TEXT NOT NULL CHECK(role IN ('read', 'operate', 'admin')),
          salt         TEXT NOT NULL,
          digest       TEXT NOT NULL,
          created_at   DOUBLE PRECISION NOT NULL,
          created_by   TEXT,
          expires_at   DOUBLE PRECISION,
          last_used_at DOUBLE PRECISION,
          revoked_at   DOUBLE PRECISION
        );
        CREATE UNIQUE INDEX IF NOT EXISTS idx_api_tokens_live_name
          ON api_tokens(name) WHERE revoked_at IS NULL;
        """,
    ),
)
"""studio-state's own migrations (package ``studio-state``), each in both dialects."""


async def ensure_schema(conn: aiosqlite.Connection) -> None:
    """Create or upgrade studio-state's tables (idempotent), on SQLite or PostgreSQL."""
    await migrate(conn, PACKAGE, STATE_MIGRATIONS)
