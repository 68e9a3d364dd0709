"""One definition of the outbox's SQL, run by two front-ends (asyncio and plain ``sqlite3``).

Every outbox operation is written once, as a generator of *steps* (:class:`Fetch`,
:class:`ExecMany`) that receives each step's result: it never touches a connection itself.
:func:`run_async` drives such a generator on an ``aiosqlite.Connection``, :func:`run_sync` on a
``sqlite3.Connection``. Both return rows as plain ``dict`` built from the cursor's column
names, whatever ``row_factory`` the caller's connection has (the factory is overridden on the
outbox's own cursors only, never on the connection).

On an ``aiosqlite.Connection``, :func:`run_write` and :func:`run_read` run a whole generator
in one trip to the connection's thread (the ``sqlite3`` front-end on its own handle), instead
of one trip per statement as :func:`run_async` does.
"""

from __future__ import annotations

import contextlib
import secrets
import sqlite3
from collections.abc import Generator, Iterator, Sequence
from typing import Any, NamedTuple, TypeVar

import aiosqlite

import studio_state

from ._constants import ENTITY_TYPE

T = TypeVar("T")
Row = dict[str, Any]


# Steps are tuples: several are built for every delivery and enqueue.
class Fetch(NamedTuple):
    """Run one statement; its result is every row it returns (``[]`` for none)."""

    sql: str
    params: Sequence[Any] = ()


class ExecMany(NamedTuple):
    """Run one statement once per parameter tuple; its result is ``None``."""

    sql: str
    params: Sequence[Sequence[Any]]


Step = Fetch | ExecMany
Steps = Generator[Step, Any, T]


class TransitionRow(NamedTuple):
    """The ``status_transitions`` row of one status change of a dispatch.

    The outbox records only dispatches' changes (``entity_type`` is always ``dispatch``, with no
    evidence or metadata), and builds several of these for every delivery and enqueue: a
    tuple costs a third of ``studio_state.Transition``, a frozen dataclass.
    """

    entity_id: str
    previous_status: str | None
    status: str
    reason_code: str
    reason_summary: str
    created_at: float
    actor: str

    def params(self, row_id: str) -> tuple[Any, ...]:
        """The parameters of :data:`TRANSITION_INSERT` for this row, whose id is ``row_id``."""
        return (
            row_id,
            ENTITY_TYPE,
            self.entity_id,
            self.previous_status,
            self.status,
            self.reason_code,
            self.reason_summary,
            None,
            self.actor,
            None,
            self.created_at,
        )


