"""Migration 16: counters kept as runs end, read by the health verdicts and the stats, and the
``error_class`` of a failed run.

- ``run_activity``: one row per hour (``hour_start``, epoch seconds) of every run — fires,
  completed, failed, timed out, cancelled — read by the activity stats (at most 168 rows).
- ``schedule_counters``: one row per schedule and day (``day_start``): the same counts, the
  duration sum and count and a fixed duration histogram (``d0`` … ``d14``, the bounds are
  :data:`~studio_scheduler_core._records.counters.DURATION_BOUNDS`), read by the 7-day
  figures of a schedule's health (at most 8 rows per schedule).
- ``schedule_health``: one row per schedule: its last top-level run that ended, the failure
  streak, its fires and the usage its runs reported (``spend_missing`` counts ended runs
  that reported none: the spend is partial).
- ``action_spend``: the usage reported per action target (``kind:target``).

They are written in the transaction of the write they count (a fire's commit, a run's
terminal write), so a read never scans runs. Retention prunes hour and day rows older than
the 7-day window; the totals of ``schedule_health`` and ``action_spend`` are kept.
"""

from __future__ import annotations

from studio_state import Migration

VERSION = 16
"""This migration's number (one place: the lead may renumber it)."""

_HISTOGRAM = "".join(f"  d{i} INTEGER NOT NULL DEFAULT 0,\n" for i in range(15))


def _tables(integer: str, real: str) -> str:
    return f"""
ALTER TABLE schedule_runs ADD COLUMN error_class TEXT;
CREATE TABLE IF NOT EXISTS run_activity (
  hour_start {integer} PRIMARY KEY,
  fires      {integer} NOT NULL DEFAULT 0,
  completed  {integer} NOT NULL DEFAULT 0,
  failed     {integer} NOT NULL DEFAULT 0,
  timed_out  {integer} NOT NULL DEFAULT 0,
  cancelled  {integer} NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS schedule_counters (
  schedule_id    TEXT NOT NULL,
  day_start      {integer} NOT NULL,
  fires          {integer} NOT NULL DEFAULT 0,
  completed      {integer} NOT NULL DEFAULT 0,
  failed         {integer} NOT NULL DEFAULT 0,
  timed_out      {integer} NOT NULL DEFAULT 0,
  cancelled      {integer} NOT NULL DEFAULT 0,
  duration_sum   {real} NOT NULL DEFAULT 0,
  duration_count {integer} NOT NULL DEFAULT 0,
{_HISTOGRAM}  PRIMARY KEY (schedule_id, day_start)
);
CREATE INDEX IF NOT EXISTS idx_schedule_counters_day ON schedule_counters(day_start);
CREATE TABLE IF NOT EXISTS schedule_health (
  schedule_id          TEXT PRIMARY KEY,
  last_run_id          TEXT,
  last_status          TEXT,
  last_run_at          {real},
  consecutive_failures {integer} NOT NULL DEFAULT 0,
  fires                {integer} NOT NULL DEFAULT 0,
  last_fire_at         {real},
  ended                {integer} NOT NULL DEFAULT 0,
  spend_usd            {real} NOT NULL DEFAULT 0,
  spend_tokens         {integer} NOT NULL DEFAULT 0,
  spend_missing        {integer} NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS action_spend (
  action        TEXT PRIMARY KEY,
  spend_usd     {real} NOT NULL DEFAULT 0,
  spend_tokens  {integer} NOT NULL DEFAULT 0,
  runs          {integer} NOT NULL DEFAULT 0,
  spend_missing {integer} NOT NULL DEFAULT 0
);
INSERT INTO schedule_health (schedule_id, fires, last_fire_at)
  SELECT s.id, COALESCE((SELECT sum(c.n) FROM schedule_run_counts c
                         WHERE c.schedule_id = s.id AND c.status <> 'skipped'), 0),
         s.last_fired_at
  FROM schedules s;
"""


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        VERSION,
        "counters kept as runs end (activity, per-schedule health, spend); runs' error_class",
        _tables("INTEGER", "REAL"),
        postgres=_tables("BIGINT", "DOUBLE PRECISION"),
    ),
)
"""This group's migrations, each with its SQLite and PostgreSQL text."""
