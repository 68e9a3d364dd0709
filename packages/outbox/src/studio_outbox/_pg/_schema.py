"""The outbox's schema on PostgreSQL and its migration runner.

The same tables, columns and constraints as on SQLite, version for version, then what only
PostgreSQL has (the ``NOTIFY`` that wakes waiting deliverers). Each package's migrations are
recorded in ``schema_migrations`` exactly as on SQLite, and a database migrated by newer code
is refused with :class:`studio_state.SchemaTooNew`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import studio_state
from studio_state import Clock, system_clock

from .._drive import Fetch
from .._schema import PACKAGE
from ._drive import (
    PgSteps,
    Script,
    in_transaction,
    run_in_transaction_async,
    run_in_transaction_sync,
)

if TYPE_CHECKING:
    import psycopg

CHANNEL: Final = "studio_outbox"
"""The ``LISTEN`` channel notified when dispatches are enqueued (on commit)."""

# One key for every Studio migration on a database: concurrent ensure_schema calls serialise.
MIGRATION_LOCK: Final = studio_state.POSTGRES_MIGRATION_LOCK

_MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
  package    TEXT NOT NULL,
  version    INTEGER NOT NULL,
  applied_at DOUBLE PRECISION NOT NULL,
  PRIMARY KEY (package, version)
)
"""


# studio-state's own step (status_transitions), in its PostgreSQL text: identical whichever
# of studio_state.migrate and this runner creates it first.
def _postgres_form(migration: studio_state.Migration) -> studio_state.Migration:
    if migration.postgres is None:  # pragma: no cover - studio-state ships both dialects
        raise studio_state.MigrationError(
            f"studio-state v{migration.version} has no PostgreSQL text"
        )
    return studio_state.Migration(migration.version, migration.description, migration.postgres)


STATE_MIGRATIONS: tuple[studio_state.Migration, ...] = tuple(
    _postgres_form(m) for m in studio_state.STATE_MIGRATIONS
)

# The SQLite migrations' columns and constraints, version for version; ``json`` keeps the
# payload's text exactly as built (``jsonb`` would reorder its keys).
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
  next_attempt_at DOUBLE PRECISION NOT NULL,
  ack_required    INTEGER NOT NULL DEFAULT 0,
  ack_token       TEXT,
  session_id      TEXT,
  schedule_run_id TEXT,
  last_error      TEXT,
  created_at      DOUBLE PRECISION NOT NULL,
  expires_at      DOUBLE PRECISION,
  updated_at      DOUBLE PRECISION
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

_V2 = "ALTER TABLE dispatch_outbox ADD COLUMN claimed_by TEXT;"

_V3 = """
CREATE TABLE dispatch_outbox_counts (
  status TEXT NOT NULL,
  kind   TEXT NOT NULL,
  n      BIGINT NOT NULL,
  PRIMARY KEY (status, kind)
);
INSERT INTO dispatch_outbox_counts (status, kind, n)
  SELECT status, kind, count(*) FROM dispatch_outbox GROUP BY status, kind;
CREATE FUNCTION dispatch_outbox_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP IN ('UPDATE', 'DELETE') THEN
    UPDATE dispatch_outbox_counts SET n = n - 1 WHERE status = OLD.status AND kind = OLD.kind;
    DELETE FROM dispatch_outbox_counts
      WHERE status = OLD.status AND kind = OLD.kind AND n <= 0;
  END IF;
  IF TG_OP IN ('UPDATE', 'INSERT') THEN
    INSERT INTO dispatch_outbox_counts (status, kind, n) VALUES (NEW.status, NEW.kind, 1)
      ON CONFLICT (status, kind) DO UPDATE SET n = dispatch_outbox_counts.n + 1;
  END IF;
  RETURN NULL;
END;
$$;
CREATE TRIGGER dispatch_outbox_count_insert AFTER INSERT ON dispatch_outbox
  FOR EACH ROW EXECUTE FUNCTION dispatch_outbox_count();
CREATE TRIGGER dispatch_outbox_count_delete AFTER DELETE ON dispatch_outbox
  FOR EACH ROW EXECUTE FUNCTION dispatch_outbox_count();
CREATE TRIGGER dispatch_outbox_count_update AFTER UPDATE OF status, kind ON dispatch_outbox
  FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.kind IS DISTINCT FROM NEW.kind)
  EXECUTE FUNCTION dispatch_outbox_count();
CREATE INDEX idx_dispatch_outbox_kind ON dispatch_outbox(kind);
CREATE INDEX idx_dispatch_outbox_status_kind ON dispatch_outbox(status, kind);
"""

