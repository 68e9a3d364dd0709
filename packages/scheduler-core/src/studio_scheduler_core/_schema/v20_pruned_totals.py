"""Migration 20: what retention deleted still counts for ``max_runs`` and the budgets.

The ``max_runs`` gate counts a schedule's top-level runs that fired (and, with workers on any
node, those queued or running) and the budget gates sum the usage its runs' sessions
reported; retention deletes old terminal runs with their sessions. So that a finished
schedule is not re-armed by its history going, each ``schedule_health`` row carries what
retention took of those figures, folded in by the transaction that deletes the runs:

- ``pruned_runs``: deleted top-level runs that fired and ended, first attempts only (the rows
  both run counts count; retention deletes no queued or running run, so one total serves both);
- ``pruned_cost_usd`` and ``pruned_tokens``: the usage of the deleted runs' sessions.

The gates read the live count or sum plus the carried total. History deleted before this
migration is not recovered: the totals start at 0.
"""

from __future__ import annotations

from studio_state import Migration

VERSION = 20
"""This migration's number (the one place it is written)."""


def _columns(integer: str, real: str) -> str:
    return f"""
ALTER TABLE schedule_health ADD COLUMN pruned_runs {integer} NOT NULL DEFAULT 0;
ALTER TABLE schedule_health ADD COLUMN pruned_cost_usd {real} NOT NULL DEFAULT 0;
ALTER TABLE schedule_health ADD COLUMN pruned_tokens {integer} NOT NULL DEFAULT 0;
"""


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        VERSION,
        "schedule_health: what retention deleted of the max_runs count and the spend",
        _columns("INTEGER", "REAL"),
        postgres=_columns("BIGINT", "DOUBLE PRECISION"),
    ),
)
"""This group's migrations, each with its SQLite and PostgreSQL text."""
