"""The outbox as the engine's delivery concern sees it, on either backend.

On SQLite the outbox's functions run on the engine's own connection. Either way a pass's
transition rows name the engine (:data:`ENGINE_ACTOR`) as their actor, not the outbox's own
default. On PostgreSQL the
outbox's PostgreSQL functions (:mod:`studio_outbox.postgres`) take psycopg async
connections: :class:`PostgresOutbox` opens two of its own on the database's URL, on first
use — one for delivery passes (each step commits its own short transaction, its claims
``FOR UPDATE SKIP LOCKED``, so any number of nodes can drain one table), one for the due-time
and backlog reads, so a read never lands inside a pass's transaction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import aiosqlite

import studio_outbox
from studio_state import Clock

from .._records.vocab import ENGINE_ACTOR

if TYPE_CHECKING:
    import psycopg


class Outbox(Protocol):
    """What :class:`~studio_scheduler_core._engine.delivery.Delivery` calls."""

    async def next_due_at(self) -> float | None: ...

    async def due_count(self, now: float) -> int:
        """How many dispatches a delivery pass would pick up at ``now``."""
        ...

    async def deliver(
        self, *, clock: Clock, transport: Any, webhook_transport: Any
    ) -> dict[str, int]: ...

    async def aclose(self) -> None: ...


class SqliteOutbox:
    """The outbox's functions on the engine's connection."""

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn

    async def next_due_at(self) -> float | None:
        return await studio_outbox.next_due_at(self._conn)

    async def due_count(self, now: float) -> int:
        backlog = await studio_outbox.dispatch_backlog(self._conn, now=now)
        return int(backlog.get("due", 0))

    async def deliver(
        self, *, clock: Clock, transport: Any, webhook_transport: Any
    ) -> dict[str, int]:
        return await studio_outbox.deliver_due_dispatches(
            self._conn,
            clock=clock,
            transport=transport,
            webhook_transport=webhook_transport,
            actor=ENGINE_ACTOR,
        )

    async def aclose(self) -> None:
        """The connection is the engine's: nothing to close."""


class PostgresOutbox:
    """The outbox's PostgreSQL functions on two connections of their own (see the module)."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._passes: psycopg.AsyncConnection[Any] | None = None
        self._reads: psycopg.AsyncConnection[Any] | None = None

    async def _open(self) -> psycopg.AsyncConnection[Any]:
        import psycopg

        return await psycopg.AsyncConnection.connect(self._url, autocommit=True)

    async def _reader(self) -> psycopg.AsyncConnection[Any]:
        if self._reads is None or self._reads.closed:
            self._reads = await self._open()
        return self._reads

    async def next_due_at(self) -> float | None:
        from studio_outbox import postgres

        return await postgres.next_due_at(await self._reader())

    async def due_count(self, now: float) -> int:
        from studio_outbox import postgres

        backlog = await postgres.dispatch_backlog(await self._reader(), now=now)
        return int(backlog.get("due", 0))

    async def deliver(
        self, *, clock: Clock, transport: Any, webhook_transport: Any
    ) -> dict[str, int]:
        from studio_outbox import postgres

        if self._passes is None or self._passes.closed:
            self._passes = await self._open()
        return await postgres.deliver_due_dispatches(
            self._passes,
            clock=clock,
            transport=transport,
            webhook_transport=webhook_transport,
            actor=ENGINE_ACTOR,
        )

    async def aclose(self) -> None:
        """Close both connections (a pass still running was cancelled first)."""
        for conn in (self._passes, self._reads):
            if conn is not None:
                await conn.close()
        self._passes = self._reads = None
