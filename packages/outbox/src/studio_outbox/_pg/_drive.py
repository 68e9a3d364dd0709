"""Run the outbox's step generators on a PostgreSQL connection.

The outbox's SQL is written once as generators of steps (``studio_outbox._drive``) with qmark
parameters. This module drives them on a psycopg 3 ``AsyncConnection`` or ``Connection``, or on
an asyncpg ``Connection``, returning rows as ``dict`` as the SQLite drivers do, and opens a
transaction only when the caller has none open (a producer's open transaction is joined).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from .._drive import ExecMany, Fetch, Steps

if TYPE_CHECKING:
    import psycopg

T = TypeVar("T")
Row = dict[str, Any]

_QMARK = re.compile(r"\?")


@dataclass(frozen=True, slots=True)
class Script:
    """Several statements without parameters (DDL); its result is ``None``."""

    sql: str


PgStep = Fetch | ExecMany | Script
PgSteps = Generator[PgStep, Any, T]


def percent(sql: str) -> str:
    """qmark parameters to psycopg's ``%s`` (the outbox's SQL holds no literal ``%`` or ``?``)."""
    return sql.replace("?", "%s")


def dollar(sql: str) -> str:
    """qmark parameters to asyncpg's ``$1 … $n``."""
    count = 0

    def number(_: re.Match[str]) -> str:
        nonlocal count
        count += 1
        return f"${count}"

    return _QMARK.sub(number, sql)


def is_asyncpg(conn: object) -> bool:
    """Whether ``conn`` is an asyncpg connection (checked without importing asyncpg)."""
    return type(conn).__module__.split(".", 1)[0] == "asyncpg"


def _advance(steps: PgSteps[T], result: Any, error: BaseException | None) -> tuple[bool, Any]:
    try:
        step = steps.throw(error) if error is not None else steps.send(result)
    except StopIteration as stop:
        return True, stop.value
    return False, step


def _json_as_text(cursor: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> None:
    # JSON columns come back as their text, as SQLite and asyncpg return them (the shared
    # steps decode the payload themselves).
    from psycopg.types.string import TextLoader

    cursor.adapters.register_loader("json", TextLoader)


async def _psycopg_async_step(conn: psycopg.AsyncConnection[Any], step: PgStep) -> Any:
    from psycopg.rows import dict_row

    async with conn.cursor(row_factory=dict_row) as cursor:
        _json_as_text(cursor)
        if isinstance(step, Script):
            await cursor.execute(step.sql.encode())
            return None
        if isinstance(step, ExecMany):
            await cursor.executemany(percent(step.sql), step.params)
            return None
        await cursor.execute(percent(step.sql), step.params)
        return await cursor.fetchall() if cursor.description else []


def _psycopg_sync_step(conn: psycopg.Connection[Any], step: PgStep) -> Any:
    from psycopg.rows import dict_row

    with conn.cursor(row_factory=dict_row) as cursor:
        _json_as_text(cursor)
        if isinstance(step, Script):
            cursor.execute(step.sql.encode())
            return None
        if isinstance(step, ExecMany):
            cursor.executemany(percent(step.sql), step.params)
            return None
        cursor.execute(percent(step.sql), step.params)
        return cursor.fetchall() if cursor.description else []


async def _asyncpg_step(conn: Any, step: PgStep) -> Any:
    if isinstance(step, Script):
        await conn.execute(step.sql)
        return None
    if isinstance(step, ExecMany):
        await conn.executemany(dollar(step.sql), [tuple(p) for p in step.params])
        return None
    records = await conn.fetch(dollar(step.sql), *step.params)
    return [dict(record.items()) for record in records]


def _database_errors(conn: object) -> tuple[type[BaseException], ...]:
    if is_asyncpg(conn):
        asyncpg = importlib.import_module("asyncpg")  # optional: only asyncpg's own users have it
        return (asyncpg.PostgresError,)
    import psycopg

    return (psycopg.Error,)


async def run_async(conn: Any, steps: PgSteps[T]) -> T:
    """Run ``steps`` on a psycopg async or asyncpg connection, in whatever transaction is open.

    A database error is raised inside the generator (which may handle it).
    """
    errors = _database_errors(conn)
    asyncpg_conn = is_asyncpg(conn)
    result: Any = None
    error: BaseException | None = None
    while True:
        done, value = _advance(steps, result, error)
        if done:
            returned: T = value
            return returned
        try:
            if asyncpg_conn:
                result = await _asyncpg_step(conn, value)
            else:
                result = await _psycopg_async_step(conn, value)
            error = None
        except errors as exc:
            result, error = None, exc


def run_sync(conn: psycopg.Connection[Any], steps: PgSteps[T]) -> T:
    """Run ``steps`` on a psycopg (sync) connection, in whatever transaction is open."""
    import psycopg

    result: Any = None
    error: BaseException | None = None
    while True:
        done, value = _advance(steps, result, error)
        if done:
            returned: T = value
            return returned
        try:
            result, error = _psycopg_sync_step(conn, value), None
        except psycopg.Error as exc:
            result, error = None, exc


def in_transaction(conn: Any) -> bool:
    """Whether the caller has a transaction open on ``conn`` (async or sync driver)."""
    if is_asyncpg(conn):
        return bool(conn.is_in_transaction())
    from psycopg.pq import TransactionStatus

    return bool(conn.info.transaction_status != TransactionStatus.IDLE)


async def run_in_transaction_async(conn: Any, steps: PgSteps[T]) -> T:
    """Join the producer's open transaction (never commit it); otherwise run in our own."""
    if in_transaction(conn):
        return await run_async(conn, steps)
    async with conn.transaction():
        return await run_async(conn, steps)


def run_in_transaction_sync(conn: psycopg.Connection[Any], steps: PgSteps[T]) -> T:
    """:func:`run_in_transaction_async` on a psycopg (sync) connection."""
    if in_transaction(conn):
        return run_sync(conn, steps)
    with conn.transaction():
        return run_sync(conn, steps)


def fetch(sql: str, params: Sequence[Any] = ()) -> Steps[list[Row]]:
    """One :class:`Fetch` as a step generator."""
    rows: list[Row] = yield Fetch(sql, params)
    return rows
