"""Migration 1: the tables (``schedules``, ``schedule_runs``, ``invocations``, ``sessions``)
and the indexes the hot paths need, in SQLite's and PostgreSQL's dialects side by side.
"""

from __future__ import annotations

from studio_state import Migration

from .._records.vocab import (
    ACTION_KINDS,
    INVOCATION_STATUSES,
    RUN_STATUSES,
    SESSION_STATUSES,
    TRIGGER_TYPES,
)


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

# ``invocations`` and ``schedule_runs`` reference each other: the run's reference is added once
# both exist. ``status_transitions`` (studio-state's, created first) gets its ``rowid`` here.
_V1_PG = f"""
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

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "schedules, schedule_runs, invocations, sessions", _V1, postgres=_V1_PG),
)
"""This migration, each with its SQLite and PostgreSQL text."""
