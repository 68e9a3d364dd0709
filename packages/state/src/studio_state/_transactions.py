"""Write transactions: ``BEGIN IMMEDIATE`` that joins a transaction already open.

Several tasks may share one ``aiosqlite.Connection``. A transaction on a connection belongs to
the task that opened it; other tasks wait for it to finish instead of silently writing into
it. A transaction the *caller* opened by hand (``await conn.execute("BEGIN")``) is joined:
that is the transactional-outbox contract, where a producer enqueues inside its own change.

:func:`write_transaction` runs each statement of its block as its own trip to the
connection's thread; :func:`run_write_transaction` runs a plain function's statements, with
``BEGIN IMMEDIATE`` and ``COMMIT``, in one trip, under the same rules, optionally at a
``synchronous`` level of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TypeVar, cast

import aiosqlite

from ._complete import run_to_completion
from ._connection import check_synchronous
from ._db_errors import is_busy_error
from ._exceptions import SynchronousInTransaction
from ._hop import run_sync
from ._ownership import begin_owning, end_owning, peek, state_of

T = TypeVar("T")

# BEGIN IMMEDIATE already waits busy_timeout for the write lock; these retries cover the
# rarer cases where SQLite reports SQLITE_BUSY at once (e.g. a WAL recovery in progress).
_BEGIN_RETRIES = 5
_BEGIN_RETRY_DELAY = 0.05


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    return is_busy_error(exc)


async def _begin_immediate(conn: aiosqlite.Connection) -> None:
    for attempt in range(_BEGIN_RETRIES):
        try:
            await conn.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc) or attempt == _BEGIN_RETRIES - 1:
                raise
            await asyncio.sleep(_BEGIN_RETRY_DELAY * (attempt + 1))


def in_owned_transaction(conn: aiosqlite.Connection) -> bool:
    """Whether the current task is inside a transaction on ``conn`` (its own or its caller's)."""
    state = peek(conn)
    task = asyncio.current_task()
    if state is not None and state.owner is not None:
        return state.owner is task
    return conn.in_transaction


@asynccontextmanager
async def write_transaction(conn: aiosqlite.Connection) -> AsyncIterator[aiosqlite.Connection]:
    """Run the block in one write transaction on ``conn``.

    - If the current task already holds a transaction opened by this helper, or the caller
      opened one by hand, the block joins it: nothing is begun or committed here, and an
      exception propagates to whoever owns the transaction.
    - Otherwise the block runs in its own ``BEGIN IMMEDIATE … COMMIT`` (rolled back on any
      exception, cancellation included), serialised with other tasks on the same connection.
    """
    state = state_of(conn)
    task = asyncio.current_task()
    if state.owner is not None and state.owner is task:
        yield conn
        return
    if state.owner is None and conn.in_transaction:
        yield conn
        return
    async with state.lock:
        # Claim ownership before BEGIN: while BEGIN runs, ``conn.in_transaction`` is already
        # true, and another task must wait for the lock rather than join this transaction.
        mark = begin_owning(state, task)
        try:
            try:
                await _begin_immediate(conn)
            except asyncio.CancelledError:
                # The thread may still run the BEGIN the caller gave up on: roll it back
                # (queued after it) before another task could find the connection in a
                # transaction and join it.
                await _settle_rollback(conn)
                raise
            try:
                yield conn
                await conn.commit()
            except BaseException:
                if conn.in_transaction:
                    # To its end even if this task is cancelled again meanwhile: the lock
                    # is only given up once nothing of this transaction is left open.
                    await _settle_rollback(conn)
                raise
        finally:
            end_owning(state, mark)


async def _settle_rollback(conn: aiosqlite.Connection) -> None:
    """Roll back whatever the connection has open, absorbing cancellations meanwhile."""

    async def rollback() -> None:
        with contextlib.suppress(sqlite3.Error, ValueError):  # ValueError: conn closed
            await conn.rollback()

    with contextlib.suppress(asyncio.CancelledError):
        await run_to_completion(rollback())


class _BeginBusy(Exception):
    """``BEGIN IMMEDIATE`` answered SQLITE_BUSY at once (carried back to retry off-thread)."""

    def __init__(self, error: sqlite3.OperationalError) -> None:
        super().__init__(str(error))
        self.error = error


class _Hop:
    """Who decides the fate of one queued transaction: the thread or a cancelled caller.

    The common path costs one uncontended lock on each side and no extra wake-ups; only a
    caller cancelled while the thread runs the transaction is woken when it ends.
    """

    __slots__ = ("_abandoned", "_done", "_lock", "_loop", "_running")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._lock = threading.Lock()
        self._loop = loop
        self._running = False
        self._abandoned = False
        self._done: asyncio.Event | None = None

    def start(self) -> bool:
        """On the thread: whether to run (False once the caller gave up before it began)."""
        with self._lock:
            self._running = not self._abandoned
            return self._running

    def finish(self) -> None:
        """On the thread: the transaction is over (committed or rolled back)."""
        with self._lock:
            self._running = False
            if self._done is not None:
                self._loop.call_soon_threadsafe(self._done.set)

    def abandon(self) -> asyncio.Event | None:
        """On the loop: give up; returns the event to wait for if the thread is mid-way."""
        with self._lock:
            self._abandoned = True
            if self._running:
                self._done = asyncio.Event()
            return self._done


_LEVELS = {"normal": 1, "full": 2}
"""``PRAGMA synchronous`` numbers of the levels a transaction may ask for."""


def _synchronous_level(db: sqlite3.Connection) -> int:
    row = db.execute("PRAGMA synchronous").fetchone()
    return int(row["synchronous"] if isinstance(row, dict) else row[0])


def _transaction(db: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    try:
        db.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        if _is_busy(exc):
            raise _BeginBusy(exc) from exc
        raise
    try:
        result = fn(db)
        if db.in_transaction:
            # The SQL statement comes from the connection's statement cache;
            # ``Connection.commit()`` compiles a fresh ``COMMIT`` every time, which cost
            # 15-20 us more per transaction here (most of it on the thread, after a fsync).
            db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.rollback()
        raise
    return result


def _at_level(db: sqlite3.Connection, level: int, fn: Callable[[sqlite3.Connection], T]) -> T:
    """Run the transaction at ``level``, then put the connection's own level back.

    The level is a property of the connection, so it is set before ``BEGIN`` (SQLite refuses
    it inside a transaction) and restored after the ``COMMIT`` or ``ROLLBACK``, whatever
    happened: the next transaction on the connection runs at the level it was opened with.
    """
    previous = _synchronous_level(db)
    if previous == level:
        return _transaction(db, fn)
    db.execute(f"PRAGMA synchronous = {level}")
    try:
        return _transaction(db, fn)
    finally:
        db.execute(f"PRAGMA synchronous = {previous}")


def _transaction_body(
    fn: Callable[[sqlite3.Connection], T], hop: _Hop, level: int | None
) -> Callable[[sqlite3.Connection], T | None]:
    def body(db: sqlite3.Connection) -> T | None:
        if not hop.start():
            return None  # the caller was cancelled before this began: write nothing
        try:
            if level is None:
                return _transaction(db, fn)
            return _at_level(db, level, fn)
        finally:
            hop.finish()

    return body


async def _settle(done: asyncio.Event) -> None:
    """Wait for ``done``, absorbing further cancellations of the waiting task."""
    while not done.is_set():
        try:
            await done.wait()
        except asyncio.CancelledError:
            continue


async def _one_hop(
    conn: aiosqlite.Connection, fn: Callable[[sqlite3.Connection], T], level: int | None
) -> T:
    loop = asyncio.get_running_loop()
    for attempt in range(_BEGIN_RETRIES):
        hop = _Hop(loop)
        try:
            return cast(T, await run_sync(conn, _transaction_body(fn, hop, level)))
        except _BeginBusy as busy:
            if attempt == _BEGIN_RETRIES - 1:
                raise busy.error from None
        except asyncio.CancelledError:
            # Keep the lock until the thread is done with this transaction: releasing it
            # earlier would let another task see the open transaction and join it.
            done = hop.abandon()
            if done is not None:
                await _settle(done)
            raise
        await asyncio.sleep(_BEGIN_RETRY_DELAY * (attempt + 1))
    raise AssertionError("unreachable")  # pragma: no cover


async def run_write_transaction(
    conn: aiosqlite.Connection,
    fn: Callable[[sqlite3.Connection], T],
    *,
    synchronous: str | None = None,
) -> T:
    """Run ``fn(db)`` as one write transaction in a single trip to ``conn``'s thread.

    ``db`` is ``conn``'s own ``sqlite3.Connection`` (same row factory: ``dict`` rows on a
    Studio connection); ``fn`` issues its statements on it synchronously and returns a value,
    which is returned here. Same rules as :func:`write_transaction`:

    - If the current task already holds a transaction on ``conn`` (opened by
      :func:`write_transaction` or by hand), ``fn`` joins it: it runs with no ``BEGIN`` or
      ``COMMIT``, and whatever it raises is left to the transaction's owner.
    - Otherwise ``BEGIN IMMEDIATE``, ``fn`` and ``COMMIT`` run together on the thread, with
      a ``ROLLBACK`` instead of the ``COMMIT`` if ``fn`` raises anything; other tasks sharing
      ``conn`` wait for it, and it waits for theirs. ``BEGIN`` waits ``busy_timeout`` for the
      write lock and is retried when SQLite reports it busy at once.

    ``fn`` must not commit or roll back itself. If the awaiting task is cancelled before the
    thread takes the call, nothing is written; once taken, the transaction completes (commit,
    or rollback if ``fn`` raised) before ``CancelledError`` is raised here.

    ``synchronous`` (``"full"`` or ``"normal"``; ``None``, the default, keeps the connection's
    level) runs this one transaction at that ``PRAGMA synchronous`` level: it is set on the
    thread just before ``BEGIN`` and the connection's own level is restored right after the
    ``COMMIT`` or ``ROLLBACK`` (also when ``fn`` or the commit raises), in the same trip, so
    no other transaction on ``conn`` ever runs at it. At ``"normal"`` the commit skips the
    WAL fsync: it survives a crash of the process but may be lost on power loss (it becomes
    durable at the next ``FULL`` commit or checkpoint). Use it only for writes whose loss on
    power failure is harmless. A value other than those raises :class:`InvalidSetting`
    naming ``synchronous``; asking for a level while the current task is inside an open
    transaction raises :class:`SynchronousInTransaction` (SQLite cannot change the level
    inside a transaction, and a joined transaction commits at its owner's level), with
    nothing run. On PostgreSQL ``BEGIN IMMEDIATE`` runs as ``BEGIN`` (READ COMMITTED) and
    ``synchronous`` only changes what ``PRAGMA synchronous`` reports: commits are as durable
    as the server's ``synchronous_commit``.
    """
    level = None if synchronous is None else _LEVELS[check_synchronous(synchronous)]
    state = state_of(conn)
    task = asyncio.current_task()
    owner = state.owner
    if (owner is not None and owner is task) or (owner is None and conn.in_transaction):
        if level is not None:
            raise SynchronousInTransaction(
                f"synchronous={synchronous!r} cannot apply inside an open transaction: the "
                "level only changes between transactions (call without synchronous= to join)"
            )
        return await run_sync(conn, fn)
    # The lock by hand rather than ``async with``: one coroutine less on every transaction.
    lock = state.lock
    await lock.acquire()
    mark = begin_owning(state, task)
    try:
        return await _one_hop(conn, fn, level)
    finally:
        end_owning(state, mark)
        lock.release()
