"""The outbox for synchronous code: the same functions on a standard ``sqlite3.Connection``.

A Flask, Django or script producer enqueues without asyncio::

    import sqlite3
    from studio_outbox import sync as outbox

    conn = outbox.connect("app.db")              # or any sqlite3.Connection + ensure_schema
    with conn:                                   # the producer's own transaction
        conn.execute("INSERT INTO orders (id) VALUES (?)", (42,))
        outbox.enqueue_dispatch(conn, kind="order.created", deliver_to="ops")

Each function runs the very statements of its asynchronous twin in :mod:`studio_outbox`, with
the same transaction rule: when ``conn.in_transaction`` is true the write joins that
transaction (it commits or rolls back with the producer's change, and nothing here commits);
otherwise it runs in its own ``BEGIN IMMEDIATE … COMMIT``. Rows come back as ``dict``
whatever the connection's ``row_factory``. On PostgreSQL, :func:`enqueue_dispatch` and
:func:`enqueue_many` also take the producer's psycopg 3 ``Connection`` and join its open
transaction the same way (``with conn.transaction():`` or psycopg's implicit one, until
``conn.commit()``). Delivery stays asynchronous
(:func:`studio_outbox.deliver_due_dispatches` or ``python -m studio_outbox deliver``).
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import studio_state
from studio_state import Clock, system_clock

from ._connections import ConnectionKind, connection_kind, refuse
from ._constants import DEFAULT_ACTOR, DEFAULT_MAX_ATTEMPTS
from ._drive import Steps, run_sync, sync_write_transaction
from ._enqueue import insert_steps
from ._exceptions import InvalidArgument
from ._new_row import NewRow, validate, validate_items
from ._operations import ack_steps, check_dispatch_id, purge_steps, retry_steps
from ._queries import backlog_steps, count_steps, get_steps, list_steps, next_due_steps
from ._schema import DEFAULT_SYNCHRONOUS, check_synchronous, synchronous_pragma
from ._schema import ensure_schema as _ensure_schema_async

__all__ = [
    "ack_dispatch",
    "connect",
    "count_dispatches",
    "dispatch_backlog",
    "enqueue_dispatch",
    "enqueue_many",
    "ensure_schema",
    "get_dispatch",
    "list_dispatches",
    "next_due_at",
    "purge_dispatch",
    "retry_dispatch",
]


def _conn(conn: object) -> sqlite3.Connection:
    if connection_kind(conn) is not ConnectionKind.SQLITE3:
        # Also studio_state.connect_sync's PostgreSQL connection, which answers sqlite3's calls.
        raise refuse(
            conn,
            "a sqlite3.Connection (a psycopg Connection only for enqueue_dispatch and "
            "enqueue_many; studio_outbox.postgres has the rest)",
        )
    return conn  # type: ignore[return-value]


def _insert(conn: object, rows: Sequence[NewRow], now: float, actor: str) -> list[str]:
    """The one insert (:func:`insert_steps`) on a ``sqlite3`` or psycopg (sync) ``conn``."""
    kind = connection_kind(conn)
    if kind is ConnectionKind.SQLITE3:
        ids: list[str] = _write(conn, insert_steps(rows, now, actor))
        return ids
    # The PostgreSQL drivers' front-end: it refuses any kind but psycopg's Connection.
    from ._pg._enqueue import insert_sync

    return insert_sync(conn, rows, now, actor)


def _read(conn: object, steps: Steps[Any]) -> Any:
    return run_sync(_conn(conn), steps)


def _write(conn: object, steps: Steps[Any]) -> Any:
    connection = _conn(conn)
    with sync_write_transaction(connection):
        return run_sync(connection, steps)


def _database_file(conn: sqlite3.Connection) -> str:
    for _seq, name, file in conn.execute("PRAGMA database_list").fetchall():
        if name == "main":
            return str(file or "")
    return ""


def ensure_schema(conn: sqlite3.Connection, *, synchronous: str | None = None) -> None:
    """Create or upgrade the outbox's tables in the database of ``conn`` (idempotent).

    The migrations are the asynchronous :func:`studio_outbox.ensure_schema`'s, applied through
    a short-lived connection of their own to the same file, so ``conn`` must be a database
    file (not ``:memory:``) with no transaction open. ``synchronous`` (``"full"`` or
    ``"normal"``) sets ``conn``'s durability; None keeps its current setting. On a PostgreSQL
    connection from :func:`studio_state.connect_sync` it applies the PostgreSQL schema.
    """
    connection = _conn(conn)
    pragma = None if synchronous is None else synchronous_pragma(synchronous)
    if connection.in_transaction:
        raise InvalidArgument("conn", "ensure_schema must not run inside an open transaction")
    if studio_state.backend_of(connection) == "postgresql":
        from ._pg._schema import ensure_schema_sync as ensure_postgres_schema

        ensure_postgres_schema(connection.raw)  # type: ignore[attr-defined]
        return
    path = _database_file(connection)
    if not path:
        raise InvalidArgument("conn", "ensure_schema needs a database file, not :memory:")
    if pragma is not None:
        connection.execute(pragma)
    mode = check_synchronous(synchronous or DEFAULT_SYNCHRONOUS)
    failure: list[BaseException] = []

    async def migrate() -> None:
        async with studio_state.connect(path, synchronous=mode) as other:
            await _ensure_schema_async(other)

    def worker() -> None:
        # A thread of its own: the caller may itself be running inside an event loop.
        try:
            asyncio.run(migrate())
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=worker, name="studio-outbox-schema")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]


def connect(path: str | Path, *, synchronous: str = DEFAULT_SYNCHRONOUS) -> sqlite3.Connection:
    """Open ``path`` for a synchronous producer, with the outbox schema; the caller closes it.

    The connection has WAL, ``synchronous=FULL`` (or ``NORMAL`` when asked: the last commits
    may then be lost on power loss), foreign keys and a 5 s busy timeout, and keeps
    ``sqlite3``'s usual transaction handling, so ``with conn:`` groups the producer's writes
    and its enqueues into one transaction.
    """
    pragma = synchronous_pragma(synchronous)
    db_path = Path(path).expanduser()
    db_path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(db_path, timeout=studio_state.BUSY_TIMEOUT_MS / 1000)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(pragma)
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute(f"PRAGMA busy_timeout={studio_state.BUSY_TIMEOUT_MS}")
        ensure_schema(conn)
    except BaseException:
        conn.close()
        raise
    return conn


def enqueue_dispatch(
    conn: sqlite3.Connection | Any,
    *,
    kind: str,
    deliver_to: str,
    body: dict[str, Any] | None = None,
    dedup_key: str | None = None,
    ack_required: bool = False,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    expires_at: float | None = None,
    session_id: str | None = None,
    schedule_run_id: str | None = None,
    clock: Clock = system_clock,
    actor: str | None = None,
) -> str:
    """:func:`studio_outbox.enqueue_dispatch` on a ``sqlite3`` connection; returns the id.

    On PostgreSQL ``conn`` may be the producer's psycopg 3 ``Connection``: the row and its
    transition join the transaction open on it (``info.transaction_status`` not idle) and
    commit or roll back with the producer's change, or else commit on their own. Any other
    kind of connection raises :class:`UnsupportedConnection` naming ``conn``.
    """
    row = validate(
        kind=kind,
        deliver_to=deliver_to,
        body=body,
        dedup_key=dedup_key,
        ack_required=ack_required,
        max_attempts=max_attempts,
        expires_at=expires_at,
        session_id=session_id,
        schedule_run_id=schedule_run_id,
    )
    return _insert(conn, [row], clock(), actor or DEFAULT_ACTOR)[0]


def enqueue_many(
    conn: sqlite3.Connection | Any,
    items: Iterable[Mapping[str, Any]],
    *,
    clock: Clock = system_clock,
    actor: str | None = None,
) -> list[str]:
    """:func:`studio_outbox.enqueue_many` on a ``sqlite3`` or psycopg 3 ``Connection`` (the
    transaction rule of :func:`enqueue_dispatch`)."""
    rows = validate_items(items)
    if not rows:
        return []
    return _insert(conn, rows, clock(), actor or DEFAULT_ACTOR)


def get_dispatch(conn: sqlite3.Connection, dispatch_id: str) -> dict[str, Any] | None:
    """:func:`studio_outbox.get_dispatch` on a ``sqlite3`` connection."""
    row: dict[str, Any] | None = _read(conn, get_steps(dispatch_id))
    return row


def list_dispatches(
    conn: sqlite3.Connection,
    *,
    status: str | None = None,
    kind: str | None = None,
    limit: int = 100,
    offset: int = 0,
) -> list[dict[str, Any]]:
    """:func:`studio_outbox.list_dispatches` on a ``sqlite3`` connection."""
    rows: list[dict[str, Any]] = _read(conn, list_steps(status, kind, limit, offset))
    return rows


def count_dispatches(
    conn: sqlite3.Connection, *, status: str | None = None, kind: str | None = None
) -> int:
    """:func:`studio_outbox.count_dispatches` on a ``sqlite3`` connection."""
    return int(_read(conn, count_steps(status, kind)))


def dispatch_backlog(
    conn: sqlite3.Connection, *, now: float | None = None, clock: Clock = system_clock
) -> dict[str, Any]:
    """:func:`studio_outbox.dispatch_backlog` on a ``sqlite3`` connection."""
    backlog: dict[str, Any] = _read(conn, backlog_steps(clock() if now is None else now))
    return backlog


def next_due_at(conn: sqlite3.Connection) -> float | None:
    """:func:`studio_outbox.next_due_at` on a ``sqlite3`` connection."""
    due: float | None = _read(conn, next_due_steps())
    return due


def ack_dispatch(
    conn: sqlite3.Connection,
    dispatch_id: str,
    token: str,
    *,
    clock: Clock = system_clock,
    actor: str | None = None,
) -> bool:
    """:func:`studio_outbox.ack_dispatch` on a ``sqlite3`` connection."""
    dispatch_id = check_dispatch_id(dispatch_id)
    return bool(_write(conn, ack_steps(dispatch_id, token, clock, actor)))


def retry_dispatch(
    conn: sqlite3.Connection,
    dispatch_id: str,
    *,
    clock: Clock = system_clock,
    actor: str | None = None,
) -> None:
    """:func:`studio_outbox.retry_dispatch` on a ``sqlite3`` connection."""
    dispatch_id = check_dispatch_id(dispatch_id)
    _write(conn, retry_steps(dispatch_id, clock, actor))


def purge_dispatch(
    conn: sqlite3.Connection,
    dispatch_id: str,
    *,
    clock: Clock = system_clock,
    actor: str | None = None,
) -> None:
    """:func:`studio_outbox.purge_dispatch` on a ``sqlite3`` connection."""
    dispatch_id = check_dispatch_id(dispatch_id)
    _write(conn, purge_steps(dispatch_id, clock, actor))


def operator_ack_dispatch(
    conn: sqlite3.Connection, dispatch_id: str, *, actor: str, clock: Clock = system_clock
) -> bool:
    """:func:`studio_outbox.operator_ack_dispatch` on a ``sqlite3`` connection."""
    from ._operator_ops import operator_ack_steps

    return bool(_write(conn, operator_ack_steps(dispatch_id, clock(), actor)))


def purge_dispatches(
    conn: sqlite3.Connection,
    *,
    status: str,
    before: float | None = None,
    actor: str,
    dry_run: bool = False,
    clock: Clock = system_clock,
) -> int:
    """:func:`studio_outbox.purge_dispatches` on a ``sqlite3`` connection."""
    from ._operator_ops import check_purge_filter, count_purgeable_steps, purge_batch_steps

    status, before = check_purge_filter(status, before)
    if dry_run:
        return int(_read(conn, count_purgeable_steps(status, before)))
    total = 0
    while True:
        deleted = int(_write(conn, purge_batch_steps(status, before, clock(), actor)))
        total += deleted
        if deleted == 0:
            return total
