"""The ``dispatch_outbox`` table and its migrations (package ``studio-outbox``)."""

from __future__ import annotations

import aiosqlite

import studio_state

PACKAGE = "studio-outbox"

# ADR-0070 D5's table exactly, except that session_id and schedule_run_id are soft references
# (no FOREIGN KEY): a standalone producer's database has no Studio tables (DESIGN §2).
_V1 = """
CREATE TABLE dispatch_outbox (
  id              TEXT PRIMARY KEY,
  kind            TEXT NOT NULL,
  deliver_to      TEXT NOT NULL,
  payload         JSON NOT NULL,
  dedup_key       TEXT,
  status          TEXT NOT NULL DEFAULT 'pending'
                  CHECK(status IN ('pending', 'delivering', 'delivered',
                                   'acked', 'dead_letter', 'expired')),
  attempt         INTEGER NOT NULL DEFAULT 0,
  max_attempts    INTEGER NOT NULL DEFAULT 8,
  next_attempt_at REAL NOT NULL,
  ack_required    INTEGER NOT NULL DEFAULT 0,
  ack_token       TEXT,
  session_id      TEXT,
  schedule_run_id TEXT,
  last_error      TEXT,
  created_at      REAL NOT NULL,
  expires_at      REAL,
  updated_at      REAL
);
CREATE UNIQUE INDEX idx_dispatch_outbox_dedup
  ON dispatch_outbox(dedup_key) WHERE dedup_key IS NOT NULL;
CREATE INDEX idx_dispatch_outbox_due
  ON dispatch_outbox(next_attempt_at) WHERE status IN ('pending', 'delivering');
CREATE INDEX idx_dispatch_outbox_expiry
  ON dispatch_outbox(expires_at) WHERE status = 'pending' AND expires_at IS NOT NULL;
CREATE INDEX idx_dispatch_outbox_status
  ON dispatch_outbox(status);
"""

MIGRATIONS: tuple[studio_state.Migration, ...] = (
    studio_state.Migration(1, "dispatch_outbox", _V1),
)


async def ensure_schema(conn: aiosqlite.Connection) -> None:
    """Create or upgrade the outbox's tables (idempotent).

    Applies studio-state's schema (``status_transitions``) first, then the ``studio-outbox``
    migrations. Raises :class:`studio_state.SchemaTooNew` when the database was migrated by a
    newer studio-outbox.
    """
    await studio_state.ensure_schema(conn)
    await studio_state.migrate(conn, PACKAGE, MIGRATIONS)
