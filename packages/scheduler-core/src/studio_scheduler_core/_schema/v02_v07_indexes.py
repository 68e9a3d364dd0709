"""Migrations 2 to 7: the ad-hoc queue's index, the github_poll ETag and threshold indexes,
``notify``, per-schedule time zone and deadline, the list pages' indexes and the run counts
kept by triggers; each in SQLite's and PostgreSQL's dialects side by side.
"""

from __future__ import annotations

from studio_state import Migration

# The ad-hoc queue's claim picks the oldest queued row per concurrency_key.
_V2 = """
CREATE INDEX IF NOT EXISTS idx_schedule_runs_queued_key
  ON schedule_runs(concurrency_key, queued_at)
  WHERE status = 'queued' AND concurrency_key IS NOT NULL;
"""

_V2_PG = """
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

_V3_PG = """
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

# Notifications: a schedule's (or an ad-hoc run's own) ``notify`` object (see _notify.py).
_V4 = """
ALTER TABLE schedules ADD COLUMN notify JSON;
ALTER TABLE schedule_runs ADD COLUMN notify JSON;
"""

_V4_PG = """
ALTER TABLE schedules ADD COLUMN notify TEXT;
ALTER TABLE schedule_runs ADD COLUMN notify TEXT;
"""

# Per-schedule time zone (null = the server's) and deadline (null = the deadline setting).
_V5 = """
ALTER TABLE schedules ADD COLUMN timezone TEXT;
ALTER TABLE schedules ADD COLUMN timeout_sec INTEGER;
"""

_V5_PG = """
ALTER TABLE schedules ADD COLUMN timezone TEXT;
ALTER TABLE schedules ADD COLUMN timeout_sec BIGINT;
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

_V6_PAGES_PG = """
DROP INDEX IF EXISTS idx_schedule_runs_schedule;
CREATE INDEX IF NOT EXISTS idx_schedule_runs_schedule_page
  ON schedule_runs(schedule_id, fired_at DESC, created_at DESC, status);
CREATE INDEX IF NOT EXISTS idx_schedules_created ON schedules(created_at, rowid);
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

# SQLite's three row triggers as one PL/pgSQL function: a run leaving (schedule, status)
# decrements that count (the row goes at zero), a run arriving increments its own.
_V7_RUN_COUNTS_PG = """
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

MIGRATIONS: tuple[Migration, ...] = (
    Migration(2, "ad-hoc queue: queued rows by concurrency_key", _V2, postgres=_V2_PG),
    Migration(3, "github_poll ETag column; threshold metric indexes", _V3, postgres=_V3_PG),
    Migration(4, "notify column on schedules and schedule_runs", _V4, postgres=_V4_PG),
    Migration(5, "per-schedule timezone and timeout_sec", _V5, postgres=_V5_PG),
    Migration(
        6,
        "indexes for the runs page and the schedules page order",
        _V6_PAGES,
        postgres=_V6_PAGES_PG,
    ),
    Migration(
        7,
        "run counts per schedule and status; ad-hoc list index",
        _V7_RUN_COUNTS,
        postgres=_V7_RUN_COUNTS_PG,
    ),
)
"""This group's migrations, each with its SQLite and PostgreSQL text."""
