"""The ``dispatch_outbox`` table and its migrations (package ``studio-outbox``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiosqlite

import studio_state

from ._exceptions import InvalidArgument

PACKAGE = "studio-outbox"

# session_id and schedule_run_id are soft references (no FOREIGN KEY): a standalone producer's
# database has no Studio tables.
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

# Who holds a claim: a lapsed lease is only taken over from a sender that is gone.
_V2 = """
ALTER TABLE dispatch_outbox ADD COLUMN claimed_by TEXT;
"""

# Counts per (status, kind), kept by triggers in the same transaction as every change, so
# totals and the backlog cost the same however much delivered/acked history the table holds;
# and an index for every order a list page uses (rowid within status, kind, or both).
_V3 = """
CREATE TABLE dispatch_outbox_counts (
  status TEXT NOT NULL,
  kind   TEXT NOT NULL,
  n      INTEGER NOT NULL,
  PRIMARY KEY (status, kind)
) WITHOUT ROWID;
INSERT INTO dispatch_outbox_counts (status, kind, n)
  SELECT status, kind, count(*) FROM dispatch_outbox GROUP BY status, kind;
CREATE TRIGGER dispatch_outbox_count_insert AFTER INSERT ON dispatch_outbox
BEGIN
  INSERT INTO dispatch_outbox_counts (status, kind, n) VALUES (NEW.status, NEW.kind, 1)
    ON CONFLICT (status, kind) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER dispatch_outbox_count_delete AFTER DELETE ON dispatch_outbox
BEGIN
  UPDATE dispatch_outbox_counts SET n = n - 1 WHERE status = OLD.status AND kind = OLD.kind;
  DELETE FROM dispatch_outbox_counts WHERE status = OLD.status AND kind = OLD.kind AND n <= 0;
END;
CREATE TRIGGER dispatch_outbox_count_update AFTER UPDATE OF status, kind ON dispatch_outbox
  WHEN OLD.status IS NOT NEW.status OR OLD.kind IS NOT NEW.kind
BEGIN
  UPDATE dispatch_outbox_counts SET n = n - 1 WHERE status = OLD.status AND kind = OLD.kind;
  DELETE FROM dispatch_outbox_counts WHERE status = OLD.status AND kind = OLD.kind AND n <= 0;
  INSERT INTO dispatch_outbox_counts (status, kind, n) VALUES (NEW.status, NEW.kind, 1)
    ON CONFLICT (status, kind) DO UPDATE SET n = n + 1;
END;
CREATE INDEX idx_dispatch_outbox_kind ON dispatch_outbox(kind);
CREATE INDEX idx_dispatch_outbox_status_kind ON dispatch_outbox(status, kind);
"""

MIGRATIONS: tuple[studio_state.Migration, ...] = (
    studio_state.Migration(1, "dispatch_outbox", _V1),
    studio_state.Migration(2, "dispatch_outbox.claimed_by", _V2),
    studio_state.Migration(3, "dispatch_outbox_counts and list indexes", _V3),
)

DEFAULT_SYNCHRONOUS = studio_state.DEFAULT_SYNCHRONOUS


def check_synchronous(value: object) -> str:
    """``full`` or ``normal`` (any case), else :class:`InvalidArgument` naming ``synchronous``."""
    try:
        return studio_state.check_synchronous(value)  # type: ignore[arg-type]
    except studio_state.InvalidSetting:
        raise InvalidArgument("synchronous", f"must be 'full' or 'normal', got {value!r}") from None


def synchronous_pragma(value: object) -> str:
    """The ``PRAGMA synchronous`` statement for a checked ``synchronous=`` value."""
    return f"PRAGMA synchronous={check_synchronous(value).upper()}"


async def ensure_schema(conn: aiosqlite.Connection, *, synchronous: str | None = None) -> None:
    """Create or upgrade the outbox's tables (idempotent).

    Applies studio-state's schema (``status_transitions``) first, then the ``studio-outbox``
    migrations (during which ``conn`` returns dict rows; its ``row_factory`` is restored
    afterwards). ``synchronous`` (``"full"`` or ``"normal"``) sets the connection's durability
    first; None keeps what the connection was opened with (:func:`studio_state.connect` and
    :func:`studio_outbox.connect` open with ``full``). Raises :class:`InvalidArgument` for
    another ``synchronous`` value and :class:`studio_state.SchemaTooNew` when the database was
    migrated by a newer studio-outbox.

    On a PostgreSQL connection from :func:`studio_state.connect` (a ``postgresql://`` URL) this
    applies the PostgreSQL schema of :mod:`studio_outbox.postgres` instead; ``synchronous`` is
    checked and otherwise left to the server's ``synchronous_commit``.
    """
    if studio_state.backend_of(conn) == "postgresql":
        # A studio-state connection on PostgreSQL: the PostgreSQL schema (its own migrations,
        # triggers and NOTIFY), applied on the connection's own psycopg handle.
        if synchronous is not None:
            check_synchronous(synchronous)
        from ._pg._schema import ensure_schema_sync as ensure_postgres_schema

        await studio_state.run_sync(conn, lambda db: ensure_postgres_schema(db.raw))  # type: ignore[attr-defined]
        return
    if synchronous is not None:
        await conn.execute(synchronous_pragma(synchronous))
    # The migration runner reads rows by column name: give it dict rows for the duration of
    # the migration only, whatever the caller's connection returns otherwise.
    factory = conn.row_factory
    conn.row_factory = studio_state.dict_row_factory  # type: ignore[assignment]
    try:
        await studio_state.ensure_schema(conn)
        await studio_state.migrate(conn, PACKAGE, MIGRATIONS)
    finally:
        conn.row_factory = factory


@asynccontextmanager
async def connect(
    path: str | Path, *, synchronous: str = DEFAULT_SYNCHRONOUS
) -> AsyncIterator[aiosqlite.Connection]:
    """Open ``path`` with Studio's settings and the outbox schema, as an async context manager.

    ``synchronous="full"`` (the default) makes every acknowledged enqueue survive power loss;
    ``"normal"`` trades that for fewer fsyncs (the last commits may be lost on power loss).
    Another value raises :class:`InvalidArgument` before the file is touched. The connection
    is closed on exit.
    """
    mode = check_synchronous(synchronous)
    async with studio_state.connect(path, synchronous=mode) as conn:
        await ensure_schema(conn)
        yield conn
