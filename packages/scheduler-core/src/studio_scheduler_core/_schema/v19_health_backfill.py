"""Migration 19: every schedule has its health row from creation, the largest spenders are
read from an index, and the counters take in the runs that ended before migration 16.

- ``schedule_health`` gets a row for each schedule (triggers add it as a schedule is created
  and delete it with the schedule), so a health read costs the same whether or not a
  schedule has run.
- Each health row keeps the 7-day sums (``w_completed``, ``w_failed``, ``w_timed_out``,
  ``w_d0`` … ``w_d14``) of its day rows as of ``week_day``, the day a run of it last ended
  (re-summed in that terminal write's transaction, and by the retention pass on a new day):
  a health read on that day reads no day rows.
- ``idx_schedule_health_spend`` orders the health rows by spend: the top spenders are the
  index's first rows.
- The runs that ended before migration 16 was applied (its ``schema_migrations.applied_at``)
  were never counted: this one-time scan adds them to the hour and day rows (fires by their
  fire time, ends by their end time, durations into the histogram), to their schedule's
  health row (ended runs, reported usage; the last top-level run and the failure streak when
  none ended since) and to the spend per action target, and gives the failed ones their
  ``error_class``. The fires migration 16 seeded each health row with (what ``max_runs``
  counts, so ``remaining_runs``) counted the follow-ups and retries of those runs too: they
  are taken back out, so the count is of top-level fires as each fire's commit counts them.
  On a database created at this version there is nothing to add.
"""

from __future__ import annotations

from studio_state import Migration

from .._records.counters import DURATION_BOUNDS, HOUR_SECONDS
from .._records.vocab import DAY_SECONDS

VERSION = 19
"""This migration's number (one place: the lead may renumber it)."""

_CUT = (
    "(SELECT applied_at FROM schema_migrations "
    "WHERE package = 'studio-scheduler-core' AND version = 16)"
)
_ENDED = "('completed', 'failed', 'timed_out', 'cancelled')"
_FIRED = "('completed', 'failed', 'timed_out', 'cancelled', 'running')"


def _histogram(duration: str) -> str:
    parts = []
    low: float | None = None
    for index, bound in enumerate(DURATION_BOUNDS):
        last = index == len(DURATION_BOUNDS) - 1
        above = f"{duration} > {low}" if low is not None else "1 = 1"
        below = "1 = 1" if last else f"{duration} <= {bound}"
        parts.append(f"sum(CASE WHEN {above} AND {below} THEN 1 ELSE 0 END) AS d{index}")
        low = bound
    return ",\n    ".join(parts)


def _columns() -> str:
    return ", ".join(f"d{i}" for i in range(len(DURATION_BOUNDS)))


def _adds(table: str, columns: list[str]) -> str:
    return ", ".join(f"{c} = {table}.{c} + excluded.{c}" for c in columns)


