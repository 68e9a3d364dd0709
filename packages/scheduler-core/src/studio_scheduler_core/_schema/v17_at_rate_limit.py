"""Migration 16: the ``at`` one-shot trigger (its instant as given, ``at``) and the rolling
``rate_limit`` gate (``{"max_fires", "window_sec"}``, JSON); a table rebuild on SQLite (which
cannot alter a CHECK) and plain ``ALTER TABLE`` on PostgreSQL.
"""

from __future__ import annotations

from studio_state import Migration

from .._records.vocab import ACTION_KINDS, OVERLAP_POLICIES

# The trigger types as of this migration, written out: a later type gets its own migration.
_TRIGGER_TYPES_V16 = ("cron", "interval", "github_poll", "at")


def _in(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{value}'" for value in values)


# The rebuild of migration 8 again (see there): foreign keys are off around it, every row is
# copied with its rowid (the list pages' order), the indexes are recreated. Nothing else hangs
# on ``schedules`` on SQLite (its wake-up triggers exist only on PostgreSQL).
_V15_COLUMNS = (
    "id, name, description, enabled, trigger_type, cron_expr, interval_sec, github_repo, "
    "github_filter, github_cursor, poll_interval_sec, action_kind, action_model, action_prompt, "
    "action_agent, action_playbook, action_flow_yaml, action_project, action_cwd, "
    "action_extra_args, action_command, action_command_args, on_success, on_fail, "
    "last_fired_at, next_fire_at, last_evaluated_at, missed_fire_policy, overlap_policy, "
    "max_runs, budget_usd, budget_tokens, project, threshold_config, last_alert_at, "
    "last_healthy_poll_at, poller_consecutive_401, disabled_reason, created_at, updated_at, "
    "github_etag, notify, timezone, timeout_sec, catchup_window_sec, jitter_sec, "
    "pause_on_failure, retry"
)
_V16_AT_RATE_LIMIT = f"""
CREATE TABLE schedules_v16 (
  id                  TEXT PRIMARY KEY,
  name                TEXT NOT NULL UNIQUE,
  description         TEXT,
  enabled             INTEGER NOT NULL DEFAULT 1 CHECK(enabled IN (0, 1)),
  trigger_type        TEXT NOT NULL CHECK(trigger_type IN ({_in(_TRIGGER_TYPES_V16)})),
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
  retry               JSON,
  at                  TEXT,
  rate_limit          JSON
);
INSERT INTO schedules_v16 (rowid, {_V15_COLUMNS}) SELECT rowid, {_V15_COLUMNS} FROM schedules;
DROP TABLE schedules;
ALTER TABLE schedules_v16 RENAME TO schedules;
CREATE INDEX IF NOT EXISTS idx_schedules_due ON schedules(next_fire_at) WHERE enabled = 1;
CREATE INDEX IF NOT EXISTS idx_schedules_github_poll
  ON schedules(trigger_type) WHERE trigger_type = 'github_poll';
CREATE INDEX IF NOT EXISTS idx_schedules_created ON schedules(created_at);
"""

_V16_AT_RATE_LIMIT_PG = f"""
ALTER TABLE schedules DROP CONSTRAINT schedules_trigger_type_check;
ALTER TABLE schedules ADD CONSTRAINT schedules_trigger_type_check
  CHECK(trigger_type IN ({_in(_TRIGGER_TYPES_V16)}));
ALTER TABLE schedules ADD COLUMN at TEXT;
ALTER TABLE schedules ADD COLUMN rate_limit TEXT;
"""

MIGRATION_VERSION = 17
"""This migration's number (the one place it is written)."""

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        MIGRATION_VERSION,
        "the at one-shot trigger and the rate_limit gate",
        _V16_AT_RATE_LIMIT,
        postgres=_V16_AT_RATE_LIMIT_PG,
    ),
)
"""This migration, with its SQLite and PostgreSQL text."""