# Every enqueue (any writer, any path) wakes the deliverers when its transaction commits;
# PostgreSQL folds the identical notifications of one transaction into one.
_V4 = f"""
CREATE FUNCTION dispatch_outbox_wake() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('{CHANNEL}', '');
  RETURN NULL;
END;
$$;
CREATE TRIGGER dispatch_outbox_wake_insert AFTER INSERT ON dispatch_outbox
  FOR EACH STATEMENT EXECUTE FUNCTION dispatch_outbox_wake();
"""

# The counts as delta rows: each statement appends its net change per (status, kind) instead of
# updating one shared row, so concurrent deliverers never queue (or deadlock) on a hot counter
# row. Readers sum ``n`` as before; :func:`compact_counts` folds the deltas from time to time.
_V5 = """
DROP TRIGGER dispatch_outbox_count_insert ON dispatch_outbox;
DROP TRIGGER dispatch_outbox_count_delete ON dispatch_outbox;
DROP TRIGGER dispatch_outbox_count_update ON dispatch_outbox;
DROP FUNCTION dispatch_outbox_count();
ALTER TABLE dispatch_outbox_counts DROP CONSTRAINT dispatch_outbox_counts_pkey;
CREATE INDEX idx_dispatch_outbox_counts ON dispatch_outbox_counts(status, kind);
CREATE FUNCTION dispatch_outbox_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO dispatch_outbox_counts (status, kind, n)
      SELECT status, kind, count(*) FROM new_rows GROUP BY status, kind;
  ELSIF TG_OP = 'DELETE' THEN
    INSERT INTO dispatch_outbox_counts (status, kind, n)
      SELECT status, kind, -count(*) FROM old_rows GROUP BY status, kind;
  ELSE
    INSERT INTO dispatch_outbox_counts (status, kind, n)
      SELECT status, kind, sum(d) FROM (
        SELECT status, kind, 1 AS d FROM new_rows
        UNION ALL SELECT status, kind, -1 AS d FROM old_rows
      ) AS moved GROUP BY status, kind HAVING sum(d) <> 0;
  END IF;
  RETURN NULL;
END;
$$;
CREATE TRIGGER dispatch_outbox_count_insert AFTER INSERT ON dispatch_outbox
  REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION dispatch_outbox_count();
CREATE TRIGGER dispatch_outbox_count_delete AFTER DELETE ON dispatch_outbox
  REFERENCING OLD TABLE AS old_rows
  FOR EACH STATEMENT EXECUTE FUNCTION dispatch_outbox_count();
CREATE TRIGGER dispatch_outbox_count_update AFTER UPDATE ON dispatch_outbox
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION dispatch_outbox_count();
CREATE FUNCTION dispatch_outbox_counts_compact() RETURNS void LANGUAGE sql AS $$
  WITH folded AS (DELETE FROM dispatch_outbox_counts RETURNING status, kind, n)
  INSERT INTO dispatch_outbox_counts (status, kind, n)
    SELECT status, kind, sum(n) FROM folded GROUP BY status, kind HAVING sum(n) <> 0;
$$;
"""

