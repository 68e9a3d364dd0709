"""Migrations 9 to 14: keyset paging indexes, the retry_of index, nodes, the engine wake-ups
(PostgreSQL only: the triggers that ``NOTIFY`` :data:`WAKE_CHANNEL`; empty steps on SQLite,
so both dialects keep one numbering) and the ad-hoc run counts; each in SQLite's and
PostgreSQL's dialects side by side.
"""

from __future__ import annotations

from typing import Final

from studio_state import Migration

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

_V9_KEYSET_PG = """
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

_V10_RETRY_OF_PG = """
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

_V11_NODES_PG = """
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
_V12_WAKE_PG = f"""
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
_V13_SLOT_WAKE_PG = """
CREATE TRIGGER schedule_runs_wake_ended AFTER UPDATE OF status ON schedule_runs
  FOR EACH ROW WHEN (NEW.schedule_id IS NOT NULL AND NEW.chain_depth = 0
                     AND OLD.status IN ('queued', 'running')
                     AND NEW.status NOT IN ('queued', 'running')
                     AND (OLD.status = 'queued' OR OLD.leased_by IS NOT NULL))
  EXECUTE FUNCTION studio_scheduler_wake();
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

# The ad-hoc counts as delta rows: each row trigger appends +1/-1 instead of updating one
# shared row per status, so concurrent enqueues, claims and ends on several nodes never queue
# (or deadlock: a claim moves queued -> running, a requeue running -> queued) on a hot counter
# row. Readers sum ``n``; :func:`~studio_scheduler_core._admission.store.compact_counts` folds
# the deltas (the reaper calls it after each retention pass). PostgreSQL's planner does not
# take ``schedule_id IS NULL`` as fixing the first column of ``idx_schedule_runs_adhoc_page``,
# so it sorted every ad-hoc run for each page: the ad-hoc list gets an index of its own order.
_V14_ADHOC_COUNTS_PG = """
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

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        9, "runs page indexes end in the id: keyset paging", _V9_KEYSET, postgres=_V9_KEYSET_PG
    ),
    Migration(
        10,
        "retry_of index: a retry's attempt found without a scan",
        _V10_RETRY_OF,
        postgres=_V10_RETRY_OF_PG,
    ),
    Migration(
        11,
        "the node that ran a run; the nodes and their API URLs",
        _V11_NODES,
        postgres=_V11_NODES_PG,
    ),
    # PostgreSQL only (SQLite's engine notices other processes' writes through data_version):
    # an empty step here keeps one version numbering for both dialects.
    Migration(12, "engine wake-ups (NOTIFY; PostgreSQL only)", "", postgres=_V12_WAKE_PG),
    Migration(
        13,
        "a fire run by any node's worker wakes the leader when it ends (PostgreSQL only)",
        "",
        postgres=_V13_SLOT_WAKE_PG,
    ),
    Migration(
        14,
        "ad-hoc run counts per status; an index for runs neither scheduled nor ad-hoc",
        _V14_ADHOC_COUNTS,
        postgres=_V14_ADHOC_COUNTS_PG,
    ),
)
"""This group's migrations, each with its SQLite and PostgreSQL text."""
