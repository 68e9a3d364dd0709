"""Schema migrations of studio-scheduler-core (package name ``studio-scheduler-core``).

Tables: ``schedules`` (trigger, action and policy columns, description, last_evaluated_at,
disabled_reason), ``schedule_runs`` (with child_pid, child_started_at), ``invocations`` and
``sessions``, with the indexes the hot paths need (docs/reference.md lists the statuses).
"""

from __future__ import annotations

from typing import Any, cast

import aiosqlite

import studio_outbox
import studio_state
from studio_state import Migration, fetch_value, migrate

from ._records.vocab import (
    ACTION_KINDS,
    INVOCATION_STATUSES,
    OVERLAP_POLICIES,
    RUN_STATUSES,
    SESSION_STATUSES,
    TRIGGER_TYPES,
)
from ._schema_pg import POSTGRES

PACKAGE = "studio-scheduler-core"


def _in(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{value}'" for value in values)


_V1 = f"""
CREATE TABLE IF NOT EXISTS schedules (
  id                  TEXT PRIMARY KEY,
  name                TEXT NOT NULL UNIQUE,
  description         TEXT,
  enabled             INTEGER NOT NULL DEFAULT 1 CHECK(enabled IN (0, 1)),
  trigger_type        TEXT NOT NULL CHECK(trigger_type IN ({_in(TRIGGER_TYPES)})),
  cron_expr           TEXT,
  interval_sec        INTEGER,
  github_repo         TEXT,
  github_filter       JSON,
  github_cursor       TEXT,
  poll_interval_sec   INTEGER,
  action_kind         TEXT NOT NULL CHECK(action_kind IN ({_in(ACTION_KINDS)})),
  action_model        TEXT,
  action_prompt       TEXT,
  action_agent        TEXT,
  action_playbook     TEXT,
  action_flow_yaml    TEXT,
  action_project      TEXT,
  action_cwd          TEXT,
  action_extra_args   JSON DEFAULT '[]',
  action_command      TEXT,
  action_command_args JSON DEFAULT '[]',
  on_success          JSON,
  on_fail             JSON,
  last_fired_at       REAL,
  next_fire_at        REAL,
  last_evaluated_at   REAL,
  missed_fire_policy  TEXT NOT NULL DEFAULT 'skip'
                      CHECK(missed_fire_policy IN ('skip', 'run_once')),
  overlap_policy      TEXT NOT NULL DEFAULT 'skip' CHECK(overlap_policy IN ('skip', 'allow')),
  max_runs            INTEGER CHECK(max_runs IS NULL OR max_runs >= 1),
  budget_usd          REAL CHECK(budget_usd IS NULL OR budget_usd > 0),
  budget_tokens       INTEGER CHECK(budget_tokens IS NULL OR budget_tokens >= 1),
  project             TEXT,
  threshold_config    JSON,
  last_alert_at       REAL,
  last_healthy_poll_at REAL,
  poller_consecutive_401 INTEGER NOT NULL DEFAULT 0,
  disabled_reason     TEXT,
  created_at          REAL NOT NULL,
  updated_at          REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_schedules_due ON schedules(next_fire_at) WHERE enabled = 1;

CREATE TABLE IF NOT EXISTS schedule_runs (
  id                    TEXT PRIMARY KEY,
  schedule_id           TEXT REFERENCES schedules(id) ON DELETE CASCADE,
  invocation_id         TEXT REFERENCES invocations(id),
  trigger_context       JSON NOT NULL,
  action_kind           TEXT NOT NULL,
  action_args           JSON NOT NULL,
  status                TEXT NOT NULL DEFAULT 'running'
                        CHECK(status IN ({_in(RUN_STATUSES)})),
  exit_code             INTEGER,
  chain_parent_id       TEXT REFERENCES schedule_runs(id) ON DELETE SET NULL,
  chain_depth           INTEGER NOT NULL DEFAULT 0 CHECK(chain_depth >= 0),
  fired_at              REAL NOT NULL,
  ended_at              REAL,
  error_detail          TEXT,
  created_at            REAL NOT NULL,
  updated_at            REAL,
  status_reason_code    TEXT,
  status_reason_summary TEXT,
  status_evidence_refs  JSON,
  queued_at             REAL,
  leased_by             TEXT,
  lease_expires_at      REAL,
  concurrency_key       TEXT,
  lease_attempts        INTEGER NOT NULL DEFAULT 0,
  required_capabilities JSON,
  execution_target      TEXT,
  library_ref           TEXT,
  library_content_hash  TEXT,
  child_pid             INTEGER,
  child_started_at      REAL
);
CREATE INDEX IF NOT EXISTS idx_schedule_runs_schedule
  ON schedule_runs(schedule_id, fired_at DESC);
CREATE INDEX IF NOT EXISTS idx_schedule_runs_running
  ON schedule_runs(status) WHERE status = 'running';
CREATE INDEX IF NOT EXISTS idx_schedule_runs_chain_parent
  ON schedule_runs(chain_parent_id) WHERE chain_parent_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS idx_schedule_runs_invocation
  ON schedule_runs(invocation_id) WHERE invocation_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS idx_schedule_runs_queued
  ON schedule_runs(queued_at) WHERE status = 'queued';

CREATE TABLE IF NOT EXISTS invocations (
  id                    TEXT PRIMARY KEY,
  schedule_run_id       TEXT REFERENCES schedule_runs(id) ON DELETE SET NULL
                        DEFERRABLE INITIALLY DEFERRED,
  skill                 TEXT NOT NULL,
  status                TEXT NOT NULL DEFAULT 'running'
                        CHECK(status IN ({_in(INVOCATION_STATUSES)})),
  prompt                TEXT,
  started_at            REAL NOT NULL,
  ended_at              REAL,
  status_reason_code    TEXT,
  status_reason_summary TEXT,
  created_at            REAL NOT NULL,
  updated_at            REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_invocations_running
  ON invocations(started_at) WHERE status = 'running';
CREATE INDEX IF NOT EXISTS idx_invocations_run ON invocations(schedule_run_id);

CREATE TABLE IF NOT EXISTS sessions (
  id             TEXT PRIMARY KEY,
  invocation_id  TEXT REFERENCES invocations(id) ON DELETE SET NULL,
  status         TEXT NOT NULL CHECK(status IN ({_in(SESSION_STATUSES)})),
  input_tokens   INTEGER CHECK(input_tokens IS NULL OR input_tokens >= 0),
  output_tokens  INTEGER CHECK(output_tokens IS NULL OR output_tokens >= 0),
  total_cost_usd REAL CHECK(total_cost_usd IS NULL OR total_cost_usd >= 0),
  started_at     REAL,
  ended_at       REAL,
  created_at     REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_sessions_invocation ON sessions(invocation_id);
"""

# The ad-hoc queue's claim picks the oldest queued row per concurrency_key.
_V2 = """
CREATE INDEX IF NOT EXISTS idx_schedule_runs_queued_key
  ON schedule_runs(concurrency_key, queued_at)
  WHERE status = 'queued' AND concurrency_key IS NOT NULL;
"""

# github_poll's stored ETag; the indexes the threshold metrics read through (_metrics.py).
_V3 = """
ALTER TABLE schedules ADD COLUMN github_etag TEXT;
CREATE INDEX IF NOT EXISTS idx_schedules_github_poll
  ON schedules(trigger_type) WHERE trigger_type = 'github_poll';
CREATE INDEX IF NOT EXISTS idx_schedule_runs_failed_ended
  ON schedule_runs(ended_at) WHERE status IN ('failed', 'timed_out');
CREATE INDEX IF NOT EXISTS idx_sessions_failed_time
  ON sessions(COALESCE(ended_at, started_at, created_at)) WHERE status IN ('failed', 'timed_out');
CREATE INDEX IF NOT EXISTS idx_sessions_time
  ON sessions(COALESCE(ended_at, started_at, created_at), total_cost_usd, status);
CREATE INDEX IF NOT EXISTS idx_invocations_started ON invocations(started_at);
"""

# Notifications: a schedule's (or an ad-hoc run's own) ``notify`` object (see _notify.py).
_V4 = """
ALTER TABLE schedules ADD COLUMN notify JSON;
ALTER TABLE schedule_runs ADD COLUMN notify JSON;
"""

# Per-schedule time zone (null = the server's) and deadline (null = the deadline setting).
_V5 = """
ALTER TABLE schedules ADD COLUMN timezone TEXT;
ALTER TABLE schedules ADD COLUMN timeout_sec INTEGER;
"""

# Indexes for every ORDER BY a list page uses, so a page costs the same whatever the history:
# a schedule's runs page (newest first; status trails the key so a status filter and the count
# read the index alone) and GET /api/schedules (creation order; the index carries the rowid).
_V6_PAGES = """
DROP INDEX IF EXISTS idx_schedule_runs_schedule;
CREATE INDEX IF NOT EXISTS idx_schedule_runs_schedule_page
  ON schedule_runs(schedule_id, fired_at DESC, created_at DESC, status);
CREATE INDEX IF NOT EXISTS idx_schedules_created ON schedules(created_at);
"""

# Per-schedule run counts kept by triggers, so a runs page's exact ``total`` reads a few
# rows whatever the schedule's history (counting its runs grows with every fire); and the
# ad-hoc run list's order (newest queued first) read from an index instead of sorted per page.
_V7_RUN_COUNTS = """
CREATE INDEX IF NOT EXISTS idx_schedule_runs_adhoc_page
  ON schedule_runs(schedule_id, queued_at) WHERE queued_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS schedule_run_counts (
  schedule_id TEXT NOT NULL,
  status      TEXT NOT NULL,
  n           INTEGER NOT NULL,
  PRIMARY KEY (schedule_id, status)
) WITHOUT ROWID;
INSERT INTO schedule_run_counts (schedule_id, status, n)
  SELECT schedule_id, status, count(*) FROM schedule_runs
  WHERE schedule_id IS NOT NULL GROUP BY schedule_id, status;
CREATE TRIGGER IF NOT EXISTS schedule_run_count_insert AFTER INSERT ON schedule_runs
  WHEN NEW.schedule_id IS NOT NULL
BEGIN
  INSERT INTO schedule_run_counts (schedule_id, status, n) VALUES (NEW.schedule_id, NEW.status, 1)
    ON CONFLICT (schedule_id, status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER IF NOT EXISTS schedule_run_count_delete AFTER DELETE ON schedule_runs
  WHEN OLD.schedule_id IS NOT NULL
BEGIN
  UPDATE schedule_run_counts SET n = n - 1
    WHERE schedule_id = OLD.schedule_id AND status = OLD.status;
  DELETE FROM schedule_run_counts
    WHERE schedule_id = OLD.schedule_id AND status = OLD.status AND n <= 0;
END;
CREATE TRIGGER IF NOT EXISTS schedule_run_count_update
  AFTER UPDATE OF status, schedule_id ON schedule_runs
  WHEN OLD.status IS NOT NEW.status OR OLD.schedule_id IS NOT NEW.schedule_id
BEGIN
  UPDATE schedule_run_counts SET n = n - 1
    WHERE schedule_id = OLD.schedule_id AND status = OLD.status;
  DELETE FROM schedule_run_counts
    WHERE schedule_id = OLD.schedule_id AND status = OLD.status AND n <= 0;
  INSERT INTO schedule_run_counts (schedule_id, status, n)
    SELECT NEW.schedule_id, NEW.status, 1 WHERE NEW.schedule_id IS NOT NULL
    ON CONFLICT (schedule_id, status) DO UPDATE SET n = n + 1;
END;
"""

# Schedule policies. SQLite cannot alter a CHECK, so ``schedules`` is rebuilt to widen
# ``overlap_policy``: new table, every row copied, old one dropped, the new one renamed, its
# indexes recreated. :func:`ensure_schema` turns foreign keys off around it: with them on,
# dropping ``schedules`` would cascade-delete every run. ``schedule_runs`` is not touched
# beyond two added columns, so its run-count triggers and ``schedule_run_counts`` stay.
_V7_COLUMNS = (
    "id, name, description, enabled, trigger_type, cron_expr, interval_sec, github_repo, "
    "github_filter, github_cursor, poll_interval_sec, action_kind, action_model, action_prompt, "
    "action_agent, action_playbook, action_flow_yaml, action_project, action_cwd, "
    "action_extra_args, action_command, action_command_args, on_success, on_fail, "
    "last_fired_at, next_fire_at, last_evaluated_at, missed_fire_policy, overlap_policy, "
    "max_runs, budget_usd, budget_tokens, project, threshold_config, last_alert_at, "
    "last_healthy_poll_at, poller_consecutive_401, disabled_reason, created_at, updated_at, "
    "github_etag, notify, timezone, timeout_sec"
)
_V8_POLICIES = f"""
CREATE TABLE schedules_v8 (
  id                  TEXT PRIMARY KEY,
  name                TEXT NOT NULL UNIQUE,
  description         TEXT,
  enabled             INTEGER NOT NULL DEFAULT 1 CHECK(enabled IN (0, 1)),
  trigger_type        TEXT NOT NULL CHECK(trigger_type IN ({_in(TRIGGER_TYPES)})),
  cron_expr           TEXT,
  interval_sec        INTEGER,
  github_repo         TEXT,
  github_filter       JSON,
  github_cursor       TEXT,
  poll_interval_sec   INTEGER,
  action_kind         TEXT NOT NULL CHECK(action_kind IN ({_in(ACTION_KINDS)})),
  action_model        TEXT,
  action_prompt       TEXT,
  action_agent        TEXT,
  action_playbook     TEXT,
  action_flow_yaml    TEXT,
  action_project      TEXT,
  action_cwd          TEXT,
  action_extra_args   JSON DEFAULT '[]',
  action_command      TEXT,
  action_command_args JSON DEFAULT '[]',
  on_success          JSON,
  on_fail             JSON,
  last_fired_at       REAL,
  next_fire_at        REAL,
  last_evaluated_at   REAL,
  missed_fire_policy  TEXT NOT NULL DEFAULT 'skip'
                      CHECK(missed_fire_policy IN ('skip', 'run_once')),
  overlap_policy      TEXT NOT NULL DEFAULT 'skip'
                      CHECK(overlap_policy IN ({_in(OVERLAP_POLICIES)})),
  max_runs            INTEGER CHECK(max_runs IS NULL OR max_runs >= 1),
  budget_usd          REAL CHECK(budget_usd IS NULL OR budget_usd > 0),
  budget_tokens       INTEGER CHECK(budget_tokens IS NULL OR budget_tokens >= 1),
  project             TEXT,
  threshold_config    JSON,
  last_alert_at       REAL,
  last_healthy_poll_at REAL,
  poller_consecutive_401 INTEGER NOT NULL DEFAULT 0,
  disabled_reason     TEXT,
  created_at          REAL NOT NULL,
  updated_at          REAL NOT NULL,
  github_etag         TEXT,
  notify              JSON,
  timezone            TEXT,
  timeout_sec         INTEGER,
  catchup_window_sec  INTEGER CHECK(catchup_window_sec IS NULL OR catchup_window_sec >= 1),
  jitter_sec          INTEGER CHECK(jitter_sec IS NULL OR jitter_sec >= 0),
  pause_on_failure    INTEGER CHECK(pause_on_failure IS NULL OR pause_on_failure IN (0, 1)),
  retry               JSON
);
INSERT INTO schedules_v8 ({_V7_COLUMNS}) SELECT {_V7_COLUMNS} FROM schedules;
DROP TABLE schedules;
ALTER TABLE schedules_v8 RENAME TO schedules;
CREATE INDEX IF NOT EXISTS idx_schedules_due ON schedules(next_fire_at) WHERE enabled = 1;
CREATE INDEX IF NOT EXISTS idx_schedules_github_poll
  ON schedules(trigger_type) WHERE trigger_type = 'github_poll';
CREATE INDEX IF NOT EXISTS idx_schedules_created ON schedules(created_at);
ALTER TABLE schedule_runs ADD COLUMN retry_of TEXT;
ALTER TABLE schedule_runs ADD COLUMN attempt INTEGER;
CREATE INDEX IF NOT EXISTS idx_schedule_runs_retry_wait
  ON schedule_runs(queued_at) WHERE status = 'retry_wait';
"""

# Keyset paging: each runs page seeks past the previous page's last sort key, so page 1,000
# costs what page 1 does. The sort keys end in the unique id (ties in time are common under an
# injected clock); status trails the schedule page's key so a status filter reads the index.
_V9_KEYSET = """
DROP INDEX IF EXISTS idx_schedule_runs_schedule_page;
CREATE INDEX IF NOT EXISTS idx_schedule_runs_schedule_page
  ON schedule_runs(schedule_id, fired_at, created_at, id, status);
DROP INDEX IF EXISTS idx_schedule_runs_adhoc_page;
CREATE INDEX IF NOT EXISTS idx_schedule_runs_adhoc_page
  ON schedule_runs(schedule_id, queued_at, id) WHERE queued_at IS NOT NULL;
"""

# The attempt a retry retries: retention keeps a run a live retry points to, and asks per batch
# of old runs; without this that question reads the whole table (a full scan per batch). Only
# retry rows carry ``retry_of``, so the index is small.
_V10_RETRY_OF = """
CREATE INDEX IF NOT EXISTS idx_schedule_runs_retry_of
  ON schedule_runs(retry_of) WHERE retry_of IS NOT NULL;
"""

# Several nodes on one database: the node that ran a run keeps its log, so the run names it,
# and each node records the URL its API answers on, for the others to fetch that log from.
_V11_NODES = """
ALTER TABLE schedule_runs ADD COLUMN node_id TEXT;
CREATE TABLE IF NOT EXISTS studio_nodes (
  node_id    TEXT PRIMARY KEY,
  url        TEXT,
  started_at REAL NOT NULL,
  seen_at    REAL NOT NULL
);
"""

# Ad-hoc run counts per status kept by triggers, so the ad-hoc list's exact ``total`` reads a
# few rows whatever the history (counting the runs grows with every run ever queued). The
# update trigger also fires when a row joins or leaves the ad-hoc runs (schedule_id,
# queued_at). Rows that are neither scheduled nor ad-hoc get a partial index: with both
# count tables it makes the count of every run exact without reading the runs.
_V14_ADHOC_COUNTS = """
CREATE TABLE IF NOT EXISTS adhoc_run_counts (
  status TEXT NOT NULL PRIMARY KEY,
  n      INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO adhoc_run_counts (status, n)
  SELECT status, count(*) FROM schedule_runs
  WHERE schedule_id IS NULL AND queued_at IS NOT NULL GROUP BY status;
CREATE INDEX IF NOT EXISTS idx_schedule_runs_unlisted
  ON schedule_runs(status) WHERE schedule_id IS NULL AND queued_at IS NULL;
CREATE TRIGGER IF NOT EXISTS adhoc_run_count_insert AFTER INSERT ON schedule_runs
  WHEN NEW.schedule_id IS NULL AND NEW.queued_at IS NOT NULL
BEGIN
  INSERT INTO adhoc_run_counts (status, n) VALUES (NEW.status, 1)
    ON CONFLICT (status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER IF NOT EXISTS adhoc_run_count_delete AFTER DELETE ON schedule_runs
  WHEN OLD.schedule_id IS NULL AND OLD.queued_at IS NOT NULL
BEGIN
  UPDATE adhoc_run_counts SET n = n - 1 WHERE status = OLD.status;
  DELETE FROM adhoc_run_counts WHERE status = OLD.status AND n <= 0;
END;
CREATE TRIGGER IF NOT EXISTS adhoc_run_count_update
  AFTER UPDATE OF status, schedule_id, queued_at ON schedule_runs
  WHEN (OLD.schedule_id IS NULL AND OLD.queued_at IS NOT NULL)
       IS NOT (NEW.schedule_id IS NULL AND NEW.queued_at IS NOT NULL)
    OR (NEW.schedule_id IS NULL AND NEW.queued_at IS NOT NULL AND OLD.status IS NOT NEW.status)
BEGIN
  UPDATE adhoc_run_counts SET n = n - 1
    WHERE status = OLD.status AND OLD.schedule_id IS NULL AND OLD.queued_at IS NOT NULL;
  DELETE FROM adhoc_run_counts WHERE status = OLD.status AND n <= 0;
  INSERT INTO adhoc_run_counts (status, n)
    SELECT NEW.status, 1 WHERE NEW.schedule_id IS NULL AND NEW.queued_at IS NOT NULL
    ON CONFLICT (status) DO UPDATE SET n = n + 1;
END;
"""

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "schedules, schedule_runs, invocations, sessions", _V1, postgres=POSTGRES[1]),
    Migration(2, "ad-hoc queue: queued rows by concurrency_key", _V2, postgres=POSTGRES[2]),
    Migration(3, "github_poll ETag column; threshold metric indexes", _V3, postgres=POSTGRES[3]),
    Migration(4, "notify column on schedules and schedule_runs", _V4, postgres=POSTGRES[4]),
    Migration(5, "per-schedule timezone and timeout_sec", _V5, postgres=POSTGRES[5]),
    Migration(
        6, "indexes for the runs page and the schedules page order", _V6_PAGES, postgres=POSTGRES[6]
    ),
    Migration(
        7,
        "run counts per schedule and status; ad-hoc list index",
        _V7_RUN_COUNTS,
        postgres=POSTGRES[7],
    ),
    Migration(
        8,
        "schedule policies: overlap values, catch-up, jitter, retries",
        _V8_POLICIES,
        postgres=POSTGRES[8],
    ),
    Migration(
        9, "runs page indexes end in the id: keyset paging", _V9_KEYSET, postgres=POSTGRES[9]
    ),
    Migration(
        10,
        "retry_of index: a retry's attempt found without a scan",
        _V10_RETRY_OF,
        postgres=POSTGRES[10],
    ),
    Migration(
        11,
        "the node that ran a run; the nodes and their API URLs",
        _V11_NODES,
        postgres=POSTGRES[11],
    ),
    # PostgreSQL only (SQLite's engine notices other processes' writes through data_version):
    # an empty step here keeps one version numbering for both dialects.
    Migration(12, "engine wake-ups (NOTIFY; PostgreSQL only)", "", postgres=POSTGRES[12]),
    Migration(
        13,
        "a fire run by any node's worker wakes the leader when it ends (PostgreSQL only)",
        "",
        postgres=POSTGRES[13],
    ),
    Migration(
        14,
        "ad-hoc run counts per status; an index for runs neither scheduled nor ad-hoc",
        _V14_ADHOC_COUNTS,
        postgres=POSTGRES[14],
    ),
)


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
