"""The outbox's producer side on PostgreSQL (psycopg 3, async).

The SQL steps and the validation are the SQLite path's own (:mod:`._enqueue`): this module only
drives them on a ``psycopg.AsyncConnection`` and holds the PostgreSQL dialect of the schema.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row

import studio_state
from studio_state import Clock, system_clock

from ._constants import DEFAULT_ACTOR, DEFAULT_MAX_ATTEMPTS
from ._drive import ExecMany, Step, Steps
from ._enqueue import insert_steps, validate, validate_items
from ._schema import PACKAGE

T = TypeVar("T")
Connection = psycopg.AsyncConnection[Any]

# One key for every Studio migration on a database: concurrent ensure_schema calls serialise.
_MIGRATION_LOCK = 0x5354_5544_494F  # "STUDIO"

_MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
  package    TEXT NOT NULL,
  version    INTEGER NOT NULL,
  applied_at DOUBLE PRECISION NOT NULL,
  PRIMARY KEY (package, version)
)
"""

STATE_MIGRATIONS: tuple[studio_state.Migration, ...] = (
    studio_state.Migration(
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
          created_at      DOUBLE PRECISION NOT NULL
        );
        CREATE INDEX IF NOT EXISTS idx_status_transitions_entity
          ON status_transitions(entity_type, entity_id, created_at);
        """,
    ),
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

MIGRATIONS: tuple[studio_state.Migration, ...] = (
    studio_state.Migration(1, "dispatch_outbox", _V1),
    studio_state.Migration(2, "dispatch_outbox.claimed_by", _V2),
    studio_state.Migration(3, "dispatch_outbox_counts and list indexes", _V3),
)


def _sql(sql: str) -> str:
    # The shared steps are written with qmark parameters; none of them holds a literal % or ?.
    return sql.replace("?", "%s")


async def _step(conn: Connection, step: Step) -> list[dict[str, Any]] | None:
    async with conn.cursor(row_factory=dict_row) as cursor:
        if isinstance(step, ExecMany):
            await cursor.executemany(_sql(step.sql), step.params)
            return None
        await cursor.execute(_sql(step.sql), step.params)
        return await cursor.fetchall() if cursor.description else []


async def _run(conn: Connection, steps: Steps[T]) -> T:
    result: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = steps.throw(error) if error is not None else steps.send(result)
        except StopIteration as stop:
            value: T = stop.value
            return value
        try:
            result, error = await _step(conn, step), None
        except psycopg.Error as exc:
            result, error = None, exc


async def _in_transaction(conn: Connection, steps: Steps[T]) -> T:
    # Join the producer's open transaction (never commit it); otherwise run our own.
    if conn.info.transaction_status == TransactionStatus.INTRANS:
        return await _run(conn, steps)
    async with conn.transaction():
        return await _run(conn, steps)


async def _migrate(
    conn: Connection, package: str, migrations: Sequence[studio_state.Migration]
) -> list[int]:
    code_version = len(migrations)
    applied: list[int] = []
    async with conn.transaction(), conn.cursor() as cursor:
        await cursor.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        await cursor.execute(_MIGRATIONS_TABLE)
        await cursor.execute("SELECT version FROM schema_migrations WHERE package = %s", (package,))
        versions = {row[0] for row in await cursor.fetchall()}
        if max(versions, default=0) > code_version:
            raise studio_state.SchemaTooNew(package, max(versions), code_version)
        for migration in migrations:
            if migration.version in versions:
                continue
            await cursor.execute(migration.sql.encode())
            await cursor.execute(
                "INSERT INTO schema_migrations (package, version, applied_at) VALUES (%s, %s, %s)",
                (package, migration.version, time.time()),
            )
            applied.append(migration.version)
    return applied


async def ensure_schema(conn: Connection) -> None:
    """Create or upgrade the outbox's tables on PostgreSQL (idempotent).

    Applies ``status_transitions`` (package ``studio-state``) and the ``studio-outbox``
    migrations, each recorded in ``schema_migrations`` as on SQLite, in one transaction under
    an advisory lock (concurrent callers apply each step once). Raises
    :class:`studio_state.SchemaTooNew` when the database was migrated by a newer studio-outbox
    and :class:`studio_state.MigrationError` when ``conn`` has a transaction open.
    """
    if conn.info.transaction_status != TransactionStatus.IDLE:
        raise studio_state.MigrationError("ensure_schema() must not run inside an open transaction")
    await _migrate(conn, "studio-state", STATE_MIGRATIONS)
    await _migrate(conn, PACKAGE, MIGRATIONS)


async def enqueue_dispatch(
    conn: Connection,
    *,
    kind: str,
    deliver_to: str,
    body: dict[str, Any] | None = None,
    dedup_key: str | None = None,
    ack_required: bool = False,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    expires_at: float | None = None,
    session_id: str | None = None,
    schedule_run_id: str | None = None,
    clock: Clock = system_clock,
    actor: str | None = None,
) -> str:
    """Add a ``pending`` dispatch on PostgreSQL and return its id.

    When ``conn`` has a transaction open (the producer's own, ``INTRANS``), the row and its
    ``dispatch.pending.enqueued`` transition are written into it and commit or roll back with
    the producer's change; otherwise they commit in a transaction of their own. A
    ``dedup_key`` that already exists returns the existing row's id and writes nothing, also
    when another connection enqueues the same key at the same moment (the second waits for the
    first to commit). Bad arguments raise :class:`InvalidDispatch` before anything is written.
    """
    row = validate(
        kind=kind,
        deliver_to=deliver_to,
        body=body,
        dedup_key=dedup_key,
        ack_required=ack_required,
        max_attempts=max_attempts,
        expires_at=expires_at,
        session_id=session_id,
        schedule_run_id=schedule_run_id,
    )
    ids = await _in_transaction(conn, insert_steps([row], clock(), actor or DEFAULT_ACTOR))
    return ids[0]


async def enqueue_many(
    conn: Connection,
    items: Iterable[Mapping[str, Any]],
    *,
    clock: Clock = system_clock,
    actor: str | None = None,
) -> list[str]:
    """Enqueue several dispatches in one transaction on PostgreSQL; ids in order.

    The same rules as :func:`studio_outbox.enqueue_many`: every item is validated first
    (fields prefixed ``items[i].``), and dedup applies across the database and the batch.
    """
    rows = validate_items(items)
    if not rows:
        return []
    return await _in_transaction(conn, insert_steps(rows, clock(), actor or DEFAULT_ACTOR))
