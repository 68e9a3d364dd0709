"""Database errors classified by their codes, never by their message text.

A message is for people: PostgreSQL translates it (``lc_messages``), and a wrapper may reword
it. What a caller decides on is read from the codes the drivers carry:

- PostgreSQL (psycopg 3, asyncpg, or Studio's mapped :class:`~._pg_errors.PostgresError`,
  whose ``__cause__`` is the psycopg error): the five-character SQLSTATE and the name of the
  violated constraint (psycopg's ``diag.constraint_name``, asyncpg's ``constraint_name``);
- SQLite: ``sqlite3``'s extended result code (``sqlite_errorcode``; its name is
  ``sqlite_errorname``). SQLite names no constraint: its codes tell a primary key from another
  unique constraint, and a table's unique constraints are told apart by the caller, who knows
  which ones the statement can violate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

ErrorKind = Literal["unique", "primary_key", "foreign_key", "not_null", "check", "busy", "other"]
StorageFault = Literal["readonly", "full", "io", "corrupt", "cantopen"]
"""A storage fault: the database (or its file system) is read-only, full, failing I/O,
corrupt, or cannot be opened."""

# SQLite extended result codes (sqlite3.h).
_SQLITE_KINDS: Final[dict[int, ErrorKind]] = {
    2067: "unique",  # SQLITE_CONSTRAINT_UNIQUE
    1555: "primary_key",  # SQLITE_CONSTRAINT_PRIMARYKEY
    2579: "primary_key",  # SQLITE_CONSTRAINT_ROWID
    787: "foreign_key",  # SQLITE_CONSTRAINT_FOREIGNKEY
    1299: "not_null",  # SQLITE_CONSTRAINT_NOTNULL
    275: "check",  # SQLITE_CONSTRAINT_CHECK
}
_SQLITE_BUSY: Final = frozenset({5, 6})  # SQLITE_BUSY, SQLITE_LOCKED (primary codes)

# SQLite primary result codes of a storage fault (the low byte of the extended code).
_SQLITE_FAULTS: Final[dict[int, StorageFault]] = {
    8: "readonly",  # SQLITE_READONLY
    10: "io",  # SQLITE_IOERR
    11: "corrupt",  # SQLITE_CORRUPT
    13: "full",  # SQLITE_FULL
    14: "cantopen",  # SQLITE_CANTOPEN
    26: "corrupt",  # SQLITE_NOTADB
}

# PostgreSQL SQLSTATEs (Appendix A of its manual).
_PG_KINDS: Final[dict[str, ErrorKind]] = {
    "23505": "unique",
    "23503": "foreign_key",
    "23502": "not_null",
    "23514": "check",
    "55P03": "busy",  # lock_not_available (NOWAIT, lock_timeout)
    "40001": "busy",  # serialization_failure
    "40P01": "busy",  # deadlock_detected
}
_PG_FAULTS: Final[dict[str, StorageFault]] = {
    "53100": "full",  # disk_full
    "58030": "io",  # io_error
    "25006": "readonly",  # read_only_sql_transaction (a standby, a read-only session)
    "XX001": "corrupt",  # data_corrupted
    "XX002": "corrupt",  # index_corrupted
}
# PostgreSQL names a primary key constraint ``<table>_pkey`` unless told otherwise; Studio's
# schemas never name one otherwise.
_PG_PRIMARY_KEY_SUFFIX: Final = "_pkey"
_MAX_CHAIN: Final = 8


@dataclass(frozen=True)
class DbErrorClass:
    """What a database error is: its ``kind``, the driver's ``code`` (a SQLSTATE, or SQLite's
    extended result code name) and, on PostgreSQL, the violated ``constraint``'s name."""

    kind: ErrorKind
    code: str | None = None
    constraint: str | None = None

    @property
    def is_busy(self) -> bool:
        """Another session holds what the statement needs (retry later)."""
        return self.kind == "busy"

    @property
    def is_unique(self) -> bool:
        """A unique constraint, the primary key included, refused the row."""
        return self.kind in ("unique", "primary_key")


def _sqlstate(exc: BaseException) -> str | None:
    state = getattr(exc, "sqlstate", None)
    return state if isinstance(state, str) and len(state) == 5 else None


def _constraint(exc: BaseException) -> str | None:
    for error in _chain(exc):
        diag = getattr(error, "diag", None)
        name = getattr(diag, "constraint_name", None) or getattr(error, "constraint_name", None)
        if isinstance(name, str) and name:
            return name
    return None


def _chain(exc: BaseException) -> list[BaseException]:
    found: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(found) < _MAX_CHAIN:
        found.append(current)
        current = current.__cause__ or current.__context__
    return found


def classify_db_error(exc: BaseException) -> DbErrorClass:
    """The class of ``exc`` (or of the database error it was raised from), by code only.

    ``kind`` is ``other`` for anything that is not a constraint violation or a busy lock,
    and for exceptions that carry no database code at all.
    """
    for error in _chain(exc):
        state = _sqlstate(error)
        if state is not None:
            kind = _PG_KINDS.get(state, "other")
            constraint = _constraint(error) if state.startswith("23") else None
            if kind == "unique" and (constraint or "").endswith(_PG_PRIMARY_KEY_SUFFIX):
                kind = "primary_key"
            return DbErrorClass(kind, state, constraint)
        code = getattr(error, "sqlite_errorcode", None)
        if isinstance(code, int):
            name = getattr(error, "sqlite_errorname", None)
            text = name if isinstance(name, str) else str(code)
            if code in _SQLITE_KINDS:
                return DbErrorClass(_SQLITE_KINDS[code], text)
            if code & 0xFF in _SQLITE_BUSY:
                return DbErrorClass("busy", text)
            return DbErrorClass("other", text)
    return DbErrorClass("other")


def is_busy_error(exc: BaseException) -> bool:
    """Whether ``exc`` says another session holds a lock the statement needed: SQLite's
    ``SQLITE_BUSY``/``SQLITE_LOCKED``; PostgreSQL's lock not available, serialisation
    failure or deadlock."""
    return classify_db_error(exc).is_busy


def violates(exc: BaseException, kind: ErrorKind, *constraints: str) -> bool:
    """Whether ``exc`` is a ``kind`` violation, and (PostgreSQL, where constraints are named)
    of one of ``constraints`` when any are given. On SQLite, which names none, the kind alone
    decides: give the constraints a statement can violate by their kind."""
    found = classify_db_error(exc)
    if found.kind != kind:
        return False
    return not constraints or found.constraint is None or found.constraint in constraints


def storage_fault_of(exc: BaseException) -> StorageFault | None:
    """The storage fault ``exc`` (or the database error it was raised from) reports, by code
    only: SQLite's result code (read-only, I/O error, corrupt, full, cannot open, not a
    database) or PostgreSQL's SQLSTATE (disk full, I/O error, read-only transaction, data or
    index corrupted); ``None`` for anything else, and for errors that carry no code.
    """
    for error in _chain(exc):
        state = _sqlstate(error)
        if state is not None:
            return _PG_FAULTS.get(state)
        code = getattr(error, "sqlite_errorcode", None)
        if isinstance(code, int):
            return _SQLITE_FAULTS.get(code & 0xFF)
    return None
