"""Migration 17: who manages a schedule (``managed_by``: ``api``, ``cli`` or ``set``) and, for a
schedule a ``ScheduleSet`` owns, its owner key, its member name in the set's document and the
digest of the member's resolved form at its last apply (``set_digest``; a schedule whose fields
no longer have that digest was edited by hand: *drifted*).

Plain ``ADD COLUMN`` on both dialects (no rebuild: SQLite accepts a CHECK on an added column
with a constant default). Rows that existed before are ``api``-managed, unowned.
"""

from __future__ import annotations

from studio_state import Migration

_V17_SQLITE = """
ALTER TABLE schedules ADD COLUMN managed_by TEXT NOT NULL DEFAULT 'api'
  CHECK(managed_by IN ('api', 'cli', 'set'));
ALTER TABLE schedules ADD COLUMN owner_key TEXT;
ALTER TABLE schedules ADD COLUMN set_member TEXT;
ALTER TABLE schedules ADD COLUMN set_digest TEXT;
CREATE INDEX IF NOT EXISTS idx_schedules_owner_key ON schedules(owner_key);
"""

_V17_PG = """
ALTER TABLE schedules ADD COLUMN IF NOT EXISTS managed_by TEXT NOT NULL DEFAULT 'api'
  CHECK(managed_by IN ('api', 'cli', 'set'));
ALTER TABLE schedules ADD COLUMN IF NOT EXISTS owner_key TEXT;
ALTER TABLE schedules ADD COLUMN IF NOT EXISTS set_member TEXT;
ALTER TABLE schedules ADD COLUMN IF NOT EXISTS set_digest TEXT;
CREATE INDEX IF NOT EXISTS idx_schedules_owner_key ON schedules(owner_key);
"""

VERSION = 18
"""This migration's number (the one place it is written)."""

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        VERSION,
        "schedules: managed_by, owner_key, set_member, set_digest (schedule sets)",
        _V17_SQLITE,
        postgres=_V17_PG,
    ),
)
"""This group's migrations, each with its SQLite and PostgreSQL text."""