# SQLite's rowid, which its SQL orders and pages by (list pages, retention's walk), as an
# identity column of that name: the same statements order and seek the same way on PostgreSQL,
# with the list pages' indexes. Existing rows are numbered in their physical order.
_V6 = """
ALTER TABLE dispatch_outbox ADD COLUMN rowid BIGINT GENERATED ALWAYS AS IDENTITY;
CREATE UNIQUE INDEX idx_dispatch_outbox_rowid ON dispatch_outbox(rowid);
CREATE INDEX idx_dispatch_outbox_status_rowid ON dispatch_outbox(status, rowid);
CREATE INDEX idx_dispatch_outbox_kind_rowid ON dispatch_outbox(kind, rowid);
CREATE INDEX idx_dispatch_outbox_status_kind_rowid ON dispatch_outbox(status, kind, rowid);
"""

MIGRATIONS: tuple[studio_state.Migration, ...] = (
    studio_state.Migration(1, "dispatch_outbox", _V1),
    studio_state.Migration(2, "dispatch_outbox.claimed_by", _V2),
    studio_state.Migration(3, "dispatch_outbox_counts and list indexes", _V3),
    studio_state.Migration(4, "dispatch_outbox wake-ups (NOTIFY)", _V4),
    studio_state.Migration(5, "dispatch_outbox_counts as delta rows", _V5),
    studio_state.Migration(6, "dispatch_outbox.rowid and the list pages' indexes", _V6),
)


async def compact_counts(conn: Any) -> None:
    """Fold ``dispatch_outbox_counts``'s delta rows into one row per (status, kind).

    Safe beside any writer (one statement: the rows it folds are deleted and their sums
    inserted atomically). :func:`studio_outbox.postgres.run_deliverer` calls it when idle.
    """
    await run_in_transaction_async(conn, _compact_steps())


def _compact_steps() -> PgSteps[None]:
    yield Fetch("SELECT dispatch_outbox_counts_compact()")


def _migrate_steps(
    package: str, migrations: Sequence[studio_state.Migration], now: float
) -> PgSteps[list[int]]:
    code_version = len(migrations)
    yield Fetch("SELECT pg_advisory_xact_lock(?)", (MIGRATION_LOCK,))
    yield Script(_MIGRATIONS_TABLE)
    rows = yield Fetch("SELECT version FROM schema_migrations WHERE package = ?", (package,))
    versions = {int(row["version"]) for row in rows}
    if max(versions, default=0) > code_version:
        raise studio_state.SchemaTooNew(package, max(versions), code_version)
    applied: list[int] = []
    for migration in migrations:
        if migration.version in versions:
            continue
        yield Script(migration.sql)
        yield Fetch(
            "INSERT INTO schema_migrations (package, version, applied_at) VALUES (?, ?, ?)",
            (package, migration.version, now),
        )
        applied.append(migration.version)
    return applied


def _refuse_open_transaction(conn: object) -> None:
    if in_transaction(conn):
        raise studio_state.MigrationError("ensure_schema() must not run inside an open transaction")


async def ensure_schema(conn: Any, *, clock: Clock = system_clock) -> None:
    """Create or upgrade the outbox's tables on PostgreSQL (idempotent).

    ``conn`` is a psycopg ``AsyncConnection`` or an asyncpg connection. Applies
    ``status_transitions`` (package ``studio-state``) and the ``studio-outbox`` migrations,
    each recorded in ``schema_migrations`` as on SQLite, each package in one transaction under
    an advisory lock (concurrent callers apply each step once). Raises
    :class:`studio_state.SchemaTooNew` when the database was migrated by a newer studio-outbox
    and :class:`studio_state.MigrationError` when ``conn`` has a transaction open.
    """
    _refuse_open_transaction(conn)
    await run_in_transaction_async(conn, _migrate_steps("studio-state", STATE_MIGRATIONS, clock()))
    await run_in_transaction_async(conn, _migrate_steps(PACKAGE, MIGRATIONS, clock()))


def ensure_schema_sync(conn: psycopg.Connection[Any], *, clock: Clock = system_clock) -> None:
    """:func:`ensure_schema` on a psycopg (sync) ``Connection``."""
    _refuse_open_transaction(conn)
    run_in_transaction_sync(conn, _migrate_steps("studio-state", STATE_MIGRATIONS, clock()))
    run_in_transaction_sync(conn, _migrate_steps(PACKAGE, MIGRATIONS, clock()))
