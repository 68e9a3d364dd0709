"""scheduler-core's migrations in PostgreSQL's dialect, version for version (``_schema.py``
pairs each with its SQLite text).

The same tables, columns, constraints and indexes as on SQLite, with these conventions:
``REAL`` timestamps are ``double precision``; SQLite's 64-bit ``INTEGER`` is ``bigint``
(flags included: the SQL compares them with ``= 1``); JSON columns are ``text`` (the stored
bytes are the bytes written); a table whose SQL orders or pages by SQLite's ``rowid``
(``schedules``, ``schedule_runs``, ``invocations``, ``status_transitions``) gets a ``rowid``
identity column with a unique index, so the same statements order and page the same way;
SQLite's triggers are PL/pgSQL trigger functions with the same effect. Migration 8, a table
rebuild on SQLite (which cannot alter a CHECK), is plain ``ALTER TABLE`` here. Migration 12
exists only here (on SQLite it is an empty step, so both dialects keep one numbering): the
triggers that ``NOTIFY`` :data:`WAKE_CHANNEL`. Migration 14's ad-hoc run counts are delta rows
here (one row per status on SQLite, whose writers never run concurrently), and it adds an index
in the ad-hoc list's order that only PostgreSQL's planner needs.
"""

from __future__ import annotations

from typing import Final

from ._records.vocab import (
    ACTION_KINDS,
    INVOCATION_STATUSES,
    OVERLAP_POLICIES,
    RUN_STATUSES,
    SESSION_STATUSES,
    TRIGGER_TYPES,
)