def _backfill(floor: str, greatest: str) -> str:
    """The text of the backfill; ``floor`` formats ``(value, width)`` as the start of its
    bucket (an integer), ``greatest`` formats ``(a, b)`` as the larger."""
    duration = greatest.format(a="COALESCE(r.ended_at - r.fired_at, 0)", b="0")
    hour_end = floor.format(value="r.ended_at", width=HOUR_SECONDS)
    hour_fire = floor.format(value="r.fired_at", width=HOUR_SECONDS)
    day_end = floor.format(value="r.ended_at", width=DAY_SECONDS)
    day_fire = floor.format(value="r.fired_at", width=DAY_SECONDS)
    statuses = ("completed", "failed", "timed_out", "cancelled")
    counts = ", ".join(
        f"sum(CASE WHEN r.status = '{s}' THEN 1 ELSE 0 END) AS {s}" for s in statuses
    )
    hist = _columns()
    day_cols = [*statuses, "duration_sum", "duration_count", *hist.split(", ")]
    target = (
        "CASE s.action_kind WHEN 'command' THEN s.action_command "
        "WHEN 'agent' THEN s.action_agent WHEN 'play' THEN s.action_playbook END"
    )
    action_key = (
        "CASE WHEN r.schedule_id IS NULL THEN r.action_kind || ':adhoc' "
        "WHEN s.id IS NULL THEN r.action_kind "
        f"WHEN COALESCE({target}, '') = '' THEN s.action_kind "
        f"ELSE s.action_kind || ':' || {target} END"
    )
    usage = (
        "LEFT JOIN (SELECT invocation_id, count(*) AS n, COALESCE(sum(total_cost_usd), 0) AS usd, "
        "COALESCE(sum(COALESCE(input_tokens, 0) + COALESCE(output_tokens, 0)), 0) AS tokens "
        "FROM sessions WHERE invocation_id IS NOT NULL GROUP BY invocation_id) u "
        "ON u.invocation_id = r.invocation_id"
    )
    seeded = (
        "SELECT count(*) FROM schedule_runs r WHERE r.schedule_id = schedule_health.schedule_id "
        f"AND r.created_at < {_CUT} AND r.status <> 'skipped' "
        "AND (r.chain_depth > 0 OR r.retry_of IS NOT NULL)"
    )
    old = f"r.ended_at IS NOT NULL AND r.ended_at < {_CUT} AND r.status IN {_ENDED}"
    top = "r.chain_parent_id IS NULL"
    return f"""
INSERT INTO run_activity (hour_start, {", ".join(statuses)})
  SELECT {hour_end}, {counts}
  FROM schedule_runs r WHERE {old} GROUP BY {hour_end}
  ON CONFLICT (hour_start) DO UPDATE SET {_adds("run_activity", list(statuses))};
INSERT INTO run_activity (hour_start, fires)
  SELECT {hour_fire}, count(*) FROM schedule_runs r
  WHERE r.fired_at IS NOT NULL AND r.fired_at < {_CUT} AND r.status IN {_FIRED}
  GROUP BY {hour_fire}
  ON CONFLICT (hour_start) DO UPDATE SET fires = run_activity.fires + excluded.fires;
INSERT INTO schedule_counters (schedule_id, day_start, {", ".join(day_cols)})
  SELECT r.schedule_id, {day_end}, {counts},
    sum({duration}) AS duration_sum, count(*) AS duration_count,
    {_histogram(duration)}
  FROM schedule_runs r WHERE r.schedule_id IS NOT NULL AND {old}
  GROUP BY r.schedule_id, {day_end}
  ON CONFLICT (schedule_id, day_start) DO UPDATE SET {_adds("schedule_counters", day_cols)};
INSERT INTO schedule_counters (schedule_id, day_start, fires)
  SELECT r.schedule_id, {day_fire}, count(*) FROM schedule_runs r
  WHERE r.schedule_id IS NOT NULL AND r.fired_at IS NOT NULL AND r.fired_at < {_CUT}
    AND r.status IN {_FIRED}
  GROUP BY r.schedule_id, {day_fire}
  ON CONFLICT (schedule_id, day_start) DO UPDATE SET
    fires = schedule_counters.fires + excluded.fires;
UPDATE schedule_health SET ended = schedule_health.ended + o.n,
  spend_usd = schedule_health.spend_usd + o.usd,
  spend_tokens = schedule_health.spend_tokens + o.tokens,
  spend_missing = schedule_health.spend_missing + o.missing
FROM (
  SELECT r.schedule_id, count(*) AS n, COALESCE(sum(u.usd), 0) AS usd,
    COALESCE(sum(u.tokens), 0) AS tokens,
    sum(CASE WHEN u.n IS NULL THEN 1 ELSE 0 END) AS missing
  FROM schedule_runs r {usage}
  WHERE r.schedule_id IS NOT NULL AND {old} GROUP BY r.schedule_id
) o WHERE o.schedule_id = schedule_health.schedule_id;
UPDATE schedule_health SET
  consecutive_failures = schedule_health.consecutive_failures + (
    SELECT count(*) FROM schedule_runs r
    WHERE r.schedule_id = schedule_health.schedule_id AND {top} AND {old}
      AND r.status IN ('failed', 'timed_out')
      AND r.ended_at > COALESCE((
        SELECT max(c.ended_at) FROM schedule_runs c
        WHERE c.schedule_id = r.schedule_id AND c.chain_parent_id IS NULL
          AND c.status = 'completed' AND c.ended_at < {_CUT}), 0))
WHERE NOT EXISTS (
  SELECT 1 FROM schedule_runs c WHERE c.schedule_id = schedule_health.schedule_id
    AND c.chain_parent_id IS NULL AND c.status = 'completed' AND c.ended_at >= {_CUT});
UPDATE schedule_health SET last_run_id = o.id, last_status = o.status, last_run_at = o.ended_at
FROM (
  SELECT r.schedule_id, r.id, r.status, r.ended_at FROM schedule_runs r
  WHERE {top} AND {old} AND NOT EXISTS (
    SELECT 1 FROM schedule_runs n WHERE n.schedule_id = r.schedule_id
      AND n.chain_parent_id IS NULL AND n.status IN {_ENDED} AND n.ended_at < {_CUT}
      AND (n.ended_at > r.ended_at OR (n.ended_at = r.ended_at AND n.id > r.id)))
) o WHERE o.schedule_id = schedule_health.schedule_id AND schedule_health.last_run_id IS NULL;
INSERT INTO action_spend (action, spend_usd, spend_tokens, runs, spend_missing)
  SELECT {action_key}, COALESCE(sum(u.usd), 0), COALESCE(sum(u.tokens), 0), count(*),
    sum(CASE WHEN u.n IS NULL THEN 1 ELSE 0 END)
  FROM schedule_runs r LEFT JOIN schedules s ON s.id = r.schedule_id {usage}
  WHERE {old} GROUP BY {action_key}
  ON CONFLICT (action) DO UPDATE SET
    {_adds("action_spend", ["spend_usd", "spend_tokens", "runs", "spend_missing"])};
UPDATE schedule_health SET fires = CASE WHEN schedule_health.fires > ({seeded})
  THEN schedule_health.fires - ({seeded}) ELSE 0 END
WHERE EXISTS (
  SELECT 1 FROM schedule_runs r WHERE r.schedule_id = schedule_health.schedule_id
    AND r.created_at < {_CUT} AND r.status <> 'skipped'
    AND (r.chain_depth > 0 OR r.retry_of IS NOT NULL));
UPDATE schedule_runs SET error_class = CASE
  WHEN status IN ('timed_out') OR status_reason_code LIKE 'run.timed!_out%' ESCAPE '!'
    THEN 'timeout'
  WHEN status_reason_code IN ('run.failed.node_lost', 'run.failed.daemon_restart',
    'run.failed.lease_exhausted') THEN 'node_lost'
  WHEN status_reason_code = 'run.failed.missing_cwd' THEN 'not_found'
  WHEN status_reason_code IN ('run.failed.spawn_error', 'run.failed.invalid_action') THEN CASE
    WHEN lower(COALESCE(status_reason_summary, '')) LIKE '%permission%'
      OR lower(COALESCE(status_reason_summary, '')) LIKE '%eacces%' THEN 'permission'
    WHEN lower(COALESCE(status_reason_summary, '')) LIKE '%no such file%'
      OR lower(COALESCE(status_reason_summary, '')) LIKE '%not found%'
      OR lower(COALESCE(status_reason_summary, '')) LIKE '%enoent%' THEN 'not_found'
    ELSE 'spawn_failed' END
  WHEN status_reason_code = 'run.failed.exit_nonzero' AND exit_code IS NOT NULL THEN CASE
    WHEN exit_code < 0 OR exit_code IN (129, 130, 137, 143) THEN 'killed'
    WHEN exit_code = 126 THEN 'permission'
    WHEN exit_code = 127 THEN 'not_found'
    ELSE 'nonzero_exit' END
  ELSE 'unclassified' END
WHERE status IN ('failed', 'timed_out') AND error_class IS NULL;
"""


