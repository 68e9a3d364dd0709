"""Write transactions: ``BEGIN IMMEDIATE`` that joins a transaction already open.

Several tasks may share one ``aiosqlite.Connection``. A transaction on a connection belongs to
the task that opened it; other tasks wait for it to finish instead of silently writing into
it. A transaction the *caller* opened by hand (``await conn.execute("BEGIN")``) is joined:
that is the transactional-outbox contract, where a producer enqueues inside its own change.
"""

from __future__ import annotations

import asyncio
import sqlite3
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import aiosqlite

# BEGIN IMMEDIATE already waits busy_timeout for the write lock; these retries cover the
# rarer cases where SQLite reports SQLITE_BUSY at once (e.g. a WAL recovery in progress).
_BEGIN_RETRIES = 5
_BEGIN_RETRY_DELAY = 0.05


@dataclass
class _TxnState:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    owner: asyncio.Task[object] | None = None


_states: weakref.WeakKeyDictionary[aiosqlite.Connection, _TxnState] = weakref.WeakKeyDictionary()


def _state(conn: aiosqlite.Connection) -> _TxnState:
    state = _states.get(conn)
    if state is None:
        state = _states[conn] = _TxnState()
    return state


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


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
    state = _states.get(conn)
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
    state = _state(conn)
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
        state.owner = task
        try:
            await _begin_immediate(conn)
        except BaseException:
            state.owner = None
            raise
        try:
            yield conn
            await conn.commit()
        except BaseException:
            if conn.in_transaction:
                await asyncio.shield(conn.rollback())
            raise
        finally:
            state.owner = None
