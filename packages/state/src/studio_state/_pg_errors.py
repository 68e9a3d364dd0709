"""PostgreSQL errors as the ``sqlite3`` exception classes Studio's code already catches.

A statement on a PostgreSQL connection (:func:`studio_state.open_connection` on a
``postgresql://`` URL) raises one of these instead of psycopg's own classes, so every
``except sqlite3.IntegrityError`` / ``except sqlite3.OperationalError`` keeps its meaning:

- a unique, foreign-key, not-null or check violation (SQLSTATE class 23) →
  :class:`PostgresIntegrityError`, a :class:`sqlite3.IntegrityError`, whose message starts as
  SQLite's does (``UNIQUE constraint failed: schedules.name``) and then gives PostgreSQL's;
- a lost or refused connection, a lock, deadlock or serialisation failure, a cancelled
  statement, a read-only transaction, a syntax error or unknown table (SQLite reports those
  as operational too), and the unsupported ``PRAGMA`` → :class:`PostgresOperationalError`;
- anything else → :class:`PostgresError`, a :class:`sqlite3.DatabaseError`.

Each carries PostgreSQL's five-character ``sqlstate`` (``None`` for client-side failures) and
has the psycopg exception as ``__cause__``. This module does not import psycopg.
"""

from __future__ import annotations

import sqlite3

# SQLSTATE classes SQLite would report as "operational": connection exceptions, invalid
# transaction state (read-only transaction), insufficient resources, operator intervention
# (cancel, shutdown), lock/serialisation failures, syntax errors and undefined objects.
OPERATIONAL_CLASSES = frozenset({"08", "25", "40", "42", "53", "55", "57", "58"})


class PostgresError(sqlite3.DatabaseError):
    """A statement failed on PostgreSQL (base of the mapped errors)."""

    sqlstate: str | None

    def __init__(self, message: str, sqlstate: str | None = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


class PostgresIntegrityError(PostgresError, sqlite3.IntegrityError):
    """A constraint refused the statement (SQLSTATE class 23)."""


class PostgresOperationalError(PostgresError, sqlite3.OperationalError):
    """The connection, a lock, the transaction's state or the statement's text failed."""