def _rows(integer: str) -> str:
    week = "".join(
        f"ALTER TABLE schedule_health ADD COLUMN w_{c} {integer} NOT NULL DEFAULT 0;\n"
        for c in ("completed", "failed", "timed_out", *(f"d{i}" for i in range(15)))
    )
    return f"""
ALTER TABLE schedule_health ADD COLUMN week_day {integer};
{week}INSERT INTO schedule_health (schedule_id) SELECT id FROM schedules WHERE true
  ON CONFLICT (schedule_id) DO NOTHING;
CREATE INDEX IF NOT EXISTS idx_schedule_health_spend
  ON schedule_health(spend_usd DESC, spend_tokens DESC, schedule_id, ended);
"""


_TRIGGERS = """
CREATE TRIGGER IF NOT EXISTS schedule_health_create AFTER INSERT ON schedules
BEGIN
  INSERT INTO schedule_health (schedule_id) VALUES (NEW.id) ON CONFLICT (schedule_id) DO NOTHING;
END;
CREATE TRIGGER IF NOT EXISTS schedule_health_drop AFTER DELETE ON schedules
BEGIN
  DELETE FROM schedule_health WHERE schedule_id = OLD.id;
END;
"""

_TRIGGERS_PG = """
CREATE FUNCTION schedule_health_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO schedule_health (schedule_id) VALUES (NEW.id)
      ON CONFLICT (schedule_id) DO NOTHING;
  ELSE
    DELETE FROM schedule_health WHERE schedule_id = OLD.id;
  END IF;
  RETURN NULL;
END;
$$;
CREATE TRIGGER schedule_health_create AFTER INSERT ON schedules
  FOR EACH ROW EXECUTE FUNCTION schedule_health_row();
CREATE TRIGGER schedule_health_drop AFTER DELETE ON schedules
  FOR EACH ROW EXECUTE FUNCTION schedule_health_row();
"""

_SQLITE = (
    _rows("INTEGER")
    + _TRIGGERS
    + _backfill("CAST({value} / {width} AS INTEGER) * {width}", "max({a}, {b})")
)
_POSTGRES = (
    _rows("BIGINT")
    + _TRIGGERS_PG
    + _backfill("CAST(floor({value} / {width}) AS BIGINT) * {width}", "GREATEST({a}, {b})")
)

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        VERSION,
        "a health row per schedule from creation, spend order index, counters of older runs",
        _SQLITE,
        postgres=_POSTGRES,
    ),
)
"""This group's migrations, each with its SQLite and PostgreSQL text."""
