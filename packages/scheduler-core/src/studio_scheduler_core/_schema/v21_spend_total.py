"""Migration 21: the spend by schedule reads its totals from one kept row, and its top
spenders from an index of the schedules that have spent.

- ``schedule_spend_total``: one row (``id = 1``) holding what summing every health row gave
  the spend read: how many schedules have an ended run (``spenders``), their usage
  (``spend_usd``, ``spend_tokens``), ended runs (``runs``) and ended runs that reported no
  usage (``spend_missing``). Triggers on ``schedule_health`` keep it as each row is inserted,
  updated (in those columns) or deleted, in the same transaction, whichever statement writes
  the row (a terminal write, a retention pass, a schedule's deletion, a later migration);
  so the read costs one row whatever the number of schedules, where a sum over every health
  row cost about a millisecond per 10,000 schedules that have run. It is seeded from the
  health rows as they are.
- ``idx_schedule_health_spend`` becomes a partial index of the rows with an ended run, in
  the order the top spenders are read, holding every column that read takes from the health
  row: the top 20 are its first entries, and schedules that never ran are not scanned past.
"""

from __future__ import annotations

from studio_state import Migration

VERSION = 21
"""This migration's number (one place: the lead may renumber it)."""

_COLUMNS = "ended, spend_usd, spend_tokens, spend_missing"


def _tables(integer: str, real: str) -> str:
    return f"""
CREATE TABLE IF NOT EXISTS schedule_spend_total (
  id            {integer} PRIMARY KEY CHECK (id = 1),
  spenders      {integer} NOT NULL DEFAULT 0,
  spend_usd     {real} NOT NULL DEFAULT 0,
  spend_tokens  {integer} NOT NULL DEFAULT 0,
  runs          {integer} NOT NULL DEFAULT 0,
  spend_missing {integer} NOT NULL DEFAULT 0
);
INSERT INTO schedule_spend_total (id, spenders, spend_usd, spend_tokens, runs, spend_missing)
  SELECT 1, count(*), COALESCE(sum(spend_usd), 0), COALESCE(sum(spend_tokens), 0),
    COALESCE(sum(ended), 0), COALESCE(sum(spend_missing), 0)
  FROM schedule_health WHERE ended > 0;
DROP INDEX IF EXISTS idx_schedule_health_spend;
CREATE INDEX IF NOT EXISTS idx_schedule_health_spend
  ON schedule_health(spend_usd DESC, spend_tokens DESC, schedule_id, ended, spend_missing)
  WHERE ended > 0;
"""


def _delta(sign: str, row: str) -> str:
    """The ``SET`` list adding (``+``) or taking away (``-``) ``row``'s share."""
    return (
        f"spenders = spenders {sign} CASE WHEN {row}.ended > 0 THEN 1 ELSE 0 END, "
        f"spend_usd = spend_usd {sign} {row}.spend_usd, "
        f"spend_tokens = spend_tokens {sign} {row}.spend_tokens, "
        f"runs = runs {sign} {row}.ended, "
        f"spend_missing = spend_missing {sign} {row}.spend_missing"
    )


# an update adds the difference: the new row's share less the old row's
_CHANGE = (
    "spenders = spenders + CASE WHEN NEW.ended > 0 THEN 1 ELSE 0 END "
    "- CASE WHEN OLD.ended > 0 THEN 1 ELSE 0 END, "
    "spend_usd = spend_usd + (NEW.spend_usd - OLD.spend_usd), "
    "spend_tokens = spend_tokens + (NEW.spend_tokens - OLD.spend_tokens), "
    "runs = runs + (NEW.ended - OLD.ended), "
    "spend_missing = spend_missing + (NEW.spend_missing - OLD.spend_missing)"
)

_TRIGGERS = f"""
CREATE TRIGGER IF NOT EXISTS schedule_spend_total_insert AFTER INSERT ON schedule_health
BEGIN
  UPDATE schedule_spend_total SET {_delta("+", "NEW")} WHERE id = 1;
END;
CREATE TRIGGER IF NOT EXISTS schedule_spend_total_update
  AFTER UPDATE OF {_COLUMNS} ON schedule_health
BEGIN
  UPDATE schedule_spend_total SET {_CHANGE} WHERE id = 1;
END;
CREATE TRIGGER IF NOT EXISTS schedule_spend_total_delete AFTER DELETE ON schedule_health
BEGIN
  UPDATE schedule_spend_total SET {_delta("-", "OLD")} WHERE id = 1;
END;
"""

_TRIGGERS_PG = f"""
CREATE FUNCTION schedule_spend_total_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    UPDATE schedule_spend_total SET {_delta("+", "NEW")} WHERE id = 1;
  ELSIF TG_OP = 'UPDATE' THEN
    UPDATE schedule_spend_total SET {_CHANGE} WHERE id = 1;
  ELSE
    UPDATE schedule_spend_total SET {_delta("-", "OLD")} WHERE id = 1;
  END IF;
  RETURN NULL;
END;
$$;
CREATE TRIGGER schedule_spend_total_insert AFTER INSERT ON schedule_health
  FOR EACH ROW EXECUTE FUNCTION schedule_spend_total_row();
CREATE TRIGGER schedule_spend_total_update AFTER UPDATE OF {_COLUMNS} ON schedule_health
  FOR EACH ROW EXECUTE FUNCTION schedule_spend_total_row();
CREATE TRIGGER schedule_spend_total_delete AFTER DELETE ON schedule_health
  FOR EACH ROW EXECUTE FUNCTION schedule_spend_total_row();
"""

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        VERSION,
        "a kept total of the spend by schedule; the top spenders' index holds only spenders",
        _tables("INTEGER", "REAL") + _TRIGGERS,
        postgres=_tables("BIGINT", "DOUBLE PRECISION") + _TRIGGERS_PG,
    ),
)
"""This group's migrations, each with its SQLite and PostgreSQL text."""