# The audit row of every status change (studio-state's ``status_transitions`` table).
TRANSITION_INSERT = (
    "INSERT INTO status_transitions (id, entity_type, entity_id, previous_status, status, "
    "reason_code, reason_summary, evidence_refs, actor, metadata, created_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def is_busy(exc: sqlite3.Error) -> bool:
    """Whether another writer holds the lock ``exc`` met: SQLite's ``SQLITE_BUSY``/``LOCKED``,
    PostgreSQL's lock-not-available, serialisation failure or deadlock (by code, not text)."""
    return studio_state.is_busy_error(exc)


def transition_id(created_at: float, noise: str) -> str:
    """A ``status_transitions`` id that sorts by time: 8 hex of the second, then ``noise``
    (12 random hex digits).

    The table's primary key is a B-tree; a fully random id puts every insert on a random leaf
    page, which with millions of rows of history is a page-cache miss per transition (the
    delivery write step cost 4-5x more at 1M rows of history than on an empty table, and
    1.3x with ordered ids). Ids of the same second land side by side, on the few pages
    recent inserts keep in the cache; the random part keeps them unique, with the 48 bits of
    ``studio_state.new_id`` within each second.
    """
    return f"{int(created_at) & 0xFFFFFFFF:08x}{noise}"


def record(transitions: Sequence[TransitionRow]) -> Steps[None]:
    """Write ``transitions`` (inside the current transaction), with time-ordered ids.

    The random parts of all the ids come from one read of the OS's random source rather than
    one read per id: a delivery write step records two transitions, and every read of the
    random source is a system call on the connection's thread.
    """
    if transitions:
        noise = secrets.token_hex(6 * len(transitions))
        yield ExecMany(
            TRANSITION_INSERT,
            [
                t.params(transition_id(t.created_at, noise[12 * i : 12 * i + 12]))
                for i, t in enumerate(transitions)
            ],
        )


def _rows(description: Any, rows: Sequence[Sequence[Any]]) -> list[Row]:
    if not description:
        return []
    names = [column[0] for column in description]
    return [dict(zip(names, row, strict=True)) for row in rows]


async def _async_step(conn: aiosqlite.Connection, step: Step) -> list[Row] | None:
    if isinstance(step, ExecMany):
        await conn.executemany(step.sql, step.params)
        return None
    if conn.row_factory is studio_state.dict_row_factory:
        # Studio's own connections already return dicts: one round trip.
        return list(await conn.execute_fetchall(step.sql, step.params))  # type: ignore[arg-type]
    async with conn.execute(step.sql, step.params) as cursor:
        cursor.row_factory = None
        fetched = await cursor.fetchall()
        return _rows(cursor.description, fetched)  # type: ignore[arg-type]


def _sync_step(conn: sqlite3.Connection, step: Step) -> list[Row] | None:
    if isinstance(step, ExecMany):
        conn.executemany(step.sql, step.params)
        return None
    if conn.row_factory is studio_state.dict_row_factory:
        # Studio's own connections already return dicts.
        return conn.execute(step.sql, step.params).fetchall()
    cursor = conn.cursor()
    try:
        cursor.row_factory = None
        cursor.execute(step.sql, step.params)
        return _rows(cursor.description, cursor.fetchall())
    finally:
        cursor.close()


async def fetch_async(
    conn: aiosqlite.Connection, sql: str, params: Sequence[Any] = ()
) -> list[Row]:
    """One :class:`Fetch` on an aiosqlite connection (rows as ``dict``, any row factory)."""
    rows = await _async_step(conn, Fetch(sql, params))
    assert rows is not None
    return rows


async def run_async(conn: aiosqlite.Connection, steps: Steps[T]) -> T:
    """Run ``steps`` on an aiosqlite connection; a database error is raised inside them."""
    result: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = steps.throw(error) if error is not None else steps.send(result)
        except StopIteration as stop:
            value: T = stop.value
            return value
        try:
            result, error = await _async_step(conn, step), None
        except sqlite3.Error as exc:
            result, error = None, exc


def run_sync(conn: sqlite3.Connection, steps: Steps[T]) -> T:
    """Run ``steps`` on a ``sqlite3`` connection; a database error is raised inside them."""
    result: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = steps.throw(error) if error is not None else steps.send(result)
        except StopIteration as stop:
            value: T = stop.value
            return value
        try:
            result, error = _sync_step(conn, step), None
        except sqlite3.Error as exc:
            result, error = None, exc


async def run_write(conn: aiosqlite.Connection, steps: Steps[T]) -> T:
    """Run ``steps`` as one write transaction in a single trip to ``conn``'s thread.

    Joins a transaction the current task (or the caller, by hand) already has open on
    ``conn``, as :func:`studio_state.write_transaction` does; otherwise ``BEGIN IMMEDIATE``,
    the statements and ``COMMIT`` (or ``ROLLBACK`` on any error) run together.
    """
    return await studio_state.run_write_transaction(conn, lambda db: run_sync(db, steps))


async def run_read(conn: aiosqlite.Connection, steps: Steps[T]) -> T:
    """Run read-only ``steps`` in a single trip to ``conn``'s thread (no transaction begun)."""
    return await studio_state.run_sync(conn, lambda db: run_sync(db, steps))


@contextlib.contextmanager
def sync_write_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """The ``sqlite3`` twin of :func:`studio_state.write_transaction`.

    Inside a transaction the caller has open (``conn.in_transaction``), the block joins it:
    nothing is begun or committed here. Otherwise the block runs in its own
    ``BEGIN IMMEDIATE … COMMIT``, rolled back on any exception. Plain SQL ``COMMIT`` and
    ``ROLLBACK`` are used so this works in every ``isolation_level``/``autocommit`` mode.
    """
    if _in_transaction(conn):
        yield conn
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        if _in_transaction(conn):
            conn.execute("ROLLBACK")
        raise


def _in_transaction(conn: sqlite3.Connection) -> bool:
    return conn.in_transaction