def _in(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{value}'" for value in values)


# ``invocations`` and ``schedule_runs`` reference each other: the run's reference is added once
# both exist. ``status_transitions`` (studio-state's, created first) gets its ``rowid`` here.
_V1 = f"""
CREATE TABLE IF NOT EXISTS schedules (
  id                  TEXT PRIMARY KEY,
  name                TEXT NOT NULL UNIQUE,
  description         TEXT,
  enabled             BIGINT NOT NULL DEFAULT 1 CHECK(enabled IN (0, 1)),
  trigger_type        TEXT NOT NULL CHECK(trigger_type IN ({_in(TRIGGER_TYPES)})),
  cron_expr           TEXT,
  interval_sec        BIGINT,
  github_repo         TEXT,
  github_filter       TEXT,
  github_cursor       TEXT,
  poll_interval_sec   BIGINT,
  action_kind         TEXT NOT NULL CHECK(action_kind IN ({_in(ACTION_KINDS)})),
  action_model        TEXT,
  action_prompt       TEXT,
  action_agent        TEXT,
  action_playbook     TEXT,
  action_flow_yaml    TEXT,
  action_project      TEXT,
  action_cwd          TEXT,
  action_extra_args   TEXT DEFAULT '[]',
  action_command      TEXT,
  action_command_args TEXT DEFAULT '[]',
  on_success          TEXT,
  on_fail             TEXT,
  last_fired_at       DOUBLE PRECISION,
  next_fire_at        DOUBLE PRECISION,
  last_evaluated_at   DOUBLE PRECISION,
  missed_fire_policy  TEXT NOT NULL DEFAULT 'skip'
                      CHECK(missed_fire_policy IN ('skip', 'run_once')),
  overlap_policy      TEXT NOT NULL DEFAULT 'skip'
                      CONSTRAINT schedules_overlap_policy_check
                      CHECK(overlap_policy IN ('skip', 'allow')),
  max_runs            BIGINT CHECK(max_runs IS NULL OR max_runs >= 1),
  budget_usd          DOUBLE PRECISION CHECK(budget_usd IS NULL OR budget_usd > 0),
  budget_tokens       BIGINT CHECK(budget_tokens IS NULL OR budget_tokens >= 1),
  project             TEXT,
  threshold_config    TEXT,
  last_alert_at       DOUBLE PRECISION,
  last_healthy_poll_at DOUBLE PRECISION,
  poller_consecutive_401 BIGINT NOT NULL DEFAULT 0,
  disabled_reason     TEXT,
  created_at          DOUBLE PRECISION NOT NULL,
  updated_at          DOUBLE PRECISION NOT NULL,
  rowid               BIGINT GENERATED ALWAYS AS IDENTITY
);
CREATE UNIQUE INDEX IF NOT EXISTS idx_schedules_rowid ON schedules(rowid);
CREATE INDEX IF NOT EXISTS idx_schedules_due ON schedules(next_fire_at) WHERE enabled = 1;

CREATE TABLE IF NOT EXISTS invocations (
  id                    TEXT PRIMARY KEY,
  schedule_run_id       TEXT,
  skill                 TEXT NOT NULL,
  status                TEXT NOT NULL DEFAULT 'running'
                        CHECK(status IN ({_in(INVOCATION_STATUSES)})),
  prompt                TEXT,
  started_at            DOUBLE PRECISION NOT NULL,
  ended_at              DOUBLE PRECISION,
  status_reason_code    TEXT,
  status_reason_summary TEXT,
  created_at            DOUBLE PRECISION NOT NULL,
  updated_at            DOUBLE PRECISION NOT NULL,
  rowid                 BIGINT GENERATED ALWAYS AS IDENTITY
);
CREATE UNIQUE INDEX IF NOT EXISTS idx_invocations_rowid ON invocations(rowid);

CREATE TABLE IF NOT EXISTS schedule_runs (
  id                    TEXT PRIMARY KEY,
  schedule_id           TEXT REFERENCES schedules(id) ON DELETE CASCADE,
  invocation_id         TEXT REFERENCES invocations(id),
  trigger_context       TEXT NOT NULL,
  action_kind           TEXT NOT NULL,
  action_args           TEXT NOT NULL,
  status                TEXT NOT NULL DEFAULT 'running'
                        CHECK(status IN ({_in(RUN_STATUSES)})),
  exit_code             BIGINT,
  chain_parent_id       TEXT REFERENCES schedule_runs(id) ON DELETE SET NULL,
  chain_depth           BIGINT NOT NULL DEFAULT 0 CHECK(chain_depth >= 0),
  fired_at              DOUBLE PRECISION NOT NULL,
  ended_at              DOUBLE PRECISION,
  error_detail          TEXT,
  created_at            DOUBLE PRECISION NOT NULL,
  updated_at            DOUBLE PRECISION,
  status_reason_code    TEXT,
  status_reason_summary TEXT,
  status_evidence_refs  TEXT,
  queued_at             DOUBLE PRECISION,
  leased_by             TEXT,
  lease_expires_at      DOUBLE PRECISION,
  concurrency_key       TEXT,
  lease_attempts        BIGINT NOT NULL DEFAULT 0,
  required_capabilities TEXT,
  execution_target      TEXT,
  library_ref           TEXT,
  library_content_hash  TEXT,
  child_pid             BIGINT,
  child_started_at      DOUBLE PRECISION,
  rowid                 BIGINT GENERATED ALWAYS AS IDENTITY
);
CREATE UNIQUE INDEX IF NOT EXISTS idx_schedule_runs_rowid ON schedule_runs(rowid);
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

ALTER TABLE invocations ADD CONSTRAINT invocations_schedule_run_id_fkey
  FOREIGN KEY (schedule_run_id) REFERENCES schedule_runs(id) ON DELETE SET NULL
  DEFERRABLE INITIALLY DEFERRED;
CREATE INDEX IF NOT EXISTS idx_invocations_running
  ON invocations(started_at) WHERE status = 'running';
CREATE INDEX IF NOT EXISTS idx_invocations_run ON invocations(schedule_run_id);

CREATE TABLE IF NOT EXISTS sessions (
  id             TEXT PRIMARY KEY,
  invocation_id  TEXT REFERENCES invocations(id) ON DELETE SET NULL,
  status         TEXT NOT NULL CHECK(status IN ({_in(SESSION_STATUSES)})),
  input_tokens   BIGINT CHECK(input_tokens IS NULL OR input_tokens >= 0),
  output_tokens  BIGINT CHECK(output_tokens IS NULL OR output_tokens >= 0),
  total_cost_usd DOUBLE PRECISION CHECK(total_cost_usd IS NULL OR total_cost_usd >= 0),
  started_at     DOUBLE PRECISION,
  ended_at       DOUBLE PRECISION,
  created_at     DOUBLE PRECISION NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_sessions_invocation ON sessions(invocation_id);

ALTER TABLE status_transitions
  ADD COLUMN IF NOT EXISTS rowid BIGINT GENERATED ALWAYS AS IDENTITY;
CREATE UNIQUE INDEX IF NOT EXISTS idx_status_transitions_rowid ON status_transitions(rowid);
"""

_V2 = """
CREATE INDEX IF NOT EXISTS idx_schedule_runs_queued_key
  ON schedule_runs(concurrency_key, queued_at)
  WHERE status = 'queued' AND concurrency_key IS NOT NULL;
"""

_V3 = """
ALTER TABLE schedules ADD COLUMN github_etag TEXT;
CREATE INDEX IF NOT EXISTS idx_schedules_github_poll
  ON schedules(trigger_type) WHERE trigger_type = 'github_poll';
CREATE INDEX IF NOT EXISTS idx_schedule_runs_failed_ended
  ON schedule_runs(ended_at) WHERE status IN ('failed', 'timed_out');
CREATE INDEX IF NOT EXISTS idx_sessions_failed_time
  ON sessions((COALESCE(ended_at, started_at, created_at)))
  WHERE status IN ('failed', 'timed_out');
CREATE INDEX IF NOT EXISTS idx_sessions_time
  ON sessions((COALESCE(ended_at, started_at, created_at)), total_cost_usd, status);
CREATE INDEX IF NOT EXISTS idx_invocations_started ON invocations(started_at);
"""

_V4 = """
ALTER TABLE schedules ADD COLUMN notify TEXT;
ALTER TABLE schedule_runs ADD COLUMN notify TEXT;
"""

_V5 = """
ALTER TABLE schedules ADD COLUMN timezone TEXT;
ALTER TABLE schedules ADD COLUMN timeout_sec BIGINT;
"""

_V6_PAGES = """
DROP INDEX IF EXISTS idx_schedule_runs_schedule;
CREATE INDEX IF NOT EXISTS idx_schedule_runs_schedule_page
  ON schedule_runs(schedule_id, fired_at DESC, created_at DESC, status);
CREATE INDEX IF NOT EXISTS idx_schedules_created ON schedules(created_at, rowid);
"""

# SQLite's three row triggers as one PL/pgSQL function: a run leaving (schedule, status)
# decrements that count (the row goes at zero), a run arriving increments its own.
_V7_RUN_COUNTS = """
CREATE INDEX IF NOT EXISTS idx_schedule_runs_adhoc_page
  ON schedule_runs(schedule_id, queued_at) WHERE queued_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS schedule_run_counts (
  schedule_id TEXT NOT NULL,
  status      TEXT NOT NULL,
  n           BIGINT NOT NULL,
  PRIMARY KEY (schedule_id, status)
);
INSERT INTO schedule_run_counts (schedule_id, status, n)
  SELECT schedule_id, status, count(*) FROM schedule_runs
  WHERE schedule_id IS NOT NULL GROUP BY schedule_id, status;
CREATE FUNCTION schedule_run_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.schedule_id IS NOT NULL THEN
    UPDATE schedule_run_counts SET n = n - 1
      WHERE schedule_id = OLD.schedule_id AND status = OLD.status;
    DELETE FROM schedule_run_counts
      WHERE schedule_id = OLD.schedule_id AND status = OLD.status AND n <= 0;
  END IF;
  IF TG_OP IN ('UPDATE', 'INSERT') AND NEW.schedule_id IS NOT NULL THEN
    INSERT INTO schedule_run_counts (schedule_id, status, n)
      VALUES (NEW.schedule_id, NEW.status, 1)
      ON CONFLICT (schedule_id, status) DO UPDATE SET n = schedule_run_counts.n + 1;
  END IF;
  RETURN NULL;
END;
$$;
CREATE TRIGGER schedule_run_count_insert AFTER INSERT ON schedule_runs
  FOR EACH ROW WHEN (NEW.schedule_id IS NOT NULL) EXECUTE FUNCTION schedule_run_count();
CREATE TRIGGER schedule_run_count_delete AFTER DELETE ON schedule_runs
  FOR EACH ROW WHEN (OLD.schedule_id IS NOT NULL) EXECUTE FUNCTION schedule_run_count();
CREATE TRIGGER schedule_run_count_update AFTER UPDATE OF status, schedule_id ON schedule_runs
  FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status
                     OR OLD.schedule_id IS DISTINCT FROM NEW.schedule_id)
  EXECUTE FUNCTION schedule_run_count();
"""

_V8_POLICIES = f"""
ALTER TABLE schedules DROP CONSTRAINT schedules_overlap_policy_check;
ALTER TABLE schedules ADD CONSTRAINT schedules_overlap_policy_check
  CHECK(overlap_policy IN ({_in(OVERLAP_POLICIES)}));
ALTER TABLE schedules ADD COLUMN catchup_window_sec BIGINT
  CHECK(catchup_window_sec IS NULL OR catchup_window_sec >= 1);
ALTER TABLE schedules ADD COLUMN jitter_sec BIGINT CHECK(jitter_sec IS NULL OR jitter_sec >= 0);
ALTER TABLE schedules ADD COLUMN pause_on_failure BIGINT
  CHECK(pause_on_failure IS NULL OR pause_on_failure IN (0, 1));
ALTER TABLE schedules ADD COLUMN retry TEXT;
ALTER TABLE schedule_runs ADD COLUMN retry_of TEXT;
ALTER TABLE schedule_runs ADD COLUMN attempt BIGINT;
CREATE INDEX IF NOT EXISTS idx_schedule_runs_retry_wait
  ON schedule_runs(queued_at) WHERE status = 'retry_wait';
"""

_V9_KEYSET = """
DROP INDEX IF EXISTS idx_schedule_runs_schedule_page;
CREATE INDEX IF NOT EXISTS idx_schedule_runs_schedule_page
  ON schedule_runs(schedule_id, fired_at, created_at, id, status);
DROP INDEX IF EXISTS idx_schedule_runs_adhoc_page;
CREATE INDEX IF NOT EXISTS idx_schedule_runs_adhoc_page
  ON schedule_runs(schedule_id, queued_at, id) WHERE queued_at IS NOT NULL;
"""

_V10_RETRY_OF = """
CREATE INDEX IF NOT EXISTS idx_schedule_runs_retry_of
  ON schedule_runs(retry_of) WHERE retry_of IS NOT NULL;
"""

_V11_NODES = """
ALTER TABLE schedule_runs ADD COLUMN node_id TEXT;
CREATE TABLE IF NOT EXISTS studio_nodes (
  node_id    TEXT PRIMARY KEY,
  url        TEXT,
  started_at DOUBLE PRECISION NOT NULL,
  seen_at    DOUBLE PRECISION NOT NULL
);
"""

WAKE_CHANNEL: Final = "studio_scheduler"
"""The ``LISTEN`` channel notified (on commit) when a write gives the engines work sooner: a
schedule created, deleted, enabled or due earlier, a run queued (payload: the table's name)."""

# Every writer (a node's API, the CLI, another program) wakes every listening engine when its
# transaction commits; PostgreSQL folds one transaction's identical notifications into one.
# A schedule's due time moving later needs no wake-up (the leader wakes at the earlier time
# and finds nothing), so the evaluator's own writes do not wake every node.
_V12_WAKE = f"""
CREATE FUNCTION studio_scheduler_wake() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('{WAKE_CHANNEL}', TG_TABLE_NAME);
  RETURN NULL;
END;
$$;
CREATE TRIGGER schedules_wake_insert AFTER INSERT ON schedules
  FOR EACH ROW WHEN (NEW.enabled = 1 AND NEW.next_fire_at IS NOT NULL)
  EXECUTE FUNCTION studio_scheduler_wake();
CREATE TRIGGER schedules_wake_update AFTER UPDATE ON schedules
  FOR EACH ROW WHEN (NEW.enabled = 1 AND NEW.next_fire_at IS NOT NULL
                     AND (OLD.enabled <> 1 OR OLD.next_fire_at IS NULL
                          OR NEW.next_fire_at < OLD.next_fire_at))
  EXECUTE FUNCTION studio_scheduler_wake();
CREATE TRIGGER schedules_wake_delete AFTER DELETE ON schedules
  FOR EACH STATEMENT EXECUTE FUNCTION studio_scheduler_wake();
CREATE TRIGGER schedule_runs_wake_insert AFTER INSERT ON schedule_runs
  FOR EACH ROW WHEN (NEW.status = 'queued') EXECUTE FUNCTION studio_scheduler_wake();
CREATE TRIGGER schedule_runs_wake_update AFTER UPDATE OF status ON schedule_runs
  FOR EACH ROW WHEN (NEW.status = 'queued' AND OLD.status <> 'queued')
  EXECUTE FUNCTION studio_scheduler_wake();
"""

# With scheduled fires run by any node's worker, the leader holds each fire's slot until the
# run ends on whichever node ran it: that end (or a cancel while it was still queued) wakes
# the leader, so the slot frees at once rather than at its next tick.
_V13_SLOT_WAKE = """
CREATE TRIGGER schedule_runs_wake_ended AFTER UPDATE OF status ON schedule_runs
  FOR EACH ROW WHEN (NEW.schedule_id IS NOT NULL AND NEW.chain_depth = 0
                     AND OLD.status IN ('queued', 'running')
                     AND NEW.status NOT IN ('queued', 'running')
                     AND (OLD.status = 'queued' OR OLD.leased_by IS NOT NULL))
  EXECUTE FUNCTION studio_scheduler_wake();
"""

# The ad-hoc counts as delta rows: each row trigger appends +1/-1 instead of updating one
# shared row per status, so concurrent enqueues, claims and ends on several nodes never queue
# (or deadlock: a claim moves queued -> running, a requeue running -> queued) on a hot counter
# row. Readers sum ``n``; :func:`~studio_scheduler_core._adhoc.store.compact_counts` folds
# the deltas (the reaper calls it after each retention pass). PostgreSQL's planner does not
# take ``schedule_id IS NULL`` as fixing the first column of ``idx_schedule_runs_adhoc_page``,
# so it sorted every ad-hoc run for each page: the ad-hoc list gets an index of its own order.
_V14_ADHOC_COUNTS = """
CREATE TABLE IF NOT EXISTS adhoc_run_counts (
  status TEXT NOT NULL,
  n      BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_adhoc_run_counts ON adhoc_run_counts(status, n);
INSERT INTO adhoc_run_counts (status, n)
  SELECT status, count(*) FROM schedule_runs
  WHERE schedule_id IS NULL AND queued_at IS NOT NULL GROUP BY status;
CREATE INDEX IF NOT EXISTS idx_schedule_runs_unlisted
  ON schedule_runs(status) WHERE schedule_id IS NULL AND queued_at IS NULL;
CREATE INDEX IF NOT EXISTS idx_schedule_runs_adhoc_order
  ON schedule_runs(queued_at, id) WHERE schedule_id IS NULL AND queued_at IS NOT NULL;
CREATE FUNCTION adhoc_run_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.schedule_id IS NULL AND OLD.queued_at IS NOT NULL
  THEN
    INSERT INTO adhoc_run_counts (status, n) VALUES (OLD.status, -1);
  END IF;
  IF TG_OP IN ('UPDATE', 'INSERT') AND NEW.schedule_id IS NULL AND NEW.queued_at IS NOT NULL
  THEN
    INSERT INTO adhoc_run_counts (status, n) VALUES (NEW.status, 1);
  END IF;
  RETURN NULL;
END;
$$;
CREATE TRIGGER adhoc_run_count_insert AFTER INSERT ON schedule_runs
  FOR EACH ROW WHEN (NEW.schedule_id IS NULL AND NEW.queued_at IS NOT NULL)
  EXECUTE FUNCTION adhoc_run_count();
CREATE TRIGGER adhoc_run_count_delete AFTER DELETE ON schedule_runs
  FOR EACH ROW WHEN (OLD.schedule_id IS NULL AND OLD.queued_at IS NOT NULL)
  EXECUTE FUNCTION adhoc_run_count();
CREATE TRIGGER adhoc_run_count_update
  AFTER UPDATE OF status, schedule_id, queued_at ON schedule_runs
  FOR EACH ROW WHEN ((OLD.schedule_id IS NULL AND OLD.queued_at IS NOT NULL)
                     IS DISTINCT FROM (NEW.schedule_id IS NULL AND NEW.queued_at IS NOT NULL)
                     OR (NEW.schedule_id IS NULL AND NEW.queued_at IS NOT NULL
                         AND OLD.status IS DISTINCT FROM NEW.status))
  EXECUTE FUNCTION adhoc_run_count();
CREATE FUNCTION adhoc_run_counts_compact() RETURNS void LANGUAGE sql AS $$
  WITH folded AS (DELETE FROM adhoc_run_counts RETURNING status, n)
  INSERT INTO adhoc_run_counts (status, n)
    SELECT status, sum(n) FROM folded GROUP BY status HAVING sum(n) <> 0;
$$;
"""

POSTGRES: Final[dict[int, str]] = {
    1: _V1,
    2: _V2,
    3: _V3,
    4: _V4,
    5: _V5,
    6: _V6_PAGES,
    7: _V7_RUN_COUNTS,
    8: _V8_POLICIES,
    9: _V9_KEYSET,
    10: _V10_RETRY_OF,
    11: _V11_NODES,
    12: _V12_WAKE,
    13: _V13_SLOT_WAKE,
    14: _V14_ADHOC_COUNTS,
}
"""Each migration's PostgreSQL text, by version."""
