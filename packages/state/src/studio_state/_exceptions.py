"""Errors raised by studio-state.

StateError
 ├── SchemaTooNew        the database was migrated by newer code than this
 ├── MigrationError      a migration list is malformed or a migration failed
 ├── InvalidTransition   a transition request names an unknown table, column or status
 ├── InvalidSetting      a connection setting (such as ``synchronous``) has a value it does not take
 ├── SynchronousInTransaction  a transaction-level ``synchronous`` was asked inside an open one
 └── ConnectionClosed    a call was made on a connection that is already closed
"""

from __future__ import annotations


class StateError(Exception):
    """Base class of every studio-state error."""


class SchemaTooNew(StateError):
    """The database holds migrations of a package newer than the running code knows."""

    def __init__(self, package: str, database_version: int, code_version: int) -> None:
        self.package = package
        self.database_version = database_version
        self.code_version = code_version
        super().__init__(
            f"database schema of {package!r} is at version {database_version}, newer than "
            f"this code's version {code_version}: upgrade {package} before using this database"
        )


class MigrationError(StateError):
    """A migration list is malformed, or applying one migration failed."""


class InvalidTransition(StateError):
    """A transition request is malformed (bad identifier, empty status list)."""


class InvalidSetting(StateError, ValueError):
    """A connection setting has a value outside the ones it accepts."""


class ConnectionClosed(StateError, ValueError):
    """The connection was closed before the call could run on it."""


class SynchronousInTransaction(StateError):
    """``run_write_transaction(..., synchronous=...)`` was called inside an open transaction.

    SQLite only changes a connection's ``synchronous`` level outside a transaction, and a
    joined transaction commits at its owner's level, so the requested level could not hold.
    """
