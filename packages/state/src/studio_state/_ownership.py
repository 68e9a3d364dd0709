"""Who a connection's open transaction belongs to, and what other tasks' statements do then.

Several tasks share one connection (the engine's: the tick, every fire, the API's writes).
A transaction opened by :func:`~._transactions.write_transaction` or
:func:`~._transactions.run_write_transaction` belongs to the task that opened it, and to the
tasks that task starts while it is open (they inherit its context: a write it hands to
``run_to_completion`` is still its own).

On SQLite a statement of another task sent meanwhile runs inside that transaction: it reads
the uncommitted rows, which the one-writer engine has long tolerated. On PostgreSQL it must
not: a statement that fails there (a deadlock, a constraint) aborts the whole transaction,
and every statement any task sends until the owner rolls back then fails with "current
transaction is aborted" (a health read, a tick's concern, another request). So a PostgreSQL
connection (:class:`GatedConnection`) makes a statement of a task outside the open
transaction wait until it has ended, then runs it on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Awaitable, Callable
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import Any, cast

import aiosqlite


@dataclass
class TxnState:
    """The lock serialising a connection's transactions, the task that owns the open one, and
    the token naming it (what the owner's context carries)."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    owner: asyncio.Task[object] | None = None
    token: object | None = None


_states: weakref.WeakKeyDictionary[aiosqlite.Connection, TxnState] = weakref.WeakKeyDictionary()
_INSIDE: ContextVar[frozenset[int]] = ContextVar("studio_state_inside", default=frozenset())
"""The transactions (``id`` of their tokens) the current context is inside."""


def state_of(conn: aiosqlite.Connection) -> TxnState:
    """The transaction state of ``conn`` (made on first use)."""
    state = _states.get(conn)
    if state is None:
        state = _states[conn] = TxnState()
    return state


def peek(conn: aiosqlite.Connection) -> TxnState | None:
    """The transaction state of ``conn``, if it ever had one."""
    return _states.get(conn)


def begin_owning(state: TxnState, task: asyncio.Task[Any] | None) -> Token[frozenset[int]]:
    """The current task owns ``state``'s transaction from now (call with its lock held)."""
    state.owner = task
    state.token = token = object()
    return _INSIDE.set(_INSIDE.get() | {id(token)})


def end_owning(state: TxnState, mark: Token[frozenset[int]]) -> None:
    """The transaction is over (committed or rolled back)."""
    state.owner = None
    state.token = None
    # ValueError: closed from another context (a generator finalised late).
    with contextlib.suppress(ValueError):
        _INSIDE.reset(mark)


def foreign(state: TxnState) -> bool:
    """Whether a transaction is open on the connection that the current context is not in."""
    if state.owner is None or state.owner is asyncio.current_task():
        return False
    token = state.token
    return token is None or id(token) not in _INSIDE.get()


class GatedConnection(aiosqlite.Connection):
    """An ``aiosqlite.Connection`` whose statements from outside the open transaction wait
    for it to end (PostgreSQL; see the module's docstring)."""

    async def _execute(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        # aiosqlite's own entry point for every call (see ``_hop``); it is untyped.
        submit = cast("Callable[..., Awaitable[Any]]", super()._execute)
        state = _states.get(self)
        if state is not None and foreign(state):
            # Holding the lock, nothing else can begin before this statement is queued.
            async with state.lock:
                return await submit(fn, *args, **kwargs)
        return await submit(fn, *args, **kwargs)
