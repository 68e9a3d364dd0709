"""The ``PRAGMA`` statements Studio issues, answered on PostgreSQL.

SQLite configures a connection and reports on its file through ``PRAGMA``; PostgreSQL has no
such statement. The PostgreSQL connection answers the ones Studio's code runs, each with the
row shape SQLite gives (so ``fetch_value(conn, "PRAGMA …")`` reads the same column), and
refuses any other with :class:`~studio_state.PostgresOperationalError` naming it:

======================  ==============================================================
``synchronous``         read: the level the connection was opened with or last set
                        (SQLite's numbers: 0 off, 1 normal, 2 full, 3 extra); set: kept
                        for the read. PostgreSQL's own ``synchronous_commit`` stays the
                        server's setting.
``journal_mode``        ``wal`` (PostgreSQL always logs ahead); a set changes nothing.
``foreign_keys``        read: the value last set (1 when opened); set: kept for the read.
                        PostgreSQL always enforces foreign keys.
``busy_timeout``        read/set: the value kept, as ``timeout``; PostgreSQL waits for
                        row locks without a bound (statements choose ``NOWAIT``/``SKIP
                        LOCKED`` where they must not wait).
``query_only``          ``SET default_transaction_read_only`` / ``SHOW`` it: a write in a
                        read-only session fails with an operational error, as on SQLite.
``data_version``        the server's WAL insert position: it changes whenever any
                        session commits (also this one, and on background WAL activity,
                        so a watcher may wake without news; never the other way round).
``user_version``        read: 0; set: nothing (Studio only writes it back as a probe).
``database_list``       one row ``(0, 'main', '')``: there is no file to name.
``wal_checkpoint``      ``(busy, log, checkpointed) = (0, 0, 0)``: nothing to checkpoint.
``wal_autocheckpoint``  read/set: the value kept (1000 when opened).
======================  ==============================================================
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._pg_errors import PostgresOperationalError

SYNCHRONOUS_LEVELS = {"off": 0, "normal": 1, "full": 2, "extra": 3}

Result = tuple[tuple[str, ...], list[tuple[Any, ...]]]
"""Column names and rows of an answered ``PRAGMA`` (no columns: a statement without rows)."""


@dataclass
class PragmaState:
    """The per-connection values the answers keep."""

    synchronous: int = 2
    foreign_keys: int = 1
    busy_timeout: int = 5000
    wal_autocheckpoint: int = 1000


def _flag(value: str) -> bool:
    text = value.strip().strip("'\"").lower()
    if text in {"1", "on", "true", "yes"}:
        return True
    if text in {"0", "off", "false", "no"}:
        return False
    raise PostgresOperationalError(f"PRAGMA value must be a boolean, got {value!r}")


def _integer(name: str, value: str) -> int:
    try:
        return int(value.strip().strip("'\""))
    except ValueError:
        raise PostgresOperationalError(f"PRAGMA {name} takes an integer, got {value!r}") from None


def _level(value: str) -> int:
    text = value.strip().strip("'\"").lower()
    if text in SYNCHRONOUS_LEVELS:
        return SYNCHRONOUS_LEVELS[text]
    level = _integer("synchronous", text)
    if level not in SYNCHRONOUS_LEVELS.values():
        raise PostgresOperationalError(f"PRAGMA synchronous takes 0-3 or a name, got {value!r}")
    return level


Query = Callable[[str], Any]
"""Runs one statement on the server and returns its first column of the first row."""


def answer(state: PragmaState, name: str, value: str | None, query: Query) -> Result:
    """The result of ``PRAGMA name [= value]`` on PostgreSQL (``query`` reaches the server)."""
    if name == "synchronous":
        if value is None:
            return ("synchronous",), [(state.synchronous,)]
        state.synchronous = _level(value)
        return (), []
    if name == "journal_mode":
        return ("journal_mode",), [("wal",)]
    if name == "foreign_keys":
        if value is None:
            return ("foreign_keys",), [(state.foreign_keys,)]
        state.foreign_keys = int(_flag(value))
        return (), []
    if name == "busy_timeout":
        if value is not None:
            state.busy_timeout = _integer(name, value)
        return ("timeout",), [(state.busy_timeout,)]
    if name == "query_only":
        if value is None:
            shown = query("SHOW default_transaction_read_only")
            return ("query_only",), [(int(str(shown) == "on"),)]
        query(f"SET default_transaction_read_only = {'on' if _flag(value) else 'off'}")
        return (), []
    if name == "data_version":
        if value is not None:
            raise PostgresOperationalError("PRAGMA data_version is read-only")
        position = query("SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint")
        return ("data_version",), [(int(position),)]
    if name == "user_version":
        if value is not None:
            _integer(name, value)
            return (), []
        return ("user_version",), [(0,)]
    if name == "database_list":
        return ("seq", "name", "file"), [(0, "main", "")]
    if name == "wal_checkpoint":
        return ("busy", "log", "checkpointed"), [(0, 0, 0)]
    if name == "wal_autocheckpoint":
        if value is not None:
            state.wal_autocheckpoint = _integer(name, value)
        return ("wal_autocheckpoint",), [(state.wal_autocheckpoint,)]
    shown_name = name or "(unparsed)"
    raise PostgresOperationalError(
        f"PRAGMA {shown_name} is not supported on PostgreSQL (Studio answers synchronous, "
        "journal_mode, foreign_keys, busy_timeout, query_only, data_version, user_version, "
        "database_list, wal_checkpoint, wal_autocheckpoint)"
    )
