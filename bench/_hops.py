"""Counting trips to aiosqlite's worker thread (shared by the benchmark scripts).

Every call that crosses to a connection's thread (an execute, a fetch, a commit, a
``run_sync``) goes through ``aiosqlite.Connection._execute``; while a :class:`HopCounter` is
installed, each such call adds one to its ``count``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import aiosqlite

_Execute = Callable[..., Awaitable[Any]]


class HopCounter:
    """Counts calls into aiosqlite's worker thread until :meth:`restore`."""

    def __init__(self) -> None:
        self.count = 0
        self._original: _Execute = aiosqlite.Connection._execute
        counter = self

        async def counting(conn: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
            counter.count += 1
            return await counter._original(conn, fn, *args, **kwargs)

        aiosqlite.Connection._execute = counting  # type: ignore[method-assign,assignment]

    def take(self) -> int:
        """The count so far, which starts again from zero."""
        count, self.count = self.count, 0
        return count

    def restore(self) -> None:
        """Stop counting: calls go straight to aiosqlite again."""
        aiosqlite.Connection._execute = self._original  # type: ignore[method-assign,assignment]
