"""Migration 8: schedule policies (overlap values, catch-up, jitter, retries), a table rebuild
on SQLite (which cannot alter a CHECK) and plain ``ALTER TABLE`` on PostgreSQL.
"""

from __future__ import annotations

from studio_state import Migration

from .._records.vocab import (
    ACTION_KINDS,
    OVERLAP_POLICIES,
    TRIGGER_TYPES,
)


def _in(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{value}'" for value in values)


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

_V8_POLICIES_PG = f"""
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

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        8,
        "schedule policies: overlap values, catch-up, jitter, retries",
        _V8_POLICIES,
        postgres=_V8_POLICIES_PG,
    ),
)
"""This migration, each with its SQLite and PostgreSQL text."""
