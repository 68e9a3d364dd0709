"""Which database a target or a connection is: SQLite (a path) or PostgreSQL (a URL)."""

from __future__ import annotations

import os
import sqlite3
import weakref
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit, urlunsplit

import aiosqlite

from ._exceptions import InvalidSetting

if TYPE_CHECKING:
    from ._pg_dbapi import PostgresConnection

Backend = Literal["sqlite", "postgresql"]

_SCHEMES = ("postgresql://", "postgres://")
INSTALL_HINT = "pip install 'studio-state[postgres]'"

# The aiosqlite connections opened on PostgreSQL (their DB-API object is gone once closed).
_postgres: weakref.WeakSet[aiosqlite.Connection] = weakref.WeakSet()


def is_postgres(target: str | os.PathLike[str]) -> bool:
    """Whether ``target`` is a PostgreSQL URL (``postgresql://…`` or ``postgres://…``).

    A path (``str`` or ``os.PathLike``) is a SQLite database file.
    """
    return isinstance(target, str) and target[:13].lower().startswith(_SCHEMES)


def redact(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***`` (for messages and logs)."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        netloc = parts.netloc.rsplit("@", 1)
        user = netloc[0].split(":", 1)[0]
        return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[1]}"))
    except ValueError:
        return url.split("://", 1)[0] + "://…"


def register(conn: aiosqlite.Connection) -> None:
    """Record ``conn`` as a PostgreSQL connection (for :func:`backend_of`)."""
    _postgres.add(conn)


def backend_of(conn: aiosqlite.Connection | sqlite3.Connection | Any) -> Backend:
    """``"postgresql"`` or ``"sqlite"``: the database behind ``conn``.

    ``conn`` is a connection from :func:`studio_state.open_connection` /
    :func:`studio_state.connect`, one from :func:`studio_state.connect_sync`, or the ``db``
    handle a function run by :func:`studio_state.run_sync` / ``run_write_transaction`` gets.
    Anything else raises :class:`InvalidSetting` naming its type.
    """
    if isinstance(conn, aiosqlite.Connection):
        return "postgresql" if conn in _postgres else "sqlite"
    if isinstance(conn, sqlite3.Connection):
        return "sqlite"
    if getattr(conn, "backend", None) == "postgresql":
        return "postgresql"
    raise InvalidSetting(
        f"conn must be a Studio connection (aiosqlite, sqlite3 or PostgreSQL), "
        f"got {type(conn).__name__}"
    )


def postgres_module() -> Any:
    """The DB-API module (imports psycopg); :class:`InvalidSetting` when psycopg is missing."""
    try:
        from . import _pg_dbapi
    except ImportError as exc:
        raise InvalidSetting(
            f"a postgresql:// database needs psycopg 3: {INSTALL_HINT} ({exc})"
        ) from exc
    return _pg_dbapi


def connect_postgres(
    url: str, *, synchronous: int, application_name: str | None
) -> PostgresConnection:
    """Open ``url`` as the DB-API object (called on aiosqlite's thread, or directly)."""
    module = postgres_module()
    conn: PostgresConnection = module.connect_postgres(
        url, synchronous=synchronous, application_name=application_name
    )
    return conn
