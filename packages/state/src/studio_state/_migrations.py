"""The migration runner.

Each package registers its own ordered migrations under its own name in the shared
``schema_migrations(package, version, applied_at)`` table. Applying is idempotent, each
migration runs in its own transaction, and a database that a newer version of a package has
migrated is refused with :class:`SchemaTooNew`.

A migration carries its step in SQLite's dialect (``sql``) and, side by side, in PostgreSQL's
(``postgres``); :func:`migrate` runs the one of the connection's backend. On PostgreSQL each
step's transaction first takes a transaction-scoped advisory lock (one key for every Studio
package, the one the outbox's own PostgreSQL runner takes), so concurrent migrators apply each
step once.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass

import aiosqlite

from ._backend import backend_of
from ._exceptions import MigrationError, SchemaTooNew
from ._query import fetch_all, fetch_value
from ._transactions import write_transaction

_MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
  package    TEXT NOT NULL,
  version    INTEGER NOT NULL,
  applied_at REAL NOT NULL,
  PRIMARY KEY (package, version)
)
"""


_PG_MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
  package    TEXT NOT NULL,
  version    INTEGER NOT NULL,
  applied_at DOUBLE PRECISION NOT NULL,
  PRIMARY KEY (package, version)
)
"""

POSTGRES_MIGRATION_LOCK = 0x5354_5544_494F  # "STUDIO"
"""The advisory lock key every Studio migration on a PostgreSQL database takes."""


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema step of a package.

    ``sql`` is a script of one or more statements in SQLite's dialect; ``postgres`` is the
    same step in PostgreSQL's (``None``: the step has no PostgreSQL form, and :func:`migrate`
    on a PostgreSQL connection refuses the list with :class:`MigrationError`). The PostgreSQL
    text runs as one script, so function bodies may hold ``;`` (dollar quoting).
    """

    version: int
    description: str
    sql: str
    postgres: str | None = None


def split_statements(script: str) -> list[str]:
    """Split an SQL script into complete statements (``CREATE TRIGGER … END;`` stays whole)."""
    statements: list[str] = []
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            stmt = buffer.strip()
            if stmt and stmt != ";":
                statements.append(stmt)
            buffer = ""
    if buffer.strip():
        raise MigrationError(f"incomplete SQL statement at end of script: {buffer.strip()[:80]!r}")
    return statements


def _check_order(package: str, migrations: Sequence[Migration]) -> None:
    if not package:
        raise MigrationError("package name must not be empty")
    expected = 1
    for migration in migrations:
        if migration.version != expected:
            raise MigrationError(
                f"migrations of {package!r} must be numbered 1, 2, 3… in order; "
                f"found version {migration.version} where {expected} was expected"
            )
        expected += 1


async def _applied_versions(conn: aiosqlite.Connection, package: str) -> set[int]:
    rows = await fetch_all(
        conn, "SELECT version FROM schema_migrations WHERE package = ?", (package,)
    )
    return {int(row["version"]) for row in rows}


async def _has_migrations_table(conn: aiosqlite.Connection) -> bool:
    return await fetch_value(conn, "SELECT to_regclass('schema_migrations') IS NOT NULL") is True


async def applied_version(conn: aiosqlite.Connection, package: str) -> int:
    """Return the highest migration version of ``package`` applied to the database (0: none)."""
    if backend_of(conn) == "postgresql":
        if not await _has_migrations_table(conn):
            return 0
        return max(await _applied_versions(conn, package), default=0)
    await conn.execute(_MIGRATIONS_TABLE)
    versions = await _applied_versions(conn, package)
    return max(versions, default=0)


async def migrate(
    conn: aiosqlite.Connection,
    package: str,
    migrations: Sequence[Migration],
    *,
    now: float | None = None,
) -> list[int]:
    """Apply the migrations of ``package`` that the database does not have yet.

    Returns the versions applied by this call (empty when the schema was current). Each
    migration runs in one ``BEGIN IMMEDIATE`` transaction together with its
    ``schema_migrations`` row, so two processes migrating at once apply each step once.
    Raises :class:`SchemaTooNew` when the database is ahead of ``migrations``.

    On a PostgreSQL connection each step runs its ``postgres`` text, in a transaction that
    first takes the advisory lock :data:`POSTGRES_MIGRATION_LOCK`; a migration without that
    text raises :class:`MigrationError` naming the package and version, before anything runs.
    """
    _check_order(package, migrations)
    if conn.in_transaction:
        raise MigrationError("migrate() must not run inside an open transaction")
    if backend_of(conn) == "postgresql":
        return await _migrate_postgres(conn, package, migrations, now)
    await conn.execute(_MIGRATIONS_TABLE)
    code_version = len(migrations)
    if await _current(conn, package, migrations):
        return []
    applied_now: list[int] = []
    for migration in migrations:
        async with write_transaction(conn):
            statements = split_statements(migration.sql)
            if await _apply(conn, package, migration, statements, code_version, now):
                applied_now.append(migration.version)
    return applied_now


async def _current(
    conn: aiosqlite.Connection, package: str, migrations: Sequence[Migration]
) -> bool:
    """Whether every step is applied already; :class:`SchemaTooNew` when the database is ahead."""
    versions = await _applied_versions(conn, package)
    if max(versions, default=0) > len(migrations):
        raise SchemaTooNew(package, max(versions), len(migrations))
    return versions >= {m.version for m in migrations}


async def _apply(
    conn: aiosqlite.Connection,
    package: str,
    migration: Migration,
    statements: Sequence[str],
    code_version: int,
    now: float | None,
) -> bool:
    """One step inside its transaction: re-check the versions, run it, record it."""
    versions = await _applied_versions(conn, package)
    newest = max(versions, default=0)
    if newest > code_version:
        raise SchemaTooNew(package, newest, code_version)
    if migration.version in versions:
        return False
    try:
        for statement in statements:
            await conn.execute(statement)
    except sqlite3.Error as exc:
        raise MigrationError(
            f"migration {package} v{migration.version} ({migration.description}) failed: {exc}"
        ) from exc
    await conn.execute(
        "INSERT INTO schema_migrations (package, version, applied_at) VALUES (?, ?, ?)",
        (package, migration.version, time.time() if now is None else now),
    )
    return True


async def _migrate_postgres(
    conn: aiosqlite.Connection,
    package: str,
    migrations: Sequence[Migration],
    now: float | None,
) -> list[int]:
    for migration in migrations:
        if migration.postgres is None:
            raise MigrationError(
                f"migration {package} v{migration.version} ({migration.description}) has no "
                "PostgreSQL text (Migration.postgres): it cannot run on a PostgreSQL database"
            )
    code_version = len(migrations)
    # the common case: nothing to do, no lock taken
    if await _has_migrations_table(conn) and await _current(conn, package, migrations):
        return []
    applied_now: list[int] = []
    for migration in migrations:
        async with write_transaction(conn):
            await conn.execute("SELECT pg_advisory_xact_lock(?)", (POSTGRES_MIGRATION_LOCK,))
            await conn.execute(_PG_MIGRATIONS_TABLE)
            statements = [str(migration.postgres)]
            if await _apply(conn, package, migration, statements, code_version, now):
                applied_now.append(migration.version)
    return applied_now
