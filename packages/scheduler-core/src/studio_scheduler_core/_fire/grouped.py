"""Writes that arrive within one turn of the event loop, committed in one transaction.

The terminal writes of fires that end together (a batch of fires started together ends
together) would each take the write lock and a WAL fsync in turn; grouped, they cost one
trip to the database thread and one fsync. Each write keeps its own guards and runs inside
its own savepoint: one that raises is rolled back alone, and its caller gets the exception.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

import aiosqlite

from studio_state import run_write_transaction

T = TypeVar("T")

_Item = tuple[Callable[[sqlite3.Connection], Any], Callable[[], None] | None, "asyncio.Future[Any]"]


def _run_all(
    db: sqlite3.Connection, fns: list[Callable[[sqlite3.Connection], Any]]
) -> list[tuple[bool, Any]]:
    results: list[tuple[bool, Any]] = []
    for fn in fns:
        db.execute("SAVEPOINT studio_grouped")
        try:
            value = fn(db)
        except Exception as exc:
            db.execute("ROLLBACK TO studio_grouped")
            db.execute("RELEASE studio_grouped")
            results.append((False, exc))
            continue
        db.execute("RELEASE studio_grouped")
        results.append((True, value))
    return results


class WriteGroup:
    """Runs functions for :func:`studio_state.run_write_transaction` submitted within one
    loop turn together, in one transaction on ``conn`` (at ``synchronous``, when given)."""

    def __init__(self, conn: aiosqlite.Connection, *, synchronous: str | None = None) -> None:
        self._conn = conn
        self._synchronous = synchronous
        self._queue: list[_Item] = []
        self._flusher: asyncio.Task[None] | None = None

    async def run(
        self, fn: Callable[[sqlite3.Connection], T], on_commit: Callable[[], None] | None = None
    ) -> T:
        """``fn(db)`` in the group's next transaction; its result, or what it raised (its own
        writes rolled back). When ``fn`` returned, ``on_commit`` runs right after that
        transaction commits, before any caller of the group resumes. If the transaction
        fails, every caller of the group gets that error.
        """
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append((fn, on_commit, future))
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush(), name="studio-grouped-writes")
        result: T = await future
        return result

    async def _flush(self) -> None:
        try:
            await asyncio.sleep(0)  # the writes of this loop turn join the group
            while self._queue:
                items = [item for item in self._queue if not item[2].done()]
                self._queue = []
                if items:
                    await self._commit(items)
        finally:
            self._flusher = None
            queue, self._queue = self._queue, []
            for _, _, future in queue:
                if not future.done():
                    future.set_exception(RuntimeError("grouped write abandoned"))

    async def _commit(self, items: list[_Item]) -> None:
        fns = [fn for fn, _, _ in items]
        try:
            results = await run_write_transaction(
                self._conn, lambda db: _run_all(db, fns), synchronous=self._synchronous
            )
        except Exception as exc:
            for _, _, future in items:
                if not future.done():
                    future.set_exception(exc)
            return
        except BaseException:
            for _, _, future in items:
                future.cancel()
            raise
        for (_, on_commit, _), (ok, _) in zip(items, results, strict=True):
            if ok and on_commit is not None:
                on_commit()
        for (_, _, future), (ok, value) in zip(items, results, strict=True):
            if future.done():
                continue
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)
