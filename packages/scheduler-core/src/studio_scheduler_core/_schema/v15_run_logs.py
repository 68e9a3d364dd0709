"""Migration 15: the stored copy of a finished run's log (PostgreSQL only; an empty step on
SQLite, so both dialects keep one numbering).

On PostgreSQL a run's log file lives on the node that ran it; when the run ends that node
copies the file's bounded content (head, drop marker, most recent output: at most
``LIONAGI_STUDIO_RUN_LOG_BYTES``) into ``run_logs``, so every node serves the log of a
finished run, also once its node is gone. The row goes with its run (``ON DELETE CASCADE``:
retention, a schedule's delete). On SQLite the database is one machine's file and the log file
beside it is readable by every process that can open the database: nothing is copied.
"""

from __future__ import annotations

from studio_state import Migration

_V15_RUN_LOGS_PG = """
CREATE TABLE IF NOT EXISTS run_logs (
  run_id    TEXT PRIMARY KEY REFERENCES schedule_runs(id) ON DELETE CASCADE,
  content   BYTEA NOT NULL,
  bytes     BIGINT NOT NULL,
  dropped   BIGINT NOT NULL DEFAULT 0,
  node_id   TEXT,
  stored_at DOUBLE PRECISION NOT NULL
);
"""

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        15,
        "the stored log of a finished run, readable from every node (PostgreSQL only)",
        "",
        postgres=_V15_RUN_LOGS_PG,
    ),
)
"""This group's migrations, each with its SQLite and PostgreSQL text."""
